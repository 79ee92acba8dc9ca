#!/usr/bin/env bash
# Run sluice's tests, installing what is missing first.
#
#   scripts/test.sh [--full] [--valgrind | --no-valgrind]
#
# The default run answers "does it work here" (about 4 minutes on 2 cores):
#   gcc       build-ci           meson test: the quick suite (no Redis) first,
#                                then every other suite but the topology
#                                variants (the single-Redis suites, and the
#                                cluster, sentinel and topology tests)
#   topo      build-ci           a look at the topology variants: the
#                                semaphore suite on a Redis Cluster and behind
#                                Sentinel (sem@cluster, sem@sentinel)
# --full runs the whole matrix, what CI runs (.ci/run):
#   gcc       as above
#   topo      build-ci           every behavioural test again on a local
#                                Redis Cluster and a sentinel-managed master
#                                (suites cluster-suites, sentinel-suites)
#   abi       build-ci           scripts/abi.sh check: the library's ABI
#                                against the baseline (src/sluice.abi, the
#                                symbols file)
#   subproject (own temp dir)    scripts/subproject.sh: a meson project takes
#                                sluice as a subproject, runs a program
#   deb       (own temp dir)     scripts/deb.sh: the Debian packages built,
#                                lintian, installed, a program built with
#                                pkg-config and run, the tool run, removed
#   soak      build-ci           test/soak for SLUICE_SOAK_S seconds (default
#                                60): every primitive under injected Redis
#                                faults (scripts/soak.sh); one case; then
#                                --topology sentinel for SLUICE_SOAK_FO_S
#                                (default 60), failovers among the faults,
#                                a second case; a 15 s run under ASan
#                                follows the asan pass's tests
#   partition build-ci           scripts/partition.sh: a Sentinel set and a
#                                cluster, and client processes, in network
#                                namespaces under cuts and a slow lossy link;
#                                one case per scenario and property
#   clang     build-ci-clang     compile only, to stay warning-free on clang;
#                                then the URL, SPOP and HTTP fuzzers (libFuzzer,
#                                test/fuzz/)
#                                for SLUICE_FUZZ_S seconds (default 60) each,
#                                one case each
#   format    (no build)         scripts/format.sh: the sources' layout
#                                against .clang-format; one case
#   hiredis1  build-ci-hiredis1  against Debian 13's hiredis 1.x with TLS
#                                (-Dtls=enabled), which scripts/hiredis1.sh
#                                unpacks into build-hiredis1/ (not installed;
#                                the binaries load it by their rpath): the
#                                tests of what differs between the versions
#                                (reply limits, TLS, connection callbacks);
#                                the same configuration built with clang
#                                (compile only); then every suite but the
#                                topology variants under ASan + UBSan
#                                (build-ci-hiredis1-clang, -asan)
#   valgrind  build-ci           meson test --setup valgrind (which leaves
#                                the topology variants out); then the
#                                hiredis 1.x build's version tests
# --valgrind adds the valgrind pass to the default run, --no-valgrind drops
# it from --full.
#
# Test binaries and the scripts print TAP; scripts/count_tap.py counts their
# cases from meson's test logs (a binary that dies part-way counts as
# failed). A build that fails counts as one failed case; the clang build and
# the format check count as one case each.
# The summary names every failed test (binary and cases) under its pass,
# with the log that holds its output (meson's testlog*.txt); the last line
# is "N passed, N failed"; the exit status is 1 if any failed.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
root=$(pwd)

full=0
valgrind=
for arg in "$@"; do
  case $arg in
    --full) full=1 ;;
    --valgrind) valgrind=yes ;;
    --no-valgrind) valgrind=no ;;
    -h | --help) sed -n '2,60s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
if [ -z "$valgrind" ]; then
  valgrind=no
  [ $full = 1 ] && valgrind=yes
fi

