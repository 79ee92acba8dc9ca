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
# --full runs the whole matrix, what CI runs (.ci/run), in about 28 minutes
# on 2 cores (1681 s in a rehearsal on a fresh clone) instead of the
# hour (3718 s) that running every pass in turn took:
#   gcc       build-ci           the plain build (--werror) and the quick
#                                suite; the other suites' plain run on Redis
#                                7.0 is left out: ASan runs all of them on
#                                7.0, and the servers pass runs the plain
#                                build's redis suite (liveness tests and
#                                all) on Valkey 8.1
#   abi       build-ci           scripts/abi.sh check: the library's ABI
#                                against the baseline (src/sluice.abi, the
#                                symbols file)
#   format    (no build)         scripts/format.sh: the sources' layout
#                                against .clang-format; one case
#   subproject (own temp dir)    scripts/subproject.sh: a meson project takes
#                                sluice as a subproject, runs a program
#   deb       (own temp dir)     scripts/deb.sh: the Debian packages built,
#                                lintian, installed, a program built with
#                                pkg-config and run, the tool run, removed
#                                (before the lanes below run tests)
#   partition build-ci-asan      scripts/partition.sh: a Sentinel set and a
#                                cluster, and client processes (built with
#                                ASan+UBSan), in network namespaces under
#                                cuts and a slow lossy link; one case per
#                                scenario and property
#   soak      build-ci           test/soak for SLUICE_SOAK_S seconds (default
#                                60): every primitive under injected Redis
#                                faults (scripts/soak.sh); one case; then
#                                --topology sentinel for SLUICE_SOAK_FO_S
#                                (default 60), failovers among the faults,
#                                a second case
#   servers   build-ci           the suite redis on Debian 13's Valkey 8.1
#                                (scripts/servers.sh --debs unpacks Valkey
#                                8.1 and Redis 8.0 first, in under a minute,
#                                where building them from source takes
#                                about 12 minutes of both cores); Redis 8.0
#                                runs under the hiredis 1.x ASan build
#                                (h1asan below), as Debian 13 pairs them;
#                                the liveness tests apart (servers_liveness)
#   asan      build-ci-asan      every suite, the topology variants
#                                (cluster-suites, sentinel-suites) included,
#                                under ASan + UBSan; then a 15 s soak
#   hiredis1  build-ci-hiredis1* against Debian 13's hiredis 1.x with TLS
#                                (-Dtls=enabled), which scripts/hiredis1.sh
#                                unpacks into build-hiredis1/ (not installed;
#                                the binaries load it by their rpath): built
#                                with gcc and clang (compile only), and
#                                under ASan + UBSan, which runs every suite
#                                but the topology variants, the suite redis
#                                on Redis 8.0 (the suites that start
#                                sentinels on the PATH's Redis 7.0)
#   clang     build-ci-clang     compile only, to stay warning-free on clang
#   fuzz      build-ci-clang     the URL, SPOP and HTTP fuzzers (libFuzzer,
#                                test/fuzz/) for SLUICE_FUZZ_S seconds
#                                (default 60) each, one case each
#   partition_valgrind build-ci  scripts/partition.sh's cut and cut@cluster
#                                with the clients under valgrind (safety
#                                and clean_exit asserted), after the
#                                fuzzers in their lane
#   valgrind  build-ci           meson test --setup valgrind --suite
#                                memcheck: the tests where memory changes
#                                hands (test/meson.build says which and why;
#                                ASan watches every suite); then, on the
#                                hiredis 1.x build, the tests of what differs
#                                between the versions (h1_sensitive below)
# Wall time, not coverage, is what --full saves: in a rehearsal the cores
# were 45-78 % idle from the twelfth minute on, the tests mostly waiting on
# failovers and timers. What waits runs beside what keeps the cores busy,
# each in a lane of its own (a background subshell with its own log,
# printed when the lane ends, and its own tally): lanes "servers" (Valkey
# 8.1 but its liveness tests) from the start and "wait" (partition, soak)
# once the ASan build is there;
# lane "asan" (the ASan run) once its build is done; lane "h1" (the
# hiredis 1.x ASan run) once its builds are done. The foreground meanwhile
# builds (ASan, hiredis 1.x, deb, clang) under nice, so the lanes' tests
# get the cores first, then runs Valkey 8.1's liveness tests; once the
# ASan lanes end it runs, not niced, valgrind (memcheck suite, then the
# hiredis 1.x build's part) beside lane "fuzz" (the fuzzers, niced, then
# two partition scenarios with the clients under valgrind). Each
# of these places answers a failure seen in rehearsals: beside the ASan
# lanes' parallel runs, the other servers' timing cases missed their
# bounds and valgrind's cases their own timeouts; beside the builds, the
# liveness tests' tool cases (a shell per message) were late. The suites
# that mostly wait on failovers (the topology variants, cluster, sentinel,
# topology, acl, replay, proxies: each test alone) run first in each ASan
# lane. The suite liveness (tests that bound how late work is taken while
# processes die or crowd) runs one test at a time under a lock
# (run_alone), which the soaks (three busy workers) take too, so that no
# two lanes run them at once: in rehearsals under load (average 3 to 10)
# dq_liveness's tool cases missed their lateness bounds while the other
# ASan run's parallel tests, or the soak, ran beside them. Lanes share no
# build directory that is built meanwhile, name their meson logs after
# their pass (--logbase), and every test server, cluster and network
# namespace takes its own free ports and names, as the suites do when
# meson runs them in parallel. The results table gives each pass's time
# and each lane's.
# --valgrind adds the valgrind pass to the default run, --no-valgrind drops
# it from --full.
#
# Test binaries and the scripts print TAP; scripts/count_tap.py counts their
# cases from meson's test logs (a binary that dies part-way counts as
# failed). A build that fails counts as one failed case; the clang build and
# the format check count as one case each.
# The summary names every failed test (binary and cases) under its pass,
# with the log that holds its output (meson's LABEL*.txt); the last line
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
    -h | --help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//p}' "$0"; exit 0 ;;
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
# --full: what keeps the cores busy runs under nice beside the lanes.
nice=()
[ $full = 1 ] && nice=(nice -n 10)
run_nice=() # run_tests's; a pass may set it local


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
    fi && "${nice[@]}" ninja -C "$dir"
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

