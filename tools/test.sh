#!/usr/bin/env bash
# Builds and runs every test once (the GPU tests only where nvidia-smi lists a GPU; see below): the
# CPU tests under ASan + UBSan in build-san/ (tools/test_sanitized.sh, which also runs each fuzz
# target briefly), the GPU tests and the few CPU tests listed in tools/regular_only_tests.txt in
# the regular build/ (tools/test_plan.py splits them; no test is compiled twice). On a machine
# without a GPU (CI) the GPU tests are not built: they would only skip there. tools/run_gpu.sh
# builds and runs them on a GPU machine; KILN_TEST_GPU=1 builds and runs them here anyway.
#   tools/test.sh                 everything (what CI runs)
#   tools/test.sh NAME...         only these tests, regular build (arguments go to meson test)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  tools/setup.sh build
  exec meson test -C build --print-errorlogs --num-processes "$(nproc)" "$@"
fi
tools/setup.sh --no-build build
plan=()
if [ "${KILN_TEST_GPU:-}" != 1 ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  plan=(--no-gpu-tests)
  echo "test: no GPU here: the GPU tests are not built (tools/run_gpu.sh runs them on a GPU" \
    "machine; KILN_TEST_GPU=1 builds them here anyway)"
fi
mapfile -t targets < <(python3 tools/test_plan.py build regular build/regular-tests.txt "${plan[@]}")
mapfile -t tests < build/regular-tests.txt
echo "test: building the regular tree and ${#tests[@]} tests"
start=$SECONDS
ninja -C build "${targets[@]}"
echo "test: regular tree built in $((SECONDS - start)) s"
start=$SECONDS
meson test -C build --no-rebuild --print-errorlogs --num-processes "$(nproc)" "${tests[@]}"
echo "test: regular tests ran in $((SECONDS - start)) s"
tools/test_sanitized.sh
