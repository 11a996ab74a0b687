#!/usr/bin/env bash
# Stages everything the GPU machine needs into .stage/ (ignored by git): the kiln CLI, every
# test executable, libkiln_runtime and the non-CUDA shared libraries they load (the GPU
# machine has the CUDA libraries but none of Debian's -dev packages), ONNX's node tests (Debian's
# libonnx-testdata, which the GPU machine lacks: 27 MB, about 1.2 MB of the xz archive) for
# `kiln conformance`, plus run_gpu.sh.
#   tools/stage_gpu.sh            then, on the GPU machine at the repo root:  .stage/run_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build >/dev/null
STAGE=.stage
rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/tests"
cp build/tools/kiln "$STAGE/bin/"
find build/tests -maxdepth 3 -type f -executable -name '*_test' -exec cp {} "$STAGE/tests/" \;
# The planted out-of-bounds kernel `run_gpu.sh sanitize` must see compute-sanitizer fail on.
cp build/tests/kernels/kernels_planted_oob_check "$STAGE/bin/"
# Benchmarks (not tests): run by `run_gpu.sh bench`.
mkdir -p "$STAGE/bench"
find build/tests -maxdepth 3 -type f -executable -name '*bench_*' -exec cp {} "$STAGE/bench/" \;
# kiln's libraries under their sonames (what the binaries ask for), plus the plain .so names
# (what the Python package looks for) as links, made after strip so strip never sees a link.
cp -L build/runtime/libkiln_runtime.so.0 build/cache/libkiln_cache.so.0 "$STAGE/lib/"
strip --strip-debug "$STAGE"/bin/* "$STAGE"/tests/* "$STAGE"/lib/* "$STAGE"/bench/* 2>/dev/null || true
ln -s libkiln_runtime.so.0 "$STAGE/lib/libkiln_runtime.so"
ln -s libkiln_cache.so.0 "$STAGE/lib/libkiln_cache.so"
# The example apps, built the way an application is: against `meson install`ed files, through
# pkg-config (tools/examples/README.md).
INSTALL=$(mktemp -d)
meson install -C build --no-rebuild --quiet --destdir "$INSTALL" >/dev/null
PKG_CONFIG_PATH=$(dirname "$(find "$INSTALL" -name kiln-runtime.pc)") tools/examples/build.sh "$STAGE/examples"
rm -rf "$INSTALL"
# Non-CUDA, non-libc libraries the binaries load (ldd on the build tree, where the binaries'
# run paths still find kiln's own libraries): protobuf-lite, xxhash, libsodium.so.23, ...
for f in build/tools/kiln $(find build/tests -maxdepth 3 -type f -executable -name '*_test' -o -maxdepth 3 -type f -executable -name '*bench_*'); do
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/usr/local/cuda|lib(c|m|dl|rt|pthread|stdc\+\+|gcc_s)\.so|ld-linux|libkiln_|libcuda' |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
# libkiln_cache needs libsodium (artifact signatures): without it nothing on the GPU machine starts.
ls "$STAGE"/lib/libsodium.so.* >/dev/null 2>&1 || { echo "stage_gpu: libsodium was not staged" >&2; exit 1; }
NODE_TESTS=/usr/share/libonnx-testdata/data/node
if [ ! -d "$NODE_TESTS" ]; then
  echo "stage_gpu: $NODE_TESTS is missing (Debian package libonnx-testdata; tools/setup.sh installs it)" >&2
  exit 1
fi
mkdir -p "$STAGE/onnx-node"
cp -r "$NODE_TESTS"/. "$STAGE/onnx-node/"
cp tools/run_gpu.sh "$STAGE/run_gpu.sh"
du -sh "$STAGE"
# One compressed archive (the test binaries share most of their code, so it packs well) for the
# device tool's carry limit: on the GPU machine `tar -xJf .stage.tar.xz && .stage/run_gpu.sh`.
tar -cf - .stage | xz -T0 -6 > .stage.tar.xz
ls -la .stage.tar.xz
