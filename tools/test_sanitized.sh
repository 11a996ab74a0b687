#!/usr/bin/env bash
# The sanitizer pass of tools/test.sh (also runnable alone): the CPU suite under ASan + UBSan,
# then every fuzz target for a short run. Builds build-san/ (tools/setup.sh --sanitize: clang-14,
# unoptimised, every finding fatal) — only the targets those tests need.
#   tools/test_sanitized.sh [FUZZ_SECONDS]      (default 10 per target)
# The tests tools/regular_only_tests.txt names are left to the regular build (tools/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${1:-10}
BUILD=build-san
tools/setup.sh --sanitize --no-build "$BUILD"

# The CPU tests not in tools/regular_only_tests.txt, and the build targets they need.
SELECTED=$BUILD/sanitized-tests.txt
python3 tools/test_plan.py "$BUILD" sanitized "$SELECTED" > "$BUILD/sanitized-targets.txt"
mapfile -t targets < "$BUILD/sanitized-targets.txt"
mapfile -t tests < "$SELECTED"
echo "test_sanitized: building ${#targets[@]} targets for ${#tests[@]} CPU tests under ASan + UBSan"
start=$SECONDS
ninja -C "$BUILD" "${targets[@]}" > "$BUILD/sanitized-build.log" 2>&1 || {
  tail -40 "$BUILD/sanitized-build.log"
  exit 1
}
echo "test_sanitized: built in $((SECONDS - start)) s"
# Leaks are findings too (but not those of NVIDIA's closed libraries: lsan_suppressions.txt).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$PWD/tools/lsan_suppressions.txt
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
start=$SECONDS
meson test -C "$BUILD" --no-rebuild --print-errorlogs --num-processes "$(nproc)" "${tests[@]}"
echo "test_sanitized: tests ran in $((SECONDS - start)) s"

# A fixed seed: the same mutations every CI run (a fresh seed per run makes CI a lottery; longer,
# random-seed runs are tools/fuzz.sh's job).
for t in onnx_import config manifest inputs; do tools/fuzz.sh "$t" "$FUZZ_SECONDS" 20261127; done
