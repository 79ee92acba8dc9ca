#!/usr/bin/env bash
# Draw the benchmarks' results as SVG charts with gnuplot.
#
#   bench/charts.sh DIR [OUT]
#
# DIR is what `bench/run.sh --results DIR` kept: bench_NAME.tsv (each
# printed table as tab-separated values under a "# title" line) and
# machine.txt (CPUs, date, Redis version, commit), whose line goes under
# every chart. The charts (OUT, default DIR) are drawn from the tables of
# bench_sem, bench_limiter and bench_dq that are present; a missing table
# is named and its chart skipped (no chart at all: exit 1). Needs gnuplot
# (scripts/deps.sh --bench).
set -euo pipefail

[ $# -ge 1 ] && [ $# -le 2 ] && [ -d "$1" ] || {
  sed -n '2,13s/^# \{0,1\}//p' "$0" >&2
  exit 2
}
dir=$1
out=${2:-$1}
command -v gnuplot >/dev/null 2>&1 || {
  echo "charts.sh: gnuplot is missing (scripts/deps.sh --bench installs it)" >&2
  exit 1
}
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-charts-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# One line for every chart: what ran where and when.
caption=$(awk -F': ' '
  { v[$1] = $2 }
  END {
    cpu = v["cpu"]; gsub(/\(R\)| Processor/, "", cpu)
    split(v["load average before"], b, " "); split(v["load average after"], a, " ")
    printf "%s CPUs (%s), shared; load average %s at the start, %s at the end; Redis %s; %s; commit %s",
           v["cpus"], cpu, b[1], a[1] == "" ? "?" : a[1], v["redis"], v["date"], v["commit"]
  }' "$dir/machine.txt" 2>/dev/null || true)

# table FILE TITLE_PREFIX [COLUMN=VALUE...]: the rows of the first table of
# FILE whose title starts with TITLE_PREFIX (header left out), only those
# whose columns hold the given values.
table() {
  local file=$1 prefix=$2
  shift 2
  awk -F'\t' -v prefix="# $prefix" -v filters="$(printf '%s\n' "$@")" '
    BEGIN { n = split(filters, f, "\n") }
    state == 0 && index($0, prefix) == 1 { state = 1; next }
    state == 1 { state = 2; next }
    state == 2 && $0 == "" { exit }
    state == 2 {
      for (i = 1; i <= n; i++) {
        eq = index(f[i], "=")
        if ($(substr(f[i], 1, eq - 1)) != substr(f[i], eq + 1)) next
      }
      print
    }' "$file"
}

declare -A missing
# extract NAME FILE TITLE_PREFIX [COLUMN=VALUE...]: table into $tmp/NAME.tsv;
# fails (and says so) when the table is missing or empty.
extract() {
  local name=$1 file=$2 prefix=$3
  shift 3
  [ -f "$file" ] || {
    [ -n "${missing[$file]:-}" ] || echo "charts.sh: no $file; its charts are skipped" >&2
    missing[$file]=1
    return 1
  }
  table "$file" "$prefix" "$@" >"$tmp/$name.tsv"
  [ -s "$tmp/$name.tsv" ] || {
    echo "charts.sh: no table \"$prefix\" ($*) in $file; its chart is skipped" >&2
    return 1
  }
}

# plot NAME WIDTH HEIGHT: run the gnuplot script on stdin into OUT/NAME.svg,
# with the shared terminal, style and caption.
plot() {
  local name=$1
  {
    cat <<EOF
set terminal svg size $2,$3 font "sans,12" noenhanced background rgb "white"
set output "$out/$name.svg"
set datafile separator "\t"
set datafile missing "-"
set key top left box opaque font "sans,10"
set bmargin 5
set grid
set linetype 1 lc rgb "#1f77b4" lw 2 pt 7 ps 0.8
set linetype 2 lc rgb "#d62728" lw 2 pt 5 ps 0.8
set linetype 3 lc rgb "#2ca02c" lw 2 pt 9 ps 0.8
set linetype 4 lc rgb "#ff7f0e" lw 2 pt 11 ps 0.8
set linetype 5 lc rgb "#9467bd" lw 2 pt 13 ps 0.8
set label 99 "$caption" at screen 0.01, screen 0.015 font "sans,9" tc rgb "#555555"
d = "$tmp"
EOF
    cat
  } | gnuplot
  echo "$out/$name.svg"
  drawn=$((drawn + 1))
}
drawn=0

# Shared axes of throughput against operations in flight (1, 50, 500).
inflight_axes='set logscale xy
set xrange [0.7:750]
set xtics (1, 50, 500)
set xlabel "operations in flight (one client)"
set format y "%.0s%c"'

# panels N YLABEL TITLE: the start of a chart of N panels of throughput
# against operations in flight, side by side.
panels() {
  cat <<EOF
$inflight_axes
set ylabel "$2 per second (log)"
set yrange [*:2e6]
set multiplot layout 1,$1 title "$3" margins 0.06, 0.98, 0.17, 0.85 spacing 0.06
EOF
}

# latency NAME TABLE X_COLUMN SLUICE_P50_COLUMN PEER_P50_COLUMN PEER WHAT TITLE:
# p50 and p99 (the column after p50) of sluice and a peer against in flight.
latency() {
  plot "$1" 960 460 <<EOF
$inflight_axes
set format y "%g"
set ylabel "$7, ms (log)"
set title "$8"
plot d."/$2.tsv" using $3:$4 with linespoints lt 1 title "sluice p50", \
     "" using $3:$(($4 + 1)) with linespoints lt 1 dt 2 title "sluice p99", \
     "" using $3:$5 with linespoints lt 3 title "$6 p50", \
     "" using $3:$(($5 + 1)) with linespoints lt 3 dt 2 title "$6 p99"
EOF
}

# Shared style of the bar charts; latency bars are blue for sluice, purple
# for the peer, lighter for p50 and darker for max.
bars='set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set grid noxtics
set xtics nomirror'
latency_bars="$bars
set logscale y
p50 = \"#9ecae1\"; p99 = \"#4292c6\"; pmax = \"#08519c\"
peer50 = \"#dadaeb\"; peer99 = \"#9e9ac8\"; peermax = \"#6a51a3\""

sem=$dir/bench_sem.tsv
if extract sem_acq "$sem" "acquire (grant)" &&
  extract sem_rel "$sem" "release:" &&
  extract sem_pair "$sem" "try_acquire -> release pairs" &&
  extract sem_nowait "$sem" "pairs with the release not awaited"; then
  plot sem-throughput 1260 460 <<EOF
$(panels 3 operations "Semaphore throughput: sluice vs redis-benchmark running the same script vs redis-semaphore")
set title "try_acquire (every one granted)"
plot d."/sem_acq.tsv" using 1:2 with linespoints lt 1 title "sluice", \
     "" using 1:6 with linespoints lt 2 title "redis-benchmark -c1 -P N", \
     "" using 1:11 with linespoints lt 4 title "redis-benchmark -c N"
set title "release"
unset ylabel
plot d."/sem_rel.tsv" using 1:2 with linespoints lt 1 title "sluice", \
     "" using 1:6 with linespoints lt 2 title "redis-benchmark -c1 -P N"
set title "acquire -> release pairs"
set ylabel "pairs per second (log)"
plot d."/sem_pair.tsv" using 1:2 with linespoints lt 1 title "sluice", \
     d."/sem_nowait.tsv" using 1:2 with linespoints lt 1 dt 2 title "sluice, release not awaited", \
     d."/sem_pair.tsv" using 1:6 with linespoints lt 2 title "redis-benchmark (acquire + release)", \
     "" using 1:8 with linespoints lt 3 title "redis-semaphore 5 (ioredis)"
unset multiplot
EOF
  latency sem-latency sem_pair 1 3 9 redis-semaphore "acquire latency" \
    "Semaphore: latency of try_acquire in acquire -> release pairs, p50 and p99"
fi
if extract sem_wake "$sem" "blocking wake-up"; then
  plot sem-wakeup 860 420 <<EOF
$latency_bars
set yrange [0.01:*]
set ylabel "release called -> waiter granted, ms (log)"
set title "Semaphore: blocking wake-up of a waiter on a 1-permit semaphore"
plot d."/sem_wake.tsv" using 2:xtic(1) lc rgb p50 title "p50", "" using 3 lc rgb p99 title "p99", \
     "" using 4 lc rgb pmax title "max"
EOF
fi

lim=$dir/bench_limiter.tsv
# The right panel: each algorithm's sluice line and redis-benchmark's.
algo_plot=
i=0
for algo in fixed sliding-log sliding-counter gcra; do
  i=$((i + 1))
  extract "rl_$i" "$lim" "rate limiters: sluice vs redis-benchmark" 1=random 2="$algo" || continue
  algo_plot+="${algo_plot:+, }d.\"/rl_$i.tsv\" using 3:4 with linespoints lt $i title \"$algo\""
  algo_plot+=", d.\"/rl_$i.tsv\" using 3:9 with linespoints lt $i dt 2 notitle"
done
if extract rl_fixed_random "$lim" "fixed window: sluice vs rate-limiter-flexible" 1=random &&
  extract rl_fixed_hot "$lim" "fixed window: sluice vs rate-limiter-flexible" 1=hot; then
  plot limiter-throughput 1260 480 <<EOF
$(panels 2 checks "Rate limiter throughput, every check allowed")
set title "fixed window: sluice vs rate-limiter-flexible (RateLimiterRedis)"
plot d."/rl_fixed_random.tsv" using 2:3 with linespoints lt 1 title "sluice, 10,000 random keys", \
     d."/rl_fixed_hot.tsv" using 2:3 with linespoints lt 1 dt 2 title "sluice, one hot key", \
     d."/rl_fixed_random.tsv" using 2:7 with linespoints lt 3 title "rate-limiter-flexible, random keys", \
     d."/rl_fixed_hot.tsv" using 2:7 with linespoints lt 3 dt 2 title "rate-limiter-flexible, hot key"
set title "random keys: sluice (solid) vs redis-benchmark, same script (dashed)"
${algo_plot:+plot $algo_plot}
unset multiplot
EOF
  latency limiter-latency rl_fixed_random 2 4 8 rate-limiter-flexible "check latency" \
    "Rate limiter (fixed window, 10,000 random keys): latency of a check, p50 and p99"
fi

dq=$dir/bench_dq.tsv
if extract dq_tput "$dq" "Delay queue: throughput"; then
  plot dq-throughput 860 440 <<EOF
$bars
set format y "%.0s%c"
set yrange [0:*]
set ylabel "messages per second"
set title "Delay queue throughput: sluice vs BullMQ 5 (no BullMQ push of one at a time)"
plot d."/dq_tput.tsv" using 2:xtic(1) lt 1 title "sluice", "" using 4 lt 5 title "BullMQ"
EOF
fi
if extract dq_late "$dq" "Delay queue: delivery lateness"; then
  plot dq-lateness 860 440 <<EOF
$latency_bars
set yrange [0.1:*]
set ylabel "delivered after its due time, ms (log)"
set title "Delay queue: lateness of delivery, delays of 20..1020 ms"
plot d."/dq_late.tsv" using 2:xtic(1) lc rgb p50 title "sluice p50", \
     "" using 3 lc rgb p99 title "sluice p99", "" using 4 lc rgb pmax title "sluice max", \
     "" using 5 lc rgb peer50 title "BullMQ p50", "" using 6 lc rgb peer99 title "BullMQ p99", \
     "" using 7 lc rgb peermax title "BullMQ max"
EOF
fi

# What routing through the cluster costs the client: the same workloads on
# the standalone server and on run.sh's 3-master cluster (one CPU between
# them, so this is not cluster capacity; see bench/README.md).
if extract cl_acq "$sem" "cluster (" 1=try_acquire &&
  extract cl_rel "$sem" "cluster (" 1=release &&
  extract cl_pair "$sem" "cluster (" "1=acquire->release pair" &&
  extract cl_fixed "$lim" "cluster (" 1=random 2=fixed &&
  extract cl_gcra "$lim" "cluster (" 1=random 2=gcra; then
  plot cluster 1260 480 <<EOF
$(panels 2 operations "Standalone Redis (solid) vs a 3-master cluster on the same CPU (dashed), one client")
set title "semaphore, 64 names spread over the slots"
plot d."/cl_acq.tsv" using 2:3 with linespoints lt 1 title "try_acquire", \
     "" using 2:7 with linespoints lt 1 dt 2 notitle, \
     d."/cl_rel.tsv" using 2:3 with linespoints lt 2 title "release", \
     "" using 2:7 with linespoints lt 2 dt 2 notitle, \
     d."/cl_pair.tsv" using 2:3 with linespoints lt 3 title "acquire -> release pair", \
     "" using 2:7 with linespoints lt 3 dt 2 notitle
set title "rate limiter, 10,000 random keys (each its own hash tag)"
unset ylabel
plot d."/cl_fixed.tsv" using 3:4 with linespoints lt 1 title "sluice, fixed window", \
     "" using 3:8 with linespoints lt 1 dt 2 notitle, \
     d."/cl_gcra.tsv" using 3:4 with linespoints lt 4 title "sluice, gcra", \
     "" using 3:8 with linespoints lt 4 dt 2 notitle, \
     d."/cl_fixed.tsv" using 3:13 with linespoints lt 2 title "redis-benchmark, fixed window", \
     "" using 3:14 with linespoints lt 2 dt 2 notitle
unset multiplot
EOF
fi
[ "$drawn" -gt 0 ] || {
  echo "charts.sh: nothing to draw in $dir" >&2
  exit 1
}
