#!/usr/bin/env bash
# The pass-scaling benchmark (bench/pass_scaling.cpp) at other commits, on this
# machine: builds hiertag_pass_scaling at each COMMIT in one worktree outside the
# checkout (its build folder reused, so each commit rebuilds only what changed) and
# prints each selected benchmark's median CPU time (with one repetition, its time).
# The committed results ran on other machines; this tells which commit made a pass
# slower here.
#
#   bench/pass_scaling_at.sh [--filter REGEX] [--repetitions N] COMMIT...
#   bench/pass_scaling_at.sh 9629225 3e8464b HEAD
#
# Default filter: RecordRewrites around a pass that changes nothing and one that
# changes the graph, at 1k and 10k nodes (a real export's graph sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
filter='BM_RecordRewrites(Changed|Unchanged)/(1000|10000)$'
repetitions=5
while (($#)); do
  case "$1" in
    --filter) filter="$2"; shift 2 ;;
    --repetitions) repetitions="$2"; shift 2 ;;
    -*) echo "usage: bench/pass_scaling_at.sh [--filter REGEX] [--repetitions N] COMMIT..." >&2; exit 2 ;;
    *) break ;;
  esac
done
(($#)) || { echo "usage: bench/pass_scaling_at.sh [--filter REGEX] [--repetitions N] COMMIT..." >&2; exit 2; }
checkout=$PWD
commits=()
for commit in "$@"; do commits+=("$(git rev-parse --short "$commit^{commit}")"); done
tree=${TMPDIR:-/tmp}/hiertag-scaling-at
[ -d "$tree" ] || git worktree add --detach "$tree" "${commits[0]}" >/dev/null 2>&1
[ -e "$tree/.venv" ] || ln -s "$checkout/.venv" "$tree/.venv"
for commit in "${commits[@]}"; do
  git -C "$tree" checkout -q --detach "$commit"
  log=$tree/build.log
  { cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$tree/build" --target hiertag_pass_scaling -j2; } >"$log" 2>&1 ||
    { tail -20 "$log"; echo "pass_scaling_at: the build failed at $commit (log: $log)"; exit 1; }
  echo "== $commit $(git log -1 --format=%s "$commit" | cut -c1-80)"
  "$tree/build/hiertag_pass_scaling" --benchmark_filter="$filter" --benchmark_repetitions="$repetitions" \
    --benchmark_report_aggregates_only=true 2>/dev/null |
    awk '$1 ~ /_median$/ || ($1 ~ /^BM_/ && $1 !~ /_(mean|median|stddev|cv)$/) {print "  " $1, $4, $5}'
done
