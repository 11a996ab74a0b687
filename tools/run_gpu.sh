#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, after tools/stage_gpu.sh staged .stage/.
#   .stage/run_gpu.sh [tests] [conformance] [bench] [decode] [models]   (default: tests, which includes conformance)
# tests: every test executable (the GPU ones run for real there; several at once), the
#        conformance runs, the CLI test, the Python package's tests, then the main job.
#        KILN_TESTS=regex limits the test executables to those whose name matches.
# conformance: `kiln conformance` over ONNX's node tests (staged in .stage/onnx-node, less
#        tests/e2e/onnx_node_exclusions.txt) and over the exported corpus (tests/models/exported)
#        in fp32, fp16 and bf16; each table is saved as $OUT/conformance_<what>.txt.
# bench: the kernel benchmarks (tests/kernels/bench_*) and the attention comparison with
#        PyTorch's scaled_dot_product_attention (tools/bench_attention.py).
# decode: the LLM decode benchmark (tools/bench/decode_bench.py, tools/bench/README.md): GPT-2
#        small and a 0.85B Llama exported with a KV cache, `kiln generate --bench-decode` against
#        PyTorch eager and torch.compile and the copy-bandwidth floor at batch 1, 8, 32, 64 and
#        context 512; tables and summary printed, $OUT/decode_bench.json, under 10 minutes.
#        KILN_DECODE_ARGS adds options (e.g. "--models llama --autotune").
# models: the three-model benchmark (tools/bench/model_bench.py, tools/bench/README.md): BERT-base,
#        GPT-2 small and a 0.85B Llama exported and compiled here, kiln FULL / PIECEWISE / NONE
#        against PyTorch eager and torch.compile (reduce-overhead, max-autotune), outputs checked;
#        tables and summary printed, $OUT/model_bench.{json,md,png}, under 10 minutes.
#        KILN_MODEL_BENCH_ARGS adds options (e.g. "--models bert --no-autotune").
# Logs go to $OUT (or .stage/out); a short summary is printed last. Exits 0 only when every part
# passed: 1 when anything failed, crashed or timed out, 3 when there is no usable GPU.
set -uo pipefail
ROOT=$(pwd)
STAGE=$ROOT/.stage
OUTDIR=${OUT:-$STAGE/out}
LOGS=$(mktemp -d)
mkdir -p "$OUTDIR"
: > "$OUTDIR/progress.txt"
export LD_LIBRARY_PATH=$STAGE/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KILN_SOURCE_ROOT=$ROOT
KILN=$STAGE/bin/kiln
WHAT=("$@")
[ ${#WHAT[@]} -eq 0 ] && WHAT=(tests)
summary=()
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt" ||
   ! "$KILN" device > "$LOGS/device.txt" 2>&1; then
  cat "$LOGS/device.txt" 2>/dev/null
  echo "run_gpu: no usable CUDA device here: nothing was verified" >&2
  exit 3
fi

# One test binary (or one shard of it): log to $LOGS/<label>.log, a summary line to <label>.csum.
run_one() {
  local t=$1 label=$2
  local start rc ms line skipped
  start=$(date +%s%N)
  timeout "${KILN_TEST_TIMEOUT:-300}" "$t" > "$LOGS/$label.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  line=$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$LOGS/$label.log" | tr '\n' ' ')
  skipped=$(grep -c '^\[  SKIPPED \]' "$LOGS/$label.log")
  printf '%-44s rc=%d %7dms skipped=%s %s\n' "$label" "$rc" "$ms" "$skipped" "$line" > "$LOGS/$label.csum"
  cat "$LOGS/$label.csum" >> "$OUTDIR/progress.txt"  # survives a run cut short
}

# Tests that time things, or size their allocations from the device's free memory, run alone,
# after the others.
ALONE=(kernels_gemm_gpu_test compiler_autotune_kernel_autotune_gpu_test
       runtime_executor_stress_gpu_test runtime_kv_cache_device_gpu_test)

run_tests() {
  for t in "$STAGE"/tests/*_test; do
    name=$(basename "$t")
    # KILN_TESTS=regex runs only the matching test executables (a partial GPU run).
    if [ -n "${KILN_TESTS:-}" ] && ! [[ "$name" =~ $KILN_TESTS ]]; then continue; fi
    # ONNX's node-test data (Debian's libonnx-testdata) is a CPU-tier input that the GPU
    # machine does not have; CI runs this test.
    if [ "$name" = compiler_reference_onnx_node_conformance_test ] && [ ! -d /usr/share/libonnx-testdata ]; then
      summary+=("$(printf '%-44s not run: no /usr/share/libonnx-testdata here (CI runs it)' "$name")")
      continue
    fi
    if [[ " ${ALONE[*]} " == *" $name "* ]]; then
      continue  # times kernels: run alone below, not beside other GPU work
    elif [[ "$name" == compiler_ops_*_test ]] && [ ! -d /usr/share/libonnx-testdata ]; then
      # their ONNX node-test cases need the same data; the rest of each suite runs
      GTEST_FILTER='-*NodeTest*:GoogleTestVerification.*' run_one "$t" "$name" &
    else
      run_one "$t" "$name" &
    fi
    # At most KILN_TEST_JOBS (default 12) test processes at once; start the next as one ends.
    while [ "$(jobs -rp | wc -l)" -ge "${KILN_TEST_JOBS:-12}" ]; do wait -n; done
  done
  wait
  for name in "${ALONE[@]}"; do
    if [ -n "${KILN_TESTS:-}" ] && ! [[ "$name" =~ $KILN_TESTS ]]; then continue; fi
    [ -x "$STAGE/tests/$name" ] && run_one "$STAGE/tests/$name" "$name"
  done
  # Each test's line (rc, time, skips): a crash or timeout without a FAILED line fails the run
  # through its rc. (The conformance tables' lines are written after this.)
  for f in "$LOGS"/*.csum; do summary+=("$(cat "$f")"); done
  for f in "$LOGS"/*_test*.log; do
    if grep -q '^\[  FAILED  \]' "$f"; then
      echo "---- $(basename "$f")"
      grep -E '^\[  FAILED  \]|Failure|error' "$f" | head -20
    fi
  done
  # A partial run (KILN_TESTS) runs the conformance tables only when its regex matches "conformance".
  if [ -z "${KILN_TESTS:-}" ] || [[ conformance =~ $KILN_TESTS ]]; then run_conformance; fi
  bash tests/tools/cli_test.sh "$KILN" "$ROOT" > "$LOGS/cli_test.log" 2>&1
  summary+=("cli_test rc=$? $(tail -1 "$LOGS/cli_test.log")")

  # The Python package's tests (tests/python) against the staged library and CLI; a missing GPU
  # fails them (KILN_REQUIRE_GPU=1) instead of skipping.
  PYTHONPATH=$ROOT/python KILN_REQUIRE_GPU=1 KILN_LIBRARY=$STAGE/lib/libkiln_runtime.so KILN_CLI=$KILN \
    timeout "${KILN_TEST_TIMEOUT:-300}" python3 -m unittest discover -s tests/python \
    > "$LOGS/python_kiln.log" 2>&1
  summary+=("python_kiln rc=$? $(grep -E '^(OK|FAILED)' "$LOGS/python_kiln.log" | tail -1)")

  # The example apps (tools/examples), built by stage_gpu.sh against the installed runtime, on
  # real exports: their outputs against onnxruntime's stored ones.
  for m in gpt2_ts17_eager llama_ts17_sdpa; do
    timeout 300 python3 tests/tools/examples_gpu_check.py "$KILN" "$STAGE/examples" \
      "tests/models/exported/$m" > "$LOGS/examples_$m.log" 2>&1
    summary+=("examples_$m rc=$? $(tail -1 "$LOGS/examples_$m.log")")
    cat "$LOGS/examples_$m.log"
  done

  # The main job (tools/example.sh) with the staged binary.
  CACHE=$(mktemp -d)
  KILN_BIN=$KILN KILN_EXAMPLE_CACHE=$CACHE timeout 300 bash tools/example.sh > "$LOGS/example.log" 2>&1
  summary+=("example rc=$? $(tail -1 "$LOGS/example.log")")
  cat "$LOGS/example.log"
  cp "$LOGS/example.log" "$OUTDIR/"
}

# One `kiln conformance` run: its table goes to $OUT/conformance_<label>.txt, its totals line to
# the summary. Exit codes: 4 a folder failed, 1 one did not compile, 3 no GPU, 124 timed out
# (KILN_CONFORMANCE_TIMEOUT seconds, default 480).
conformance_one() {
  local label=$1 rc
  shift
  timeout "${KILN_CONFORMANCE_TIMEOUT:-480}" "$KILN" -q conformance "$@" \
    > "$OUTDIR/conformance_$label.txt" 2> "$LOGS/conformance_$label.log"
  rc=$?
  printf '%-44s rc=%d %s\n' "conformance_$label" "$rc" \
    "$(grep '^totals:' "$OUTDIR/conformance_$label.txt" || tail -1 "$LOGS/conformance_$label.log")" \
    > "$LOGS/conformance_$label.csum"
  cat "$LOGS/conformance_$label.csum" >> "$OUTDIR/progress.txt"
}

# ONNX's node tests and the exported corpus in three precisions, all four at once.
run_conformance() {
  local p
  if [ -d "$STAGE/onnx-node" ]; then
    conformance_one onnx_node "$STAGE/onnx-node" --exclude tests/e2e/onnx_node_exclusions.txt &
  else
    echo "conformance_onnx_node rc=1 no $STAGE/onnx-node: stage with tools/stage_gpu.sh" > "$LOGS/conformance_onnx_node.csum"
  fi
  for p in fp32 fp16 bf16; do
    conformance_one "exported_$p" tests/models/exported --precision "$p" &
  done
  wait
  for f in "$LOGS"/conformance_*.csum; do summary+=("$(cat "$f")"); done
  for f in "$OUTDIR"/conformance_*.txt; do
    echo "---- $(basename "$f"): not passed"
    grep -vE '^ *[^ ]+ +(passed|excluded) |^totals:|folder\(s\), precision' "$f" | head -40
  done
}

run_bench() {
  for b in "$STAGE"/bench/*; do
    [ -x "$b" ] || continue
    name=$(basename "$b")
    case "$name" in
      *bench_attention) continue ;;  # run by the python comparison below
      *) timeout 120 "$b" > "$LOGS/$name.log" 2>&1 ;;
    esac
    summary+=("$(printf '%-44s rc=%d' "$name" $?)")
    tail -20 "$LOGS/$name.log"
  done
  if [ -x "$STAGE/bench/kernels_bench_attention" ]; then
    timeout 240 python3 tools/bench_attention.py "$STAGE/bench/kernels_bench_attention" > "$LOGS/bench_attention_vs_torch.log" 2>&1
    summary+=("bench_attention_vs_torch rc=$?")
    cat "$LOGS/bench_attention_vs_torch.log"
  fi
  if [ -x "$STAGE/bench/kernels_bench_attention" ]; then
    timeout 240 python3 tools/bench_attention.py --sweep "$STAGE/bench/kernels_bench_attention" > "$LOGS/bench_attention_sweep.log" 2>&1
    summary+=("bench_attention_sweep rc=$?")
    cat "$LOGS/bench_attention_sweep.log"
  fi
  bench_autotune
  cp "$LOGS"/*bench*.log "$OUTDIR/" 2>/dev/null
}

# One Python benchmark of tools/bench/ (NAME.py): its own time budget is 540 s, TIMEOUT seconds
# is the backstop; ARGS (one string: a list of options) are added to its command line.
run_python_bench() {
  local name=$1 timeout_s=$2 args=$3 rc
  # shellcheck disable=SC2086  # args is a list of options
  timeout "$timeout_s" python3 "tools/bench/$name.py" --kiln "$KILN" \
    --json-out "$OUTDIR/$name.json" $args > "$LOGS/$name.log" 2>&1
  rc=$?
  summary+=("$(printf '%-44s rc=%d %s' "$name" "$rc" "$(tail -1 "$LOGS/$name.log" | cut -c1-600)")")
  echo "---- $name (rc=$rc; full log: $name.log)"
  # The tables, failures and summary the script prints last; everything when it stopped early.
  if grep -q "^================ $name" "$LOGS/$name.log"; then
    sed -n "/^================ $name/,\$p" "$LOGS/$name.log"
  else
    tail -40 "$LOGS/$name.log"
  fi
  cp "$LOGS/$name.log" "$OUTDIR/"
}

# The LLM decode benchmark (issue 14).
run_decode() { run_python_bench decode_bench "${KILN_DECODE_TIMEOUT:-585}" "${KILN_DECODE_ARGS:-}"; }

# The three-model benchmark.
run_models() {
  run_python_bench model_bench "${KILN_MODEL_BENCH_TIMEOUT:-585}" "${KILN_MODEL_BENCH_ARGS:-}"
}

# What autotuning buys on a whole model: GPT-2 (ts17 export, eager attention) in fp16, compiled with autotune off
# and on (launch configurations and GEMM algorithms), each replayed by `kiln bench` in this run.
bench_autotune() {
  local dir cfg
  dir=$(mktemp -d)
  for tune in off on; do
    cfg=$dir/$tune.yaml
    printf '%s\n' "size_dim: seq" "dims: {batch: 2}" "max_size: 32" "precision: fp16" \
      "targets: [sm_90]" "compilation:" "  compile_sizes: [1, 8, 32]" \
      "  cudagraph_capture_sizes: [1, 8, 32]" "autotune: {enabled: $tune}" > "$cfg"
    {
      $KILN compile tests/models/exported/gpt2_ts17_eager/model.onnx -c "$cfg" -o "$dir/cache_$tune" &&
        $KILN inspect "$dir/cache_$tune" | grep -A40 "tuned launch" | head -30
      $KILN bench "$dir/cache_$tune" --sizes 1,8,32 --mode FULL
    } > "$LOGS/bench_autotune_$tune.log" 2>&1
    summary+=("bench_autotune_$tune rc=$?")
    echo "---- gpt2_ts17_eager fp16, autotune $tune"
    tail -25 "$LOGS/bench_autotune_$tune.log"
  done
}

for w in "${WHAT[@]}"; do
  case "$w" in
    tests) run_tests ;;
    conformance) run_conformance ;;
    bench) run_bench ;;
    decode) run_decode ;;
    models) run_models ;;
    *) echo "unknown part '$w' (tests, conformance, bench, decode, models)"; exit 2 ;;
  esac
done
{
  echo "================ summary ================"
  printf '%s\n' "${summary[@]}"
} > "$LOGS/summary.txt"
cp "$LOGS/summary.txt" "$OUTDIR/"
tar -czf "$OUTDIR/logs.tar.gz" -C "$LOGS" .
cat "$LOGS/summary.txt"
# Exit non-zero when anything failed, crashed or timed out: a summary line with rc other than 0,
# or a test log with a failed test.
failed=$(printf '%s\n' "${summary[@]}" | grep -E ' rc=[1-9]' || true)
failed_tests=$(grep -l '^\[  FAILED  \]' "$LOGS"/*.log 2>/dev/null || true)
if [ -n "$failed" ] || [ -n "$failed_tests" ]; then
  echo "run_gpu: FAILED"
  [ -n "$failed" ] && printf '%s\n' "$failed"
  [ -n "$failed_tests" ] && printf 'failed tests in %s\n' $failed_tests
  exit 1
fi
echo "run_gpu: all passed"
