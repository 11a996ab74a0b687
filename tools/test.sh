#!/usr/bin/env bash
# Builds everything and runs every test (GPU tests skip with a message when no GPU is present),
# then the sanitizer pass (tools/test_sanitized.sh): the CPU suite again under ASan + UBSan and
# each fuzz target briefly.
#   tools/test.sh                 everything (what CI runs)
#   tools/test.sh NAME...         only these tests, regular build (arguments go to meson test)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build
meson test -C build --print-errorlogs --num-processes "$(nproc)" "$@"
if [ $# -eq 0 ]; then
  tools/test_sanitized.sh
fi
