#!/usr/bin/env bash
# The main job: what kiln is for, on a tiny GPT-2 (2 layers, random weights) exported by
# torch.onnx (TorchScript, opset 17) and bundled in tests/models with onnxruntime's outputs.
#  1. compile it into a cache directory (no GPU needed), and its KV-cache export for generation;
#  2. verify both artifacts;
#  3. with a GPU: run the stored inputs and compare with onnxruntime's stored outputs, time
#     several sizes with CUDA graph replay against eager launches, and generate 32 tokens for two prompts as one ragged batch, compared with onnxruntime's
#     greedy tokens. Without a GPU it says what running needs.
# Exits non-zero when a step fails or an output disagrees.
#   KILN_EXAMPLE_CACHE=DIR (default .cache-example), KILN_BIN=path/to/kiln (default: build it)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${KILN_BIN:-}" ]; then
  tools/setup.sh build tools/kiln >/dev/null
  KILN_BIN=build/tools/kiln
fi
KILN=$KILN_BIN
MODEL=tests/models/exported/gpt2_ts17_eager
KV=tests/models/kv/gpt2_ts17_kv
CACHE=${KILN_EXAMPLE_CACHE:-.cache-example}
step() { printf '\n== %s\n' "$*"; }

step "compile $MODEL (batch 2, sequence 1..32; graphs for 1, 2, 4, 8, 16, 32 tokens)"
$KILN compile $MODEL/model.onnx -c $MODEL/kiln.yaml -o "$CACHE/gpt2"
step "compile its KV-cache export $KV for generation (paged KV cache, FULL_AND_PIECEWISE)"
$KILN compile $KV/model.onnx -c $KV/kiln.yaml -o "$CACHE/gpt2-kv"
step "verify both artifacts (every file's size and hash)"
$KILN verify "$CACHE/gpt2"
$KILN verify "$CACHE/gpt2-kv"
if ! $KILN device; then
  echo
  echo "No usable CUDA GPU here: both models are compiled into $CACHE and verified."
  echo "Running them needs an NVIDIA GPU (sm_90 as configured in $MODEL/kiln.yaml) and its driver:"
  echo "copy $CACHE to such a machine and run tools/example.sh there, or load it from an app"
  echo "(tools/examples/README.md) or Python (python/README.md)."
  exit 0
fi

for set in $MODEL/test_data_set_*; do
  step "run $(basename "$set") and compare with onnxruntime's outputs"
  $KILN run "$CACHE/gpt2" --expect "$set"
done
step "time sizes 1, 5, 8, 32 (random inputs): graph replay (padded to the captured size) vs eager launches"
$KILN run "$CACHE/gpt2" --sizes 1,5,8,32 --iters 200

step "generate 32 tokens for onnxruntime's two prompts, as one ragged batch"
PROMPTS=$(mktemp)
trap 'rm -f "$PROMPTS"' EXIT
python3 -c "
import json
for p in json.load(open('$KV/greedy.json'))['prompts']:
    print(','.join(map(str, p['prompt'])))" > "$PROMPTS"
$KILN generate "$CACHE/gpt2-kv" --prompts "$PROMPTS" --max-new-tokens 32 --json |
  python3 -c "
import json, sys
got = json.load(sys.stdin)
want = json.load(open('$KV/greedy.json'))['prompts']
ok = True
for g, w in zip(got['prompts'], want):
    same = g['tokens'] == w['tokens']
    ok &= same and g['prompt'] == w['prompt']
    print(f\"prompt {g['prompt']}: {'same tokens as onnxruntime' if same else 'DIFFERENT from onnxruntime'}\")
    print(f\"  kiln: {g['tokens']}\")
print(f\"mode {got['mode']}: time to first token {got['time_to_first_token_ms']:.2f} ms, \"
      f\"{got['time_per_output_token_ms']:.3f} ms per output token, {got['tokens_per_second']:.0f} tokens/s\")
sys.exit(0 if ok and len(got['prompts']) == len(want) else 1)"
echo
echo "example: all outputs match onnxruntime"