deps=()
[ $full = 1 ] && deps=(--full)
scripts/deps.sh "${deps[@]}" ||
  { echo "test.sh: installing dependencies failed"; echo "0 passed, 1 failed"; exit 1; }

logs=$root/build-ci-logs
rm -rf "$logs"
mkdir -p "$logs"
state=$logs/tally.jsonl
count() { python3 "$root/scripts/count_tap.py" --state "$state" "$@"; }

start=$SECONDS
timings=()
declare -A took

banner() { printf '\n==== %s ====\n' "$*"; }

# build LABEL DIR [meson setup options...]: configure (or reconfigure) and
# build; output goes to build-ci-logs/LABEL-build.log, shown on failure.
build() {
  local label=$1 dir=$2
  shift 2
  local log=$logs/$label-build.log
  {
    if [ -f "$dir/meson-private/coredata.dat" ]; then
      meson setup --reconfigure "$dir" --werror "$@"
    else
      rm -rf "$dir"
      meson setup "$dir" --werror "$@"
    fi && ninja -C "$dir"
  } >"$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "  [$label] build FAILED; last lines of $log:"
    tail -n 60 "$log" | sed 's/^/    /'
  else
    echo "  [$label] built $dir"
  fi
  return $rc
}

# run_tests LABEL DIR [meson test options...]
run_tests() {
  local label=$1 dir=$2
  shift 2
  local json=$dir/meson-logs/testlog.json
  if [ "${1:-}" = --setup ]; then json=$dir/meson-logs/testlog-$2.json; fi
  rm -f "$json"
  meson test -C "$dir" --no-rebuild --print-errorlogs "$@" 2>&1 | tee "$logs/$label-test.log"
  count --label "$label" --log "$json"
}

pass_done() { took[$1]=$((SECONDS - $2)); timings+=("$1"); }

# The behavioural tests on a cluster and a sentinel set (test/meson.build):
# the gcc and asan passes run them, hiredis1 and valgrind do not (time).
no_topo_variants=(--no-suite cluster-suites --no-suite sentinel-suites)
# What differs between hiredis 0.14 and 1.x (reply limits, TLS, the async
# connection's callbacks): the plain and valgrind runs of the hiredis 1.x
# build take these; its ASan run takes every suite.
h1_sensitive=(malformed handshake tls client blips url)
gcc_ok=0 h1_ok=0

# A pass needs the gcc build, or counts one failure saying so.
need_gcc() {
  [ $gcc_ok = 1 ] && return 0
  count --label "$1" --step "needs the gcc build" --failed
  return 1
}

pass_gcc() {
  banner "gcc: build-ci (--werror)"
  if build gcc build-ci -Dbuildtype=debugoptimized; then
    gcc_ok=1
    # Seconds, no Redis: a broken basic shows before the slow suites run.
    run_tests quick build-ci --suite quick
    run_tests gcc build-ci --no-suite quick "${no_topo_variants[@]}"
  else
    count --label gcc --step "configure + build" --failed
  fi
}

# Every variant (--full), or the semaphore suite on each topology, about
# 20 s (the default run).
pass_topo() {
  local which=(--suite cluster-suites --suite sentinel-suites)
  [ $full = 1 ] || which=(sem@cluster sem@sentinel)
  banner "topo: build-ci (${which[*]})"
  need_gcc topo && run_tests topo build-ci "${which[@]}"
}

# run_script LABEL COMMAND...: a script that prints TAP, counted as one
# binary; its output goes to build-ci-logs/LABEL.log and to the console.
run_script() {
  local label=$1
  shift
  "$@" >"$logs/$label.log" 2>&1
  local rc=$?
  sed 's/^/  /' "$logs/$label.log"
  count --label "$label" --tap "$logs/$label.log" --exit $rc
}

pass_abi() {
  banner "abi: scripts/abi.sh check build-ci"
  need_gcc abi && run_script abi scripts/abi.sh check build-ci
}

