#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, after tools/stage_gpu.sh staged .stage/:
# every test executable (the GPU ones run for real there), the CLI test, then the main job.
# Logs go to $OUT (or .stage/logs); a short summary is printed last.
set -uo pipefail
ROOT=$(pwd)
STAGE=$ROOT/.stage
OUTDIR=${OUT:-$STAGE/out}
LOGS=$(mktemp -d)
mkdir -p "$OUTDIR"
export LD_LIBRARY_PATH=$STAGE/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KILN_SOURCE_ROOT=$ROOT
KILN=$STAGE/bin/kiln
summary=()
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
for t in "$STAGE"/tests/*_test; do
  name=$(basename "$t")
  # ONNX's node-test data (Debian's libonnx-testdata) is a CPU-tier input that the GPU machine
  # does not have; CI runs this test.
  if [ "$name" = compiler_onnx_node_conformance_test ] && [ ! -d /usr/share/libonnx-testdata ]; then
    summary+=("$(printf '%-40s not run: no /usr/share/libonnx-testdata here (CI runs it)' "$name")")
    continue
  fi
  start=$(date +%s%N)
  "$t" > "$LOGS/$name.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  line=$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$LOGS/$name.log" | tr '\n' ' ')
  skipped=$(grep -c '^\[  SKIPPED \]' "$LOGS/$name.log")
  summary+=("$(printf '%-40s rc=%d %6dms skipped=%s %s' "$name" "$rc" "$ms" "$skipped" "$line")")
  [ $rc -ne 0 ] && grep -E '^\[  FAILED  \]|Failure|error' "$LOGS/$name.log" | head -20
done
bash tests/tools/cli_test.sh "$KILN" "$ROOT" > "$LOGS/cli_test.log" 2>&1
summary+=("cli_test rc=$? $(tail -1 "$LOGS/cli_test.log")")

# The main job, as tools/example.sh runs it, with the staged binary.
CACHE=$(mktemp -d)
MODEL=tests/models/mlp_softmax
{
  $KILN compile $MODEL/model.onnx -c $MODEL/kiln.yaml -o "$CACHE" &&
  $KILN verify "$CACHE" && $KILN device &&
  $KILN run "$CACHE" --reference $MODEL/model.onnx --sizes 1,3,8,13,64 --iters 500
} > "$LOGS/example.log" 2>&1
summary+=("example rc=$?")
cat "$LOGS/example.log"
{
  echo "================ summary ================"
  printf '%s\n' "${summary[@]}"
} > "$LOGS/summary.txt"
cp "$LOGS/example.log" "$LOGS/summary.txt" "$OUTDIR/"
tar -czf "$OUTDIR/logs.tar.gz" -C "$LOGS" .
cat "$LOGS/summary.txt"
