# shellcheck shell=bash
# Sourced by scripts/servers.sh --debs: Debian's Redis and Valkey as
# binaries instead of builds from source (seconds instead of minutes).
#
# unpack SERVER downloads the server's STEM-server and STEM-tools packages
# (the programs) and the libraries they link, down to the C library and its
# loader, from the machine's own Debian archive through a private apt state
# (scripts/debian_archive.sh), and unpacks them with dpkg -x; nothing is
# installed. Debian 12's C library is older than theirs, so each program
# runs under the unpacked loader with the unpacked libraries only:
# DIR/NAME-VERSION/bin holds redis-server and redis-cli as two-line
# wrappers that exec it (the process keeps the wrapper's pid and, through
# --argv0, its name, so the tests' kills and `--sentinel` work).
# Uses servers.sh's dir and source_of.

# Packages the programs need at run time: the given ones and, through
# Depends, every library package (lib*, zlib1g, gcc-N-base), first
# alternatives only; adduser and the like are the package's scripts' needs.
closure() {
  local -A seen=()
  local queue=("$@") p deps d
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [ -n "${seen[$p]:-}" ] && continue
    seen[$p]=1
    echo "$p"
    deps=$(apt-cache "${da_opts[@]}" show --no-all-versions "$p" |
      sed -n 's/^\(Pre-\)\{0,1\}Depends: //p' | tr ',' '\n' |
      sed -e 's/|.*//' -e 's/(.*)//' -e 's/:any//' -e 's/[[:space:]]//g')
    for d in $deps; do
      case $d in lib* | zlib1g | gcc-*-base) queue+=("$d") ;; esac
    done
  done
}

# unpack SERVER: its binaries and libraries into DIR/NAME-VERSION.
unpack() {
  local s=$1 stem suite want
  read -r stem suite want <<<"$(source_of "$s")"
  local pkg=$stem-tools server=$stem-server cli=$stem-cli
  da_apt "$dir/$s" "deb $suite"
  echo "servers.sh: reading the $suite suite of $da_uri" >&2
  da_update "$dir/$s"
  local version
  version=$(apt-cache "${da_opts[@]}" show --no-all-versions "$pkg" | sed -n 's/^Version: //p')
  local up=${version#*:}
  up=${up%%+dfsg*}
  up=${up%-*}
  case $up in "$want"*) ;; *) echo "servers.sh: $suite has $pkg $version, not $want*" >&2; exit 1 ;; esac
  local prefix=$dir/$s.${up#"$want"} debs=$dir/$s/debs
  rm -rf "$prefix" "$debs"
  mkdir -p "$prefix/bin" "$prefix/root" "$debs"
  mapfile -t pkgs < <(closure "$stem-server" "$pkg")
  echo "servers.sh: fetching $stem $version and its libraries: ${pkgs[*]:2}" >&2
  (cd "$debs" && apt-get "${da_opts[@]}" download "${pkgs[@]}") >"$dir/$s/download.log" 2>&1 ||
    { cat "$dir/$s/download.log" >&2; exit 1; }
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$prefix/root"; done
  local loader
  loader=$(find "$prefix/root" -name 'ld-linux-x86-64.so.2' | head -n 1)
  [ -n "$loader" ] || { echo "servers.sh: no loader in the packages" >&2; exit 1; }
  local libs
  libs=$(find "$prefix/root" -name 'lib*.so*' -not -path '*/share/*' -printf '%h\n' | sort -u | paste -sd:)
  local name prog
  for name in redis-server redis-cli; do
    prog=$server
    [ $name = redis-cli ] && prog=$cli
    [ -x "$prefix/root/usr/bin/$prog" ] || { echo "servers.sh: $pkg has no $prog" >&2; exit 1; }
    printf '#!/bin/sh\nexec %s --library-path %s --argv0 "$0" %s "$@"\n' \
      "$loader" "$libs" "$prefix/root/usr/bin/$prog" >"$prefix/bin/$name"
    chmod +x "$prefix/bin/$name"
  done
  "$prefix/bin/redis-server" --version >&2
  touch "$prefix/bin/.complete"
  rm -rf "$debs"
}

