#!/usr/bin/env bash
# Builds and runs every test once (GPU tests skip with a message when no GPU is present): the
# CPU tests under ASan + UBSan in build-san/ (tools/test_sanitized.sh, which also runs each fuzz
# target briefly), the GPU tests and the few CPU tests listed in tools/regular_only_tests.txt in
# the regular build/ (tools/test_plan.py splits them; no test is compiled twice).
#   tools/test.sh                 everything (what CI runs)
#   tools/test.sh NAME...         only these tests, regular build (arguments go to meson test)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  tools/setup.sh build
  exec meson test -C build --print-errorlogs --num-processes "$(nproc)" "$@"
fi
tools/setup.sh --no-build build
mapfile -t targets < <(python3 tools/test_plan.py build regular build/regular-tests.txt)
mapfile -t tests < build/regular-tests.txt
echo "test: building the regular tree and ${#tests[@]} tests (GPU and regular-only)"
ninja -C build "${targets[@]}"
meson test -C build --no-rebuild --print-errorlogs --num-processes "$(nproc)" "${tests[@]}"
tools/test_sanitized.sh
