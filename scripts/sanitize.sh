#!/usr/bin/env bash
# The C++ tests under AddressSanitizer and UndefinedBehaviorSanitizer, in a build
# of their own (build/sanitize): the core, the tool, the passes and the plugin
# loader, with -fsanitize=address,undefined -fno-sanitize-recover=all, so the
# first finding fails the test that made it. LibTorch, libonnx and libprotobuf
# are not instrumented; ASan still sees every allocation they make (it replaces
# malloc and operator new process-wide). Findings inside them, and only those,
# are suppressed by the files of tests/sanitize/ (each says why).
#
#   scripts/sanitize.sh              configure, build, run ctest; full log in build/sanitize.log
#   scripts/sanitize.sh --tool-only  the core and the tool alone (no torch)
set -euo pipefail
cd "$(dirname "$0")/.."

plugin=ON
case "${1:-}" in
  "") ;;
  --tool-only) plugin=OFF ;;
  *) echo "usage: scripts/sanitize.sh [--tool-only]" >&2; exit 2 ;;
esac

build=build/sanitize
log=build/sanitize.log
mkdir -p "$build"
: >"$log"
suppressions="$PWD/tests/sanitize"
# Test discovery runs the test binaries at build time, so the options hold for the build too.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=1:suppressions=$suppressions/asan.supp"
export LSAN_OPTIONS="suppressions=$suppressions/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$suppressions/ubsan.supp"

flags="-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
start=$SECONDS
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="$flags" \
     -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
     -DHIERTAG_BUILD_PLUGIN=$plugin -DHIERTAG_BUILD_BENCHMARKS=OFF >>"$log" 2>&1; then
  tail -40 "$log"; echo "sanitize: configure failed (log: $log)"; exit 1
fi
targets=(hiertag_core_tests hiertag_carry_tests hiertag_tool_tests)
[ "$plugin" = ON ] && targets+=(hiertag_pass_tests hiertag_loader_tests)
if ! cmake --build "$build" -j2 --target "${targets[@]}" >>"$log" 2>&1; then
  tail -60 "$log"; echo "sanitize: build failed (log: $log)"; exit 1
fi
built=$((SECONDS - start))
# ctest's output on a failure whole (every failing test's own output and the sanitizer's report).
if ! (cd "$build" && ctest --output-on-failure -j2) >"$build/ctest.log" 2>&1; then
  tee -a "$log" <"$build/ctest.log"
  echo "sanitize: tests failed under ASan+UBSan (log: $log)"; exit 1
fi
cat "$build/ctest.log" >>"$log"
echo "sanitize (ASan+UBSan): $(grep -o '[0-9]*% tests passed.*' "$log" | tail -1); build ${built}s, tests $((SECONDS - start - built))s"
