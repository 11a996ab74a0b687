#!/usr/bin/env bash
# Builds everything and runs every test. GPU tests skip with a message when no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build
meson test -C build --print-errorlogs --num-processes "$(nproc)" "$@"