# timing_lock COMMAND...: COMMAND holding build-ci-logs/timing.lock. In
# --full's lanes the suite liveness (test/meson.build) and the soaks (three
# busy workers) take it, so that neither runs beside the other.
timing_lock() {
  (
    flock 9
    "$@"
  ) 9>"$logs/timing.lock"
}

# run_alone LABEL DIR [meson test options...]: run_tests one test at a
# time, holding the timing lock.
run_alone() { timing_lock run_tests "$@" --num-processes 1; }

# run_tests LABEL DIR [meson test options...]: meson's logs are
# DIR/meson-logs/LABEL[-SETUP].{txt,json}, so runs in one build directory
# at once keep theirs apart.
run_tests() {
  local label=$1 dir=$2
  shift 2
  local json=$dir/meson-logs/$label.json
  if [ "${1:-}" = --setup ]; then json=$dir/meson-logs/$label-$2.json; fi
  rm -f "$json"
  "${run_nice[@]}" meson test -C "$dir" --no-rebuild --print-errorlogs --logbase "$label" "$@" 2>&1 |
    tee "$logs/$label-test.log"
  count --label "$label" --log "$json"
}

pass_done() { took[$1]=$((SECONDS - $2)); timings+=("$1"); }

# The behavioural tests on a cluster and a sentinel set (test/redis/meson.build):
# the gcc and asan passes run them, hiredis1 and valgrind do not (time).
no_topo_variants=(--no-suite cluster-suites --no-suite sentinel-suites)
# The suites whose tests run alone (is_parallel: false in test/*/meson.build)
# and wait on failovers and timers: --full runs them apart from the rest,
# without the timing lock (run_alone).
serial_suites=(cluster-suites sentinel-suites topology cluster acl replay sentinel proxies)
only_serial=() no_serial=()
for s in "${serial_suites[@]}"; do
  only_serial+=(--suite "$s")
  no_serial+=(--no-suite "$s")
