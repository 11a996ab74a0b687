#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: installs what is missing, then builds.
#   tools/setup.sh [--sanitize] [--no-build] [BUILD_DIR [TARGET...]]   (default: build, every target)
# --sanitize: the sanitizer build (default dir build-san): clang-14 with ASan + UBSan (every
# finding fatal) and libFuzzer coverage, so the same tree runs the CPU tests under the
# sanitizers and the fuzz targets (fuzz/README.md); unoptimised, with line tables, linked by lld.
# --no-build: install and configure only.
# The regular build is -O2 with debug info; under CI (CI=true) without it, which saves about a
# quarter of the compile time (assertions stay on either way). -O1 built the tree only 6%
# faster in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
SANITIZE=0
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) SANITIZE=1 ;;
    --no-build) BUILD=0 ;;
    *) break ;;
  esac
  shift
done
BUILD_DIR=${1:-build}
[ "$SANITIZE" = 1 ] && BUILD_DIR=${1:-build-san}
[ $# -gt 0 ] && shift
TARGETS=("$@")

PACKAGES=(meson ninja-build pkg-config cmake g++ python3 libprotobuf-dev protobuf-compiler
          libonnx-dev libyaml-cpp-dev libgtest-dev libcli11-dev libfmt-dev libspdlog-dev
          libxxhash-dev nlohmann-json3-dev libonnx-testdata zlib1g-dev libsodium-dev)
# The sanitizer build's compiler and linker (lld links its ASan test executables about 5x faster
# than GNU ld).
[ "$SANITIZE" = 1 ] && PACKAGES+=(clang-14 lld-14)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
if [ ! -x "$CUDA_PATH/bin/nvcc" ] && [ ! -f "$CUDA_PATH/include/nvrtc.h" ]; then
  echo "setup: the CUDA toolkit was not found at $CUDA_PATH (set CUDA_PATH)" >&2
  exit 1
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  if [ "$SANITIZE" = 1 ]; then
    # Shared libraries leave the sanitizer runtime to the executables (b_lundef=false). A unity
    # build like the regular one: libFuzzer's coverage allowlist (fuzz/coverage_allowlist.txt)
    # names the unity units' file names too.
    CC=clang-14 CXX=clang++-14 meson setup "$BUILD_DIR" --buildtype=plain -Dwerror=true \
      -Dsanitize=true -Dfuzz=true -Db_lundef=false -Dcpp_args=-gline-tables-only \
      -Dc_args=-gline-tables-only -Dcpp_link_args=-fuse-ld=lld-14 -Dc_link_args=-fuse-ld=lld-14
  elif [ "${CI:-}" = true ]; then
    meson setup "$BUILD_DIR" -Doptimization=2 -Ddebug=false -Db_ndebug=false -Dwerror=true
  else
    meson setup "$BUILD_DIR" --buildtype=debugoptimized -Dwerror=true
  fi
fi
[ "$BUILD" = 1 ] && ninja -C "$BUILD_DIR" "${TARGETS[@]}"
exit 0
