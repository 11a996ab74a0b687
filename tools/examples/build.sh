#!/usr/bin/env bash
# Builds the example apps against an installed kiln, found through pkg-config only:
#   tools/examples/build.sh OUT_DIR
# Set PKG_CONFIG_PATH to <prefix>/lib/<arch>/pkgconfig when kiln is installed outside the default
# search path. Writes OUT_DIR/run_model_c and OUT_DIR/run_model_cpp.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1
mkdir -p "$out"
cflags=$(pkg-config --cflags kiln-runtime)
libs=$(pkg-config --libs kiln-runtime)
# shellcheck disable=SC2086  # the flags are word lists
cc -std=c11 -O2 -Wall -Wextra -Werror $cflags "$here/run_model.c" -o "$out/run_model_c" $libs -lm
# shellcheck disable=SC2086
c++ -std=c++20 -O2 -Wall -Wextra -Werror $cflags "$here/run_model.cc" -o "$out/run_model_cpp" $libs
echo "built $out/run_model_c and $out/run_model_cpp against kiln-runtime $(pkg-config --modversion kiln-runtime)"