done
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
    # --full: the asan pass runs these (and the servers pass the redis
    # suite on this build).
    [ $full = 1 ] || run_tests gcc build-ci --no-suite quick "${no_topo_variants[@]}"
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
  run_script deb "${nice[@]}" scripts/deb.sh
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
  "${nice[@]}" timeout --kill-after=10 $((secs + 60)) "$fuzzer" -max_total_time="$secs" \
    -dict="${seeds}.dict" -artifact_prefix="$logs/$label-" "$work" "$seeds" >"$log" 2>&1
  local rc=$?
  rm -rf "$work"
  grep -E '^(#[0-9]+ +DONE|Done )|SUMMARY|fuzz_url:|fuzz_spop:|fuzz_http:' "$log" | tail -n 5 | sed 's/^/  /'
  count_run "$label" "fuzz ${secs} s" $rc "$log"
}

pass_soak() {
  banner "soak: build-ci/test/soak (faults injected into redis-server)"
  need_gcc soak || return
  timing_lock run_soak soak build-ci "${SLUICE_SOAK_S:-60}"
  # Master + replica + 3 sentinels, failovers among the faults (about 75 s
  # with the sentinels' start and the last failover's end); as root, also
  # partitions of the master, in a network namespace of the soak's own.
  local cut=()
  { [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; } && cut=(--partition)
  timing_lock run_soak soak-failover build-ci "${SLUICE_SOAK_FO_S:-60}" --topology sentinel \
    "${cut[@]}"
}

# Sentinel and Cluster under network partitions in network namespaces
# (root; about 5 minutes): see docs/testing.md.
# The clients are the ASan+UBSan build's: a report fails clean_exit.
pass_partition() {
  banner "partition: scripts/partition.sh (namespaces, iptables, NFQUEUE; clients under ASan)"
  if [ $asan_ok != 1 ]; then
    count --label partition --step "the ASan build" --failed
    return
  fi
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_script partition timeout --kill-after=10 900 scripts/partition.sh --build build-ci-asan
}

asan_ok=0 h1asan_ok=0 h1_pcdir=

pass_asan_build() {
  banner "asan-build: build-ci-asan (-Db_sanitize=address,undefined, --werror)"
  if build asan build-ci-asan -Dbuildtype=debugoptimized -Db_sanitize=address,undefined; then
    asan_ok=1
  else
    count --label asan --step "configure + build" --failed
  fi
}

# Every suite, the topology variants included, then a 15 s soak.
pass_asan() {
  banner "asan: build-ci-asan (every suite, then a 15 s soak)"
  [ $asan_ok = 1 ] || { echo "  (not built)"; return; }
  run_tests asan-serial build-ci-asan --timeout-multiplier 3 "${only_serial[@]}" --no-suite liveness
  run_alone asan-liveness build-ci-asan --timeout-multiplier 3 --suite liveness
  run_tests asan build-ci-asan --timeout-multiplier 3 "${no_serial[@]}" --no-suite liveness
  timing_lock run_soak asan-soak build-ci-asan 15
}

pass_clang() {
  banner "clang: build-ci-clang (compile only, --werror)"
  if CC=clang build clang build-ci-clang -Dbuildtype=debugoptimized; then
    count --label clang --step "clang --werror build" --ok
  else
    count --label clang --step "clang --werror build" --failed
  fi
}

# The fuzzers of the clang build (libFuzzer: a clang that lacks it fails
# here, one case each).
pass_fuzz() {
  banner "fuzz: build-ci-clang/test/fuzz (libFuzzer, ${SLUICE_FUZZ_S:-60} s each)"
  run_fuzz fuzz-url build-ci-clang/test/fuzz/fuzz_url test/fuzz/url "${SLUICE_FUZZ_S:-60}"
  run_fuzz fuzz-spop build-ci-clang/test/fuzz/fuzz_spop test/fuzz/spop "${SLUICE_FUZZ_S:-60}"
  run_fuzz fuzz-http build-ci-clang/test/fuzz/fuzz_http test/fuzz/http "${SLUICE_FUZZ_S:-60}"
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
  if h1_pcdir=$(scripts/hiredis1.sh 2>"$logs/hiredis1-fetch.log" | tail -n 1) && [ -n "$h1_pcdir" ]; then
    cat "$logs/hiredis1-fetch.log"
    local h1=(-Dbuildtype=debugoptimized -Dpkg_config_path="$h1_pcdir" -Dtls=enabled)
    if build hiredis1 build-ci-hiredis1 "${h1[@]}"; then
      h1_ok=1
      # Which hiredis the tests load, for the log (test_tls checks it too).
      ldd build-ci-hiredis1/src/libsluice.so | grep hiredis | sed 's/^[[:space:]]*/  /'
      # --full: the ASan run of every suite (pass h1asan) covers these.
      [ $full = 1 ] || run_tests hiredis1 build-ci-hiredis1 "${h1_sensitive[@]}"
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
      h1asan_ok=1
    else
      count --label hiredis1-asan --step "configure + build" --failed
    fi
  else
    echo "  [hiredis1] fetching hiredis 1.x FAILED:"
    sed 's/^/    /' "$logs/hiredis1-fetch.log"
    count --label hiredis1 --step "fetch hiredis 1.x" --failed
  fi
}

# The hiredis 1.x build under ASan + UBSan: every suite but the topology
# variants (the asan pass runs those on hiredis 0.14), on Redis 8.0 where
# the servers were unpacked (--full), as Debian 13 pairs them: the suites
# that start sentinels stay on the PATH's Redis 7.0 (the unpacked packages
# hold no redis-sentinel).
pass_h1asan() {
  banner "h1asan: build-ci-hiredis1-asan (every suite but the topology variants)"
  [ $h1asan_ok = 1 ] || { echo "  (not built)"; return; }
  local h1=(hiredis1-asan build-ci-hiredis1-asan --timeout-multiplier 3)
  local on=${server_dir[redis-8.0]:-}
  run_tests "${h1[0]}-serial" "${h1[@]:1}" "${only_serial[@]}" "${no_topo_variants[@]}"
  SLUICE_SERVER_DIR=$on run_alone "${h1[0]}-liveness" "${h1[@]:1}" --suite liveness "${no_topo_variants[@]}"
  SLUICE_SERVER_DIR=$on run_tests "${h1[@]}" "${no_serial[@]}" --no-suite liveness
}

pass_valgrind() {
  banner "valgrind: build-ci (meson test --setup valgrind --suite memcheck)"
  need_gcc valgrind && run_tests valgrind build-ci --setup valgrind --suite memcheck
  # --full runs the hiredis 1.x build's part as a pass of its own.
  [ $full = 1 ] || pass_valgrind_h1
}

# Two partition scenarios again, the clients under valgrind: the paths of
# a switch (the census of sentinels, replay, re-assertion) on Sentinel and
# on Cluster. Safety and a clean exit are asserted; timing is valgrind's.
pass_partition_valgrind() {
  local safe=no_overlap,fence_guards,fence_order,no_lost,clean_exit
  banner "partition-valgrind: cut and cut@cluster, the clients under valgrind"
  need_gcc partition-valgrind &&
    run_script partition-valgrind timeout --kill-after=10 300 scripts/partition.sh \
      --build build-ci --scenario cut --scenario cut@cluster --assert cut:none \
      --assert "cut:$safe" --assert cut@cluster:none --assert "cut@cluster:$safe" \
      --wrap "valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
}

# Against hiredis 1.x, where TLS lives too (when this run built it): the
# tests of what differs between the versions (h1_sensitive).
pass_valgrind_h1() {
  if [ $h1_ok = 1 ]; then
    banner "valgrind-h1: build-ci-hiredis1 (meson test --setup valgrind, ${h1_sensitive[*]})"
    run_tests valgrind-h1 build-ci-hiredis1 --setup valgrind "${h1_sensitive[@]}"
  fi
}

# The servers Debian 13 ships (Valkey 9: scripts/servers.sh valkey-9,
# docs/testing.md), unpacked once (--full) before the lanes that take them:
# the suite redis runs on Valkey 8.1 with the plain build (pass servers)
# and on Redis 8.0 with the hiredis 1.x ASan build (pass h1asan). Under
# CI=true a server that cannot be had fails here and in the tests.
server_matrix=(valkey-8.1 redis-8.0)
declare -A server_dir
pass_servers_fetch() {
  banner "servers-fetch: scripts/servers.sh --debs ${server_matrix[*]}"
  local dirs=() i
  if ! mapfile -t dirs < <(scripts/servers.sh --debs "${server_matrix[@]}" 2>"$logs/servers-fetch.log") ||
    [ ${#dirs[@]} -ne ${#server_matrix[@]} ]; then
    sed 's/^/    /' "$logs/servers-fetch.log"
    count --label servers --step "unpack ${server_matrix[*]}" --failed
    return
  fi
  sed 's/^/  /' "$logs/servers-fetch.log"
  for i in "${!server_matrix[@]}"; do server_dir[${server_matrix[$i]}]=${dirs[$i]}; done
}

# The suite redis on the plain build against Valkey 8.1: pass servers
# runs all but its liveness tests (in a lane, from the start), pass
# servers_liveness those, alone under the timing lock once the builds are
# done (beside the builds, the tool cases' lateness passed its bounds).
pass_servers() { servers_run run_tests "" --suite redis --no-suite liveness; }
pass_servers_liveness() {
  servers_run run_alone -liveness --suite liveness "${no_topo_variants[@]}"
}
# servers_run RUNNER LABEL_SUFFIX [meson test options...]
servers_run() {
  local s=valkey-8.1 runner=$1 suffix=$2
  shift 2
  banner "servers$suffix: build-ci, the suite redis on $s"
  need_gcc "servers$suffix" || return
  [ -n "${server_dir[$s]:-}" ] || { echo "  ($s not unpacked)"; return; }
  SLUICE_SERVER_DIR=${server_dir[$s]} "$runner" "$s$suffix" build-ci "$@"
}

# lane NAME PASS...: the passes in a background subshell; its output goes
# to build-ci-logs/lane-NAME.log, its tally to lane-NAME.jsonl and the
# passes' times to lane-NAME.times, all taken in by join_lanes.
declare -A lane_pid lane_start
lanes=()
lane() {
  local name=$1
  shift
  # shellcheck disable=SC2030 # count() reads the lane's own tally
  (
    state=$logs/lane-$name.jsonl
    for p in "$@"; do
      t=$SECONDS
      "pass_$p"
      echo "$p $((SECONDS - t))" >>"$logs/lane-$name.times"
    done
  ) </dev/null >"$logs/lane-$name.log" 2>&1 &
  lane_pid[$name]=$!
  lane_start[$name]=$SECONDS
  lanes+=("$name")
  echo "  [lane $name] started: $* (log: $logs/lane-$name.log)"
}

# Wait for lane NAME to end (join_lanes takes in what it did).
declare -A lane_end
wait_lane() {
  [ -n "${lane_end[$1]:-}" ] && return
  wait "${lane_pid[$1]}"
  lane_end[$1]=$SECONDS
}

# Wait for every lane; print its log, add its tally and times.
join_lanes() {
  local name p secs
  for name in "${lanes[@]}"; do
    wait_lane "$name"
    took[lane-$name]=$((${lane_end[$name]} - ${lane_start[$name]}))
    banner "lane $name: its log"
    cat "$logs/lane-$name.log"
    # shellcheck disable=SC2031 # the main tally, which no lane changed
    [ -f "$logs/lane-$name.jsonl" ] && cat "$logs/lane-$name.jsonl" >>"$state"
    while read -r p secs; do
      took[$p]=$secs
      timings+=("$p")
    done < <(cat "$logs/lane-$name.times" 2>/dev/null)
    timings+=("lane-$name")
  done
}

run_passes() {
  local p t
  for p in "$@"; do
    t=$SECONDS
    "pass_$p"
    pass_done "$p" $t
  done
}

if [ $full = 1 ]; then
  run_passes gcc abi format subproject servers_fetch
  lane servers servers
  run_passes asan_build
  lane wait partition soak
  lane asan asan
  run_passes hiredis1
  lane h1 h1asan
  run_passes deb clang servers_liveness
  # Once the ASan lanes end: valgrind, not under nice (it slows what it
  # runs 5-10 times: beside the ASan lanes its cases' own timeouts ran
  # out), with the fuzzers beside it under nice (busy on one core, where
  # valgrind's cases mostly wait on timers).
  wait_lane asan
  wait_lane h1
  if [ "$valgrind" = yes ]; then
    lane fuzz fuzz partition_valgrind
  else
    lane fuzz fuzz
  fi
  nice=()
  [ "$valgrind" = yes ] && run_passes valgrind valgrind_h1
  join_lanes
else
  run_passes gcc topo
  [ "$valgrind" = yes ] && run_passes valgrind
fi

banner "results"
for p in "${timings[@]}"; do
  printf '  %-12s %5ds\n' "$p" "${took[$p]}"
done
printf '  %-12s %5ds\n' total $((SECONDS - start))
count --final
