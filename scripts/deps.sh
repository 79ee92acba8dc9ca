#!/usr/bin/env bash
# Install what sluice needs to build and test, when it is missing.
#
#   scripts/deps.sh [--full] [--bench]
#
# Debian/Ubuntu: installs the missing packages with apt-get (running
# "apt-get update" once first); quiet when everything is present.
# --full also installs what scripts/test.sh --full adds: the Debian
# packaging tools and the ABI checker.
# --bench also installs Node.js and npm for the Node peer benchmarks, wrk
# for bench/gateway.sh and gnuplot for bench/charts.sh.
# It never starts or relies on the system redis service: tests and demos
# start their own private redis-server.
# Elsewhere it checks the tools and names what is missing.
set -euo pipefail

bench=0 full=0
for arg in "$@"; do
  case $arg in
    --bench) bench=1 ;;
    --full) full=1 ;;
    -h | --help) sed -n '2,14s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "deps.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

# Debian packages (taskset comes with util-linux, which is essential).
# clang-format: scripts/format.sh checks the sources' layout (.clang-format).
# libssl-dev and openssl: the TLS build (against hiredis 1.x, which
# scripts/hiredis1.sh fetches) and its tests' certificates.
# mandoc and man-db: the test 'man' lints the man pages (mandoc -T lint) and
# renders them as a user's man(1) does.
# prometheus (about 20 MB): promtool checks the metrics exposition and the
# test 'prom_scrape' runs its own server scraping the gateway; the
# package's service is kept from starting and disabled (see below).
# libclang-rt-dev: clang's runtime libraries, libFuzzer among them (the URL
# fuzzer, test/fuzz/); clang only recommends it.
# iptables and libnetfilter-queue-dev: the partition harness
# (scripts/partition.sh) cuts links with iptables rules in network
# namespaces, and delays and drops packets through an NFQUEUE
# (test/partition/nfq_delay.c) where the kernel has no sch_netem.
# libinih-dev: `sluice agent` reads its rule file with inih (a small INI
# parser that reports the line of an error). nginx (with auth_request) and
# haproxy (SPOE): the suite 'proxies' runs the agent behind the real
# proxies; their services are kept from starting and disabled (see below).
packages=(meson ninja-build pkg-config gcc libc6-dev clang clang-format libclang-rt-dev
          libhiredis-dev libevent-dev redis-server redis-tools valgrind python3 binutils
          libssl-dev openssl mandoc man-db prometheus iptables libnetfilter-queue-dev
          libinih-dev nginx haproxy)
# --full: dpkg-dev (dpkg-buildpackage) and debhelper (dh) build debian/,
# whose other Build-Depends are all above; build-essential, which
# dpkg-buildpackage requires; lintian checks the packages (scripts/deb.sh);
# abigail-tools has abidw and abidiff (scripts/abi.sh).
if [ "$full" = 1 ]; then
  packages+=(dpkg-dev debhelper build-essential lintian abigail-tools)
fi
# gnuplot-nox: bench/charts.sh draws the results as SVG (no X11 libraries).
# Node may come from elsewhere (nodesource's nodejs ships npm and conflicts
# with Debian's npm), so for it the commands are what count.
if [ "$bench" = 1 ]; then
  packages+=(wrk gnuplot-nox)
  command -v node >/dev/null 2>&1 || packages+=(nodejs)
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi

have_pkg() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

if command -v apt-get >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for p in "${packages[@]}"; do
    have_pkg "$p" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && exit 0

  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "deps.sh: missing packages (${missing[*]}) and not root; install them first" >&2
      exit 1
    fi
  fi
  echo "deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  # Services installed here never start (invoke-rc.d asks policy-rc.d; 101
  # means "not allowed"): tests start their own private servers.
  policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    own_policy=1
  fi
  rc=0
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  [ "$own_policy" = 1 ] && "${sudo[@]}" rm -f "$policy"
  [ "$rc" = 0 ] || exit "$rc"
  # Nor at the next boot (the package enables its unit).
  for service in prometheus nginx haproxy; do
    if [[ " ${missing[*]} " == *" $service "* ]] && [ -d /run/systemd/system ]; then
      "${sudo[@]}" systemctl disable --now "$service.service" >/dev/null 2>&1 || true
    fi
  done
  for p in "${missing[@]}"; do
    have_pkg "$p" || { echo "deps.sh: $p did not install" >&2; exit 1; }
  done
  exit 0
fi

# Not Debian: check by command and pkg-config module.
missing=()
for c in meson ninja pkg-config cc clang clang-format redis-server redis-cli redis-benchmark valgrind python3 readelf openssl \
         prometheus promtool iptables nginx haproxy; do
  command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
if command -v pkg-config >/dev/null 2>&1; then
  for m in hiredis libevent_core libevent_extra libnetfilter_queue inih; do  # _extra (evhttp): top --scrape, agent
    pkg-config --exists "$m" || missing+=("$m (pkg-config)")
  done
fi
if [ "$bench" = 1 ]; then
  for c in node npm wrk; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
fi
if [ "$full" = 1 ]; then
  for c in dpkg-buildpackage dh lintian abidw abidiff; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps.sh: no apt-get here; please install: ${missing[*]}" >&2
  exit 1
fi