pass_subproject() {
  banner "subproject: scripts/subproject.sh"
  run_script subproject scripts/subproject.sh
}

pass_deb() {
  banner "deb: scripts/deb.sh (dpkg-buildpackage, lintian, install, use, purge)"
  run_script deb scripts/deb.sh
}

# count_run LABEL STEP RC LOG: a program run as one case, passed when it
# exited 0; else where its log is.
count_run() {
  if [ "$3" -eq 0 ]; then
    count --label "$1" --step "$2" --ok
  else
    echo "  [$1] $2: exit status $3; its log: $4"
    count --label "$1" --step "$2" --failed
  fi
}

# run_soak LABEL DIR SECONDS [SOAK OPTIONS]: the fault soak as one case; its
# report goes to build-ci-logs/LABEL.log, the summary (and any violation) is
# shown here.
run_soak() {
  local label=$1 dir=$2 secs=$3 log=$logs/$1.log
  shift 3
  # Bounded twice: the soak stops itself about 40 s after SECONDS at worst;
  # timeout is the backstop (SIGTERM makes it kill its redis-server).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    timeout --kill-after=10 $((secs + 120)) "$dir/test/soak" --seconds "$secs" "$@" >"$log" 2>&1
  local rc=$?
  grep -E '^(faults injected|  (sem|rl|dq|failovers):|  holders outnumbering|soak:)|VIOLATION' \
    "$log" | head -n 30 | sed 's/^/  /'
  count_run "$label" "soak ${secs} s" $rc "$log"
}

# run_fuzz LABEL FUZZER SEEDS SECONDS: a libFuzzer target for a bounded
# time as one case. New inputs go to a temporary directory (the seeds in
# the repository are only read); a crash's input is kept in build-ci-logs.
run_fuzz() {
  local label=$1 fuzzer=$2 seeds=$3 secs=$4 log=$logs/$1.log
  if [ ! -x "$fuzzer" ]; then
    echo "  [$label] $fuzzer was not built (clang's libFuzzer missing?)"
    count --label "$label" --step "fuzz ${secs} s" --failed
    return
  fi
  local work
  work=$(mktemp -d)
  timeout --kill-after=10 $((secs + 60)) "$fuzzer" -max_total_time="$secs" \
    -dict="${seeds}.dict" -artifact_prefix="$logs/$label-" "$work" "$seeds" >"$log" 2>&1
  local rc=$?
  rm -rf "$work"
  grep -E '^(#[0-9]+ +DONE|Done )|SUMMARY|fuzz_url:|fuzz_spop:|fuzz_http:' "$log" | tail -n 5 | sed 's/^/  /'
  count_run "$label" "fuzz ${secs} s" $rc "$log"
}

pass_soak() {
  banner "soak: build-ci/test/soak (faults injected into redis-server)"
  need_gcc soak || return
  run_soak soak build-ci "${SLUICE_SOAK_S:-60}"
  # Master + replica + 3 sentinels, failovers among the faults (about 75 s
  # with the sentinels' start and the last failover's end).
  run_soak soak-failover build-ci "${SLUICE_SOAK_FO_S:-60}" --topology sentinel
}

# Sentinel and Cluster under network partitions in network namespaces
# (root; about 5 minutes): see docs/testing.md.
pass_partition() {
  banner "partition: scripts/partition.sh (namespaces, iptables, NFQUEUE)"
  need_gcc partition &&
    run_script partition timeout --kill-after=10 900 scripts/partition.sh --build build-ci
}

pass_asan() {
  banner "asan: build-ci-asan (-Db_sanitize=address,undefined, --werror)"
  if build asan build-ci-asan -Dbuildtype=debugoptimized -Db_sanitize=address,undefined; then
    run_tests asan build-ci-asan --timeout-multiplier 3
    run_soak asan-soak build-ci-asan 15
  else
    count --label asan --step "configure + build" --failed
  fi
}

