#!/usr/bin/env bash
# Install test: what a user gets from "meson install".
#
#   test_install.sh MESON BUILD_DIR [SANITIZE [HIREDIS_PC_PATH]]
#
# Installs the build into a temporary DESTDIR, then, as a user of that
# prefix would (nothing from the source or build tree):
#   1. sluice.pc: pkg-config finds it, hiredis is not in its dynamic flags
#      (no public header includes hiredis), libevent_core is;
#   2. a small program including <sluice/sluice.h> builds with nothing but
#      "pkg-config --cflags --libs sluice" and runs against the installed
#      library;
#   3. the same program links statically with "pkg-config --static";
#   4. the installed "sluice --version" runs from the prefix without
#      LD_LIBRARY_PATH (its RPATH is relative to itself, so it resolves
#      inside the DESTDIR, not some other installed copy).
# SANITIZE is the build's b_sanitize ("none", "address,undefined", ...): the
# program must then be linked with the same runtime. HIREDIS_PC_PATH is set
# when the build used a hiredis outside the system's paths (CI's private
# hiredis 1.x): a user of such a hiredis points pkg-config and the loader at
# it too, and so does this test. Prints TAP; needs no Redis.
set -u

if [ $# -lt 2 ]; then
  echo "usage: $0 MESON BUILD_DIR [SANITIZE]" >&2
  exit 2
fi
meson=$1 build=$2 sanitize=${3:-none} hiredis_pc=${4:-}
# The installed things must stand on their own: meson test may set this.
unset LD_LIBRARY_PATH
hiredis_link=()
if [ -n "$hiredis_pc" ]; then
  hiredis_lib=$(PKG_CONFIG_PATH=$hiredis_pc pkg-config --variable=libdir hiredis)
  hiredis_link=("-Wl,-rpath,$hiredis_lib" "-L$hiredis_lib")
  export LD_LIBRARY_PATH=$hiredis_lib # for the installed tool: hiredis only
fi

cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || cc=gcc
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "1..0 # SKIP pkg-config not found"
  exit 77
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root

echo "1..7"
n=0 status=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
  n=$((n + 1))
  echo "not ok $n - $1"
  [ -f "$tmp/out" ] && sed 's/^/#   /' "$tmp/out" | tee /dev/stderr
  status=1
}
bail() { echo "Bail out! $1"; [ -f "$tmp/out" ] && sed 's/^/#   /' "$tmp/out"; exit 1; }

if "$meson" install -C "$build" --destdir "$root" --no-rebuild >"$tmp/out" 2>&1; then
  ok "meson install --destdir"
else
  bail "meson install failed"
fi

pc=$(find "$root" -name sluice.pc -path '*/pkgconfig/*' | head -n1)
[ -n "$pc" ] || bail "no sluice.pc installed"
# DESTDIR moved the prefix: point the .pc's prefix at where it really is now,
# as for an install with --prefix=<that directory> (PKG_CONFIG_SYSROOT_DIR
# would rewrite libevent's system paths as well).
prefix=$(sed -n 's/^prefix=//p' "$pc")
mkdir -p "$tmp/pc"
sed "s|^prefix=.*|prefix=$root$prefix|" "$pc" >"$tmp/pc/sluice.pc"
export PKG_CONFIG_PATH=$tmp/pc${hiredis_pc:+:$hiredis_pc}
cflags=$(pkg-config --cflags sluice 2>"$tmp/out") || bail "pkg-config sluice failed"
libs=$(pkg-config --libs sluice 2>"$tmp/out") || bail "pkg-config sluice failed"
libdir=$(pkg-config --variable=libdir sluice)
{ echo "cflags: $cflags"; echo "libs: $libs"; } >"$tmp/out"
if [[ " $cflags $libs " != *hiredis* ]] && [[ " $libs " == *" -levent_core "* ]] &&
   [[ " $libs " == *" -lsluice "* ]]; then
  ok "sluice.pc: -lsluice and libevent_core; hiredis only for static linking"
else
  not_ok "sluice.pc: -lsluice and libevent_core; hiredis only for static linking"
fi

cat >"$tmp/app.c" <<'APP'
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

int main(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = "unix:///nonexistent/sluice-install-test.sock";
  sluice_client *c = NULL;
  if (!base || sluice_client_new(base, &o, &c) != SLUICE_OK) return 1;
  sluice_client_free(c);
  event_base_dispatch(base);
  event_base_free(base);
  printf("%s %s\n", sluice_version(), sluice_err_name(SLUICE_ETIMEDOUT));
  return strcmp(sluice_version(), SLUICE_VERSION_STRING) != 0;
}
APP
san=()
[ "$sanitize" != none ] && [ -n "$sanitize" ] && san=("-fsanitize=$sanitize")
# shellcheck disable=SC2086
if "$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" "$tmp/app.c" -o "$tmp/app" \
    $cflags $libs -Wl,-rpath,"$libdir" "${hiredis_link[@]}" >"$tmp/out" 2>&1; then
  ok "a program builds with only pkg-config sluice"
else
  not_ok "a program builds with only pkg-config sluice"
fi
if [ -x "$tmp/app" ] && "$tmp/app" >"$tmp/out" 2>&1 &&
   grep -qx "$(sed -n 's/^#define SLUICE_VERSION_STRING "\(.*\)"/\1/p' \
      "$root"/*/include/sluice/common.h "$root"/*/*/include/sluice/common.h 2>/dev/null |
      head -n1) SLUICE_ETIMEDOUT" "$tmp/out"; then
  ok "the program runs against the installed library"
else
  not_ok "the program runs against the installed library"
fi

# Static linking: libsluice.a plus what "pkg-config --static" adds (hiredis).
# shellcheck disable=SC2046,SC2086
if [ -f "$libdir/libsluice.a" ] &&
   "$cc" -std=c11 "${san[@]}" "$tmp/app.c" -o "$tmp/app_static" $cflags "$libdir/libsluice.a" \
     $(pkg-config --static --libs sluice | sed 's/-lsluice//; s/-L[^ ]*//g') "${hiredis_link[@]}" \
     >"$tmp/out" 2>&1 &&
   "$tmp/app_static" >"$tmp/out" 2>&1; then
  ok "a program links libsluice.a with pkg-config --static sluice"
else
  not_ok "a program links libsluice.a with pkg-config --static sluice"
fi

tool=$(find "$root" -type f -name sluice -path '*/bin/*' | head -n1)
if [ -n "$tool" ] && "$tool" --version >"$tmp/out" 2>&1 && grep -q '^sluice ' "$tmp/out"; then
  ok "installed sluice --version runs without LD_LIBRARY_PATH"
else
  not_ok "installed sluice --version runs without LD_LIBRARY_PATH"
fi
if [ -n "$tool" ] && command -v ldd >/dev/null 2>&1; then
  ldd "$tool" >"$tmp/out" 2>&1
  if grep -q "libsluice\.so\.[0-9]* => $root/" "$tmp/out"; then
    ok "installed sluice loads libsluice from its own prefix"
  else
    not_ok "installed sluice loads libsluice from its own prefix"
  fi
else
  ok "installed sluice loads libsluice from its own prefix # SKIP no ldd"
fi
exit $status
