#!/usr/bin/env bash
# The installed runtime as an application sees it: `meson install` into a scratch root, then
# tools/examples/build.sh builds the C and C++ example apps through pkg-config alone (no path into
# the source or build tree), and they must link nothing of the compiler (ONNX, full protobuf,
# yaml-cpp, NVRTC). Then both run a compiled artifact: without a GPU they must say so (exit 3);
# with one (or KILN_REQUIRE_GPU=1) they must run it and print the same outputs.
#   examples_test.sh KILN_BINARY SOURCE_ROOT BUILD_DIR
set -euo pipefail
KILN=$1
ROOT=$2
BUILD=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

meson install -C "$BUILD" --no-rebuild --quiet --destdir "$TMP/root" >/dev/null
pc=$(find "$TMP/root" -name kiln-runtime.pc)
[ -n "$pc" ] || fail "meson install wrote no kiln-runtime.pc"
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
want=$(meson introspect "$BUILD" --projectinfo | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
[ "$(pkg-config --modversion kiln-runtime)" = "$want" ] || fail "kiln-runtime.pc version is not $want"
incdir=$(pkg-config --variable=includedir kiln-runtime)/kiln-runtime
for h in kiln/runtime.h kiln/model.h kiln/executor.h kiln/generator.h kiln/tensor.h \
         kiln/graph_mode.h kiln/export.h cache/status.h cache/dtype.h; do
  [ -f "$incdir/$h" ] || fail "header $h not installed under $incdir"
done
# Every header the installed ones include is installed too, or is a standard header.
missing=$(grep -ho '#include "[^"]*"' "$incdir"/kiln/*.h "$incdir"/cache/*.h | sed 's/#include "\(.*\)"/\1/' |
  sort -u | while read -r h; do [ -f "$incdir/$h" ] || echo "$h"; done)
[ -z "$missing" ] || fail "installed headers include headers that are not installed: $missing"
libdir=$(pkg-config --variable=libdir kiln-runtime)
soname=$(objdump -p "$libdir/libkiln_runtime.so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libkiln_runtime.so.0" ] || fail "libkiln_runtime.so has soname '$soname'"

# Build exactly as tools/examples/README.md tells an application developer to.
(cd "$TMP" && "$ROOT/tools/examples/build.sh" "$TMP/bin")
for app in run_model_c run_model_cpp; do
  deps=$(LD_LIBRARY_PATH=$libdir ldd "$TMP/bin/$app")
  grep -q "libkiln_runtime.so.0 => $libdir" <<<"$deps" || fail "$app does not load the installed runtime: $deps"
done
# No compiler-only library (ONNX, full protobuf, yaml-cpp, NVRTC, libcuda): the runtime's own check.
LD_LIBRARY_PATH=$libdir sh "$ROOT/tests/runtime/check_runtime_deps.sh" "$libdir/libkiln_runtime.so.0" \
  "$TMP/bin/run_model_c" "$TMP/bin/run_model_cpp" >/dev/null || fail "the installed runtime or an app loads compiler-only libraries"

"$KILN" compile "$ROOT/tests/models/mlp_softmax/model.onnx" -c "$ROOT/tests/models/mlp_softmax/kiln.yaml" \
  -o "$TMP/cache" >/dev/null
gpu=0
if "$KILN" device >/dev/null 2>&1; then gpu=1; fi
if [ "${KILN_REQUIRE_GPU:-0}" = 1 ] && [ $gpu = 0 ]; then fail "KILN_REQUIRE_GPU=1 and no usable GPU"; fi
for app in run_model_c run_model_cpp; do
  set +e
  out=$(LD_LIBRARY_PATH=$libdir "$TMP/bin/$app" "$TMP/cache" --size 3 --out "$TMP/out_$app" 2>&1)
  rc=$?
  set -e
  if [ $gpu = 0 ]; then
    [ $rc = 3 ] && grep -q "needs a CUDA GPU" <<<"$out" || fail "$app without a GPU: rc $rc: $out"
  else
    [ $rc = 0 ] && grep -q "sum:" <<<"$out" || fail "$app: rc $rc: $out"
  fi
  echo "$app (rc $rc): $(head -3 <<<"$out" | tr '\n' ' ')"
  LD_LIBRARY_PATH=$libdir "$TMP/bin/$app" 2>/dev/null && fail "$app with no arguments succeeded"
  LD_LIBRARY_PATH=$libdir "$TMP/bin/$app" /nonexistent/kiln-cache >/dev/null 2>&1 && fail "$app ran a missing cache"
done
if [ $gpu = 1 ]; then
  # Same inputs, same artifact: the C and C++ apps save identical outputs.
  for f in "$TMP"/out_run_model_c/*.npy; do
    cmp -s "$f" "$TMP/out_run_model_cpp/$(basename "$f")" || fail "C and C++ outputs differ: $(basename "$f")"
  done
fi
echo "examples: installed headers, kiln-runtime.pc and the C and C++ apps OK (gpu=$gpu)"
