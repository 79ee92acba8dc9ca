# shellcheck shell=bash
# Sourced by scripts/hiredis1.sh and scripts/servers.sh: a private apt
# state for another Debian suite, on the machine's own Debian archive.
#
#   . scripts/debian_archive.sh
#   da_init NAME              # NAME prefixes the messages
#   da_apt DIR "deb trixie"   # sets the array da_opts; lines: TYPE SUITE
#   apt-get "${da_opts[@]}" update
#
# The archive URI is the one the machine's apt sources use for its own
# release's main suite (not -updates or -security), so no host name is
# written anywhere; entries are checked against the machine's Debian archive
# keyring, which must carry the trixie keys (debian-archive-keyring
# 2023.3+deb12u2 on; an older one is upgraded from the machine's own sources
# when running as root). Nothing is installed: apt's lists and cache live
# under DIR/apt.

da_name=debian_archive.sh
da_keyring=/usr/share/keyrings/debian-archive-keyring.gpg

da_die() { echo "$da_name: $*" >&2; exit 1; }

da_init() {
  da_name=$1
  local c
  for c in apt-get dpkg; do
    command -v $c >/dev/null 2>&1 || da_die "needs $c (Debian)"
  done
  da_check_keyring
}

da_keyring_version() { dpkg-query -W -f='${Version}' debian-archive-keyring 2>/dev/null || true; }

# Debian 12 got the trixie keys in an update of debian-archive-keyring,
# which a stale machine may lack.
da_check_keyring() {
  if ! dpkg --compare-versions "$(da_keyring_version)" ge 2023.3+deb12u2; then
    if [ "$(id -u)" -eq 0 ]; then
      echo "$da_name: upgrading debian-archive-keyring for the trixie keys" >&2
      apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debian-archive-keyring >/dev/null
    fi
    dpkg --compare-versions "$(da_keyring_version)" ge 2023.3+deb12u2 ||
      da_die "debian-archive-keyring $(da_keyring_version) lacks the trixie keys; upgrade it"
  fi
  [ -r "$da_keyring" ] || da_die "no $da_keyring (package debian-archive-keyring)"
}

# The release this machine runs, e.g. bookworm.
da_codename() {
  local codename=
  if [ -r /etc/os-release ]; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  fi
  [ -n "$codename" ] || da_die "cannot tell this machine's Debian release"
  echo "$codename"
}

# The archive URI the machine's apt uses for release $1 itself, from
# one-line .list entries and deb822 .sources.
da_archive_uri() {
  local codename=$1 f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    # deb [opts] URI SUITE COMPONENTS...
    awk -v s="$codename" '
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s) { print $i; exit }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v s="$codename" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled !~ /^[Nn][Oo]/ && (" " suites " ") ~ (" " s " ") && uris != "") {
          split(uris, u, " "); print u[1]; found = 1; exit
        }
        types = suites = uris = enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
      /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      /^Enabled:/ { sub(/^Enabled:[ \t]*/, ""); enabled = $0 }
      END { if (!found) flush() }' "$f"
  done
}

# A fresh private apt state in $1/apt with one entry per further argument
# ("TYPE SUITE", e.g. "deb-src trixie"), main only; sets da_uri and da_opts.
da_apt() {
  local dir=$1 line type suite codename
  shift
  codename=$(da_codename)
  da_uri=$(da_archive_uri "$codename" | head -n 1)
  [ -n "$da_uri" ] || da_die "no apt source for suite $codename found in /etc/apt"
  local apt=$dir/apt
  rm -rf "$apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  : >"$apt/sources.list"
  for line in "$@"; do
    read -r type suite <<<"$line"
    echo "$type [signed-by=$da_keyring] $da_uri $suite main" >>"$apt/sources.list"
  done
  : >"$apt/preferences"
  da_opts=(-q -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::Etc::Preferences=$apt/preferences" -o Dir::Etc::PreferencesParts=/dev/null
    -o "Dir::State=$apt" -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
  # apt hands downloads to its unprivileged _apt user, who cannot write to a
  # private directory; as root, download as root instead of warning about it.
  if [ "$(id -u)" -eq 0 ]; then da_opts+=(-o APT::Sandbox::User=root); fi
}

# apt-get update on the private state, its log in $1/apt-update.log.
da_update() {
  if ! apt-get "${da_opts[@]}" update >"$1/apt-update.log" 2>&1; then
    cat "$1/apt-update.log" >&2
    da_die "apt-get update failed (a NO_PUBKEY error means $da_keyring lacks the trixie keys: update debian-archive-keyring)"
  fi
}
