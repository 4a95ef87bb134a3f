#!/usr/bin/env bash
# Fuzzes the tool's model reader and commands with libFuzzer (clang), under ASan
# and UBSan: builds the targets of tests/fuzz into build/fuzz, writes the seed
# corpus (tagged exports of the bundled models, external-data variants with
# hostile locations, deep nesting: tests/fuzz/make_seed_corpus.py), and runs each
# target, two at a time. Fails on any crash, leak, timeout or allocation past the
# limits; prints executions and corpus sizes per target and one summary line last.
#
#   scripts/fuzz.sh                      CI, deterministic: each target replays its seeds and
#                                        every past finding (tests/fuzz/regressions/<target>/),
#                                        then a fixed number of mutations from a fixed seed
#                                        (-seed, -runs): the same inputs on every run, whatever
#                                        else the machine is doing
#   scripts/fuzz.sh --seconds 600        open-ended: 600 s per target from a random seed
#   scripts/fuzz.sh --keep-corpus        go on from the corpora of the last run (build/fuzz/corpus)
#   scripts/fuzz.sh --targets tree,extract --jobs 1
#   scripts/fuzz.sh --seconds 600 --report bench/results/fuzz.md
#                                        also writes the run as a result to commit (bench/fuzz_report.py:
#                                        the command, the commit, the compiler, a table per target)
#
# A finding is written to build/fuzz/artifacts/<target>-crash-* (or leak-, timeout-,
# oom-), its path and first bytes are printed, and it is kept in
# tests/fuzz/regressions/<target>/ (bench/fuzz_report.py), which every run replays: commit
# it with its fix. Replay it alone with build/fuzz/<target>_fuzzer FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=
targets=model_reader,validate,tree,extract,json,tag_grammar
jobs=2
keep_corpus=false
report=
command="scripts/fuzz.sh${*:+ $*}"
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --keep-corpus) keep_corpus=true; shift ;;
    --report) report=$(cd "$OLDPWD" && realpath -m "$2"); shift 2 ;;  # from where it was called
    *) echo "usage: scripts/fuzz.sh [--seconds N] [--targets a,b] [--jobs J] [--keep-corpus] [--report FILE]" >&2
       exit 2 ;;
  esac
done
target_list=$targets
IFS=, read -r -a targets <<<"$targets"

out=build/fuzz
mkdir -p "$out"
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (scripts/setup.sh installs clang and libclang-rt-14-dev)"; exit 1
fi
start=$SECONDS
flags="-O1 -g -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all -fno-omit-frame-pointer"
if ! { cmake -S . -B "$out" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="$flags" \
         -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DHIERTAG_FUZZ=ON -DHIERTAG_BUILD_PLUGIN=OFF \
         -DHIERTAG_BUILD_TESTS=OFF -DHIERTAG_BUILD_BENCHMARKS=OFF &&
       cmake --build "$out" -j2 --target "${targets[@]/%/_fuzzer}"; } >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"; echo "fuzz: build failed (log: $out/build.log)"; exit 1
fi

# The seeds: exports through the plugin (build/libhiertag.so), rewritten when the
# plugin or the corpus builder changed.
seeds=$out/seeds
[ -f build/libhiertag.so ] || scripts/build.sh
if [ ! -f "$seeds/.stamp" ] || [ build/libhiertag.so -nt "$seeds/.stamp" ] ||
   [ tests/fuzz/make_seed_corpus.py -nt "$seeds/.stamp" ]; then
  rm -rf "$seeds"
  if ! .venv/bin/python tests/fuzz/make_seed_corpus.py "$seeds" >"$out/seeds.log" 2>&1; then
    tail -20 "$out/seeds.log"; echo "fuzz: seed corpus failed (log: $out/seeds.log)"; exit 1
  fi
  touch "$seeds/.stamp"
fi
prepared=$((SECONDS - start))

seeds_of() {
  case "$1" in
    json) echo "$seeds/json" ;;
    tag_grammar) echo "$seeds/tag" ;;
    *) echo "$seeds/model" ;;
  esac
}

mkdir -p "$out/artifacts" "$out/logs"
rm -f "$out"/logs/*.status
rm -rf "$out/tmp"
mkdir -p "$out/tmp"
# Mutations per target in the deterministic run: about a minute each here.
runs_of() {
  case "$1" in
    model_reader) echo 120000 ;; validate) echo 24000 ;; tree) echo 32000 ;;
    extract) echo 12000 ;; json) echo 120000 ;; tag_grammar) echo 200000 ;;
  esac
}
run_target() {
  local target=$1 index=$2
  $keep_corpus || rm -rf "$out/corpus/$target"
  mkdir -p "$out/corpus/$target" "tests/fuzz/regressions/$target"
  local mode=(-max_total_time="$seconds")
  [ -n "$seconds" ] || mode=(-seed=$((index + 1)) -runs="$(runs_of "$target")")
  # The seeds and past findings come first (every one is run once at start-up).
  # TMPDIR: each target's work folder (fuzz_support.h) lies under build/fuzz/tmp.
  TMPDIR="$PWD/$out/tmp" "$out/${target}_fuzzer" "$out/corpus/$target" "$(seeds_of "$target")" \
    "tests/fuzz/regressions/$target" "${mode[@]}" "${limits[@]}" \
    -print_final_stats=1 -dict=tests/fuzz/hiertag.dict -artifact_prefix="$out/artifacts/$target-" \
    >"$out/logs/$target.log" 2>&1
}
# What fails a run: an input over 10 s, 2 GiB of memory, or one allocation over 1 GiB.
limits=(-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10)

fuzz_start=$SECONDS
rm -f "$out"/artifacts/*
for index in "${!targets[@]}"; do
  target=${targets[$index]}
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  { code=0; run_target "$target" "$index" || code=$?; echo "$code" >"$out/logs/$target.status"; } &
done
wait
rm -rf "$out/tmp"

# A line per target and one summary line last; a failing target's errors, and
# each finding's path and first bytes (bench/fuzz_report.py, which also writes --report).
exec .venv/bin/python bench/fuzz_report.py --targets "$target_list" --prepared "$prepared" \
  --fuzzing "$((SECONDS - fuzz_start))" --jobs "$jobs" ${seconds:+--seconds "$seconds"} --flags="$flags" \
  --options="${limits[*]}" --command "$command" ${report:+--markdown "$report"} \
  $($keep_corpus && echo --kept-corpus)
