#!/usr/bin/env bash
# The runtime benchmark on the GPU machine, from the repo root, after tools/stage_gpu.sh staged
# .stage/ (same environment as tools/run_gpu.sh). Generates the 12-layer bench model
# (tests/models/make_models.py --bench-mlp12: 36 capture sizes, max_size 512) into a temp dir on
# local disk, compiles it, checks `kiln run --reference` at sizes 1, 8, 64, then runs
# `kiln bench` in FULL and NONE at sizes 1, 8, 64 (text and --json into $OUT) and prints a short
# summary last: load + capture time, bytes per captured size, FULL vs NONE latency.
#   tools/bench_gpu.sh            (a few tens of seconds; well under 3 minutes)
set -uo pipefail
ROOT=$(pwd)
STAGE=$ROOT/.stage
OUTDIR=${OUT:-$STAGE/out}
mkdir -p "$OUTDIR"
export LD_LIBRARY_PATH=$STAGE/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
KILN=$STAGE/bin/kiln
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "bench_gpu: $*" >&2; exit 1; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUTDIR/bench_gpu.txt"
python3 tests/models/make_models.py --bench-mlp12 "$WORK/model" || fail "generating the bench model"
"$KILN" compile "$WORK/model/model.onnx" -c "$WORK/model/kiln.yaml" -o "$WORK/cache" \
  > "$OUTDIR/bench_compile.log" 2>&1 || { cat "$OUTDIR/bench_compile.log"; fail "kiln compile"; }
cat "$OUTDIR/bench_compile.log"

# Correctness first: the CPU reference at the three sizes.
"$KILN" run "$WORK/cache" --reference "$WORK/model/model.onnx" --sizes 1,8,64 --iters 20 \
  > "$OUTDIR/bench_run_reference.log" 2>&1
run_rc=$?
grep -E "MATCH|MISMATCH|summary|loaded" "$OUTDIR/bench_run_reference.log"

# Timings: human-readable and JSON (the JSON is what the summary reads).
"$KILN" bench "$WORK/cache" --mode FULL --mode NONE --sizes 1,8,64 --compare-upload \
  > "$OUTDIR/bench.txt" 2>&1
bench_rc=$?
cat "$OUTDIR/bench.txt"
"$KILN" bench "$WORK/cache" --mode FULL --mode NONE --sizes 1,8,64 --json \
  > "$OUTDIR/bench.json" 2> "$OUTDIR/bench_json.err"
json_rc=$?

python3 - "$OUTDIR/bench.json" "$run_rc" "$bench_rc" "$json_rc" <<'PY' | tee -a "$OUTDIR/bench_gpu.txt"
import json, sys
path, run_rc, bench_rc, json_rc = sys.argv[1], *map(int, sys.argv[2:])
print("================ bench summary (12-layer MLP, 36 capture sizes) ================")
print(f"kiln run --reference rc={run_rc} (0: every size MATCH); kiln bench rc={bench_rc}; --json rc={json_rc}")
try:
    b = json.load(open(path))
except Exception as e:  # noqa: BLE001
    print(f"no JSON: {e}")
    sys.exit(1)
load = b["load"]
modes = {m["requested"]: m for m in b["modes"]}
full = modes.get("FULL")
print(f"load {load['total_ms']:.1f} ms (device init {load['device_init_ms']:.1f}, weights "
      f"{load['weights_ms']:.1f} [{load['weights_strategy']}, {load['weights_bytes'] / 2**20:.1f} MiB], "
      f"cubins {load['cubin_ms']:.1f}, cuBLASLt {load['cublaslt_ms']:.1f})")
if full:
    n = full["captured_sizes"]
    print(f"FULL executor {full['create_ms']:.1f} ms ({n} sizes captured in {full['capture_ms']:.1f} ms); "
          f"load + capture {load['total_ms'] + full['create_ms']:.1f} ms (goal < 1500)")
    print(f"graph memory {full['graph_device_bytes'] / 2**20:.2f} MiB total = "
          f"{full['graph_device_bytes_per_size'] / 1024:.1f} KiB per captured size "
          f"(cudaMemGetInfo deltas); arena {full['arena_bytes'] / 2**20:.1f} MiB shared by all sizes")
for row in b["summary"]:
    parts = [f"{k[:-3]} {v:.4f} ms" for k, v in row.items() if k.endswith("_ms")]
    ratio = row.get("ratio_last_over_first")
    extra = f"  NONE/FULL = {ratio:.2f}x" if ratio else ""
    print(f"size {row['size']:>3}: device median " + ", ".join(parts) + extra)
PY
[ $run_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $json_rc -eq 0 ]