pass_clang() {
  banner "clang: build-ci-clang (compile only, --werror)"
  if CC=clang build clang build-ci-clang -Dbuildtype=debugoptimized; then
    count --label clang --step "clang --werror build" --ok
    run_fuzz fuzz-url build-ci-clang/test/fuzz/fuzz_url test/fuzz/url "${SLUICE_FUZZ_S:-60}"
    run_fuzz fuzz-spop build-ci-clang/test/fuzz/fuzz_spop test/fuzz/spop "${SLUICE_FUZZ_S:-60}"
    run_fuzz fuzz-http build-ci-clang/test/fuzz/fuzz_http test/fuzz/http "${SLUICE_FUZZ_S:-60}"
  else
    count --label clang --step "clang --werror build" --failed
  fi
}

pass_format() {
  banner "format: scripts/format.sh (.clang-format)"
  if scripts/format.sh; then
    count --label format --step "clang-format check" --ok
  else
    count --label format --step "clang-format check" --failed
  fi
}

pass_hiredis1() {
  banner "hiredis1: build-ci-hiredis1* (hiredis 1.x with TLS, --werror)"
  if pcdir=$(scripts/hiredis1.sh 2>"$logs/hiredis1-fetch.log" | tail -n 1) && [ -n "$pcdir" ]; then
    cat "$logs/hiredis1-fetch.log"
    h1=(-Dbuildtype=debugoptimized -Dpkg_config_path="$pcdir" -Dtls=enabled)
    if build hiredis1 build-ci-hiredis1 "${h1[@]}"; then
      h1_ok=1
      # Which hiredis the tests load, for the log (test_tls checks it too).
      ldd build-ci-hiredis1/src/libsluice.so | grep hiredis | sed 's/^[[:space:]]*/  /'
      run_tests hiredis1 build-ci-hiredis1 "${h1_sensitive[@]}"
    else
      count --label hiredis1 --step "configure + build" --failed
    fi
    # The TLS code exists only in this configuration: clang must see it too,
    # and the sanitizers watch its connection paths.
    if CC=clang build hiredis1-clang build-ci-hiredis1-clang "${h1[@]}"; then
      count --label hiredis1-clang --step "clang --werror build" --ok
    else
      count --label hiredis1-clang --step "clang --werror build" --failed
    fi
    if build hiredis1-asan build-ci-hiredis1-asan "${h1[@]}" -Db_sanitize=address,undefined; then
      run_tests hiredis1-asan build-ci-hiredis1-asan --timeout-multiplier 3 "${no_topo_variants[@]}"
    else
      count --label hiredis1-asan --step "configure + build" --failed
    fi
  else
    echo "  [hiredis1] fetching hiredis 1.x FAILED:"
    sed 's/^/    /' "$logs/hiredis1-fetch.log"
    count --label hiredis1 --step "fetch hiredis 1.x" --failed
  fi
}

pass_valgrind() {
  banner "valgrind: build-ci (meson test --setup valgrind)"
  need_gcc valgrind && run_tests valgrind build-ci --setup valgrind
  # Against hiredis 1.x, where TLS lives too (when this run built it): the
  # tests of what differs between the versions (h1_sensitive).
  if [ $h1_ok = 1 ]; then
    run_tests valgrind-h1 build-ci-hiredis1 --setup valgrind "${h1_sensitive[@]}"
  fi
}

if [ $full = 1 ]; then
  passes=(gcc topo abi subproject deb soak partition asan clang format hiredis1)
else
  passes=(gcc topo)
fi
[ "$valgrind" = yes ] && passes+=(valgrind)
for p in "${passes[@]}"; do
  t=$SECONDS
  "pass_$p"
  pass_done "$p" $t
done

banner "results"
for p in "${timings[@]}"; do
  printf '  %-10s %5ds\n' "$p" "${took[$p]}"
done
printf '  %-10s %5ds\n' total $((SECONDS - start))
count --final
