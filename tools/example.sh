#!/usr/bin/env bash
# The main job: compile the bundled example model into a cache directory; with a GPU, load it,
# run it at several sizes and compare with the CPU reference.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build >/dev/null
MODEL=tests/models/mlp_softmax
CACHE=${KILN_EXAMPLE_CACHE:-.cache-example}
KILN=build/tools/kiln

$KILN compile $MODEL/model.onnx -c $MODEL/kiln.yaml -o "$CACHE"
$KILN verify "$CACHE"
if $KILN device; then
  $KILN run "$CACHE" --reference $MODEL/model.onnx --sizes 1,3,8,13,64
else
  echo "No GPU on this machine: the model is compiled into $CACHE; running it needs a CUDA GPU."
fi
