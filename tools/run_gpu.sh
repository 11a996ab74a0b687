#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, after tools/stage_gpu.sh staged .stage/.
#   .stage/run_gpu.sh [tests] [conformance] [sanitize] [bench] [decode] [profile] [models] [load]
#        (default: tests, which includes conformance)
# tests: every test executable (the GPU ones run for real there; several at once), the
#        conformance runs, the CLI test, the Python package's tests, then the main job.
#        KILN_TESTS=regex limits the test executables to those whose name matches.
# conformance: `kiln conformance` over ONNX's node tests (staged in .stage/onnx-node, less
#        tests/e2e/onnx_node_exclusions.txt) and over the exported corpus (tests/models/exported)
#        in fp32, fp16 and bf16; each table is saved as $OUT/conformance_<what>.txt.
# sanitize: compute-sanitizer (COMPUTE_SANITIZER, default the one on PATH or in
#        /usr/local/cuda/bin): first the planted out-of-bounds kernel (kernels_planted_oob_check),
#        which memcheck must fail on; then memcheck over the kernel and runtime GPU test suites,
#        racecheck and synccheck over the attention, paged-attention, reduce and scan suites, all
#        with --error-exitcode. KILN_SANITIZE_TESTS=regex limits the suites.
# bench: the kernel benchmarks (tests/kernels/bench_*) and the attention comparison with
#        PyTorch's scaled_dot_product_attention (tools/bench_attention.py).
# decode: the LLM decode benchmark (tools/bench/decode_bench.py, tools/bench/README.md): GPT-2
#        small and a 0.85B Llama exported with a KV cache, `kiln generate --bench-decode` against
#        PyTorch eager and torch.compile and the copy-bandwidth floor at batch 1, 8, 32, 64 and
#        context 512; tables and summary printed, $OUT/decode_bench.json, under 10 minutes.
#        KILN_DECODE_ARGS adds options (e.g. "--models llama --autotune").
# profile: after decode: Nsight Compute over one decode step of each cache decode_bench.py compiled
#        (tools/bench/decode_profile.py): time, DRAM bytes and share per kernel family at batch 1
#        and 8; $OUT/decode_profile.log, every kernel of each step in logs.tar.gz
#        (decode_profile/). KILN_PROFILE_ARGS adds options (e.g. "--batches 1").
# models: the three-model benchmark (tools/bench/model_bench.py, tools/bench/README.md): BERT-base,
#        GPT-2 small and a 0.85B Llama exported and compiled here, kiln FULL / PIECEWISE / NONE
#        against PyTorch eager and torch.compile (reduce-overhead, max-autotune), outputs checked;
#        tables and summary printed, $OUT/model_bench.{json,md,png}, under 10 minutes.
#        KILN_MODEL_BENCH_ARGS adds options (e.g. "--models bert --no-autotune").
# load: the weight-load benchmark (tools/bench/load_bench.py): a synthetic 1.6 GB fp16 model
#        compiled here, loaded from a warm page cache with each upload strategy, hashing on.
# Logs go to $OUT (or .stage/out); a pass/fail table is printed last. Exits 0 only when every
# part passed: 1 when anything failed, crashed, timed out or skipped a test for want of a device
# (KILN_REQUIRE_GPU=1 makes the test executables fail such a skip), 3 when there is no usable GPU.
set -uo pipefail
export KILN_REQUIRE_GPU=1
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
      # Every model and GEMM at 1 and 8 rows: with all four default row counts GPT-2's GEMMs
      # alone took about 150 s on an H200 (each geometry compiles twice), the whole run past 240.
      *bench_skinny_gemm) timeout 240 "$b" "" 1 8 > "$LOGS/$name.log" 2>&1 ;;
      *) timeout 240 "$b" > "$LOGS/$name.log" 2>&1 ;;  # the paged decode sweep: about 100 s
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

# One compute-sanitizer run: LABEL TOOL EXECUTABLE [ARGS...]; its log to $LOGS/LABEL.log, a
# summary line (rc and the tool's ERROR SUMMARY) to LABEL.csum.
# API calls that fail on purpose (the runtime counts a kernel's parameters by calling
# cudaFuncGetParamInfo until it says "invalid value") are not reported (--report-api-errors no):
# a failing CUDA call is the tests' business; the sanitizer's is device memory, races and
# barriers. Tests that compare timings do not run under it (GTEST_FILTER).
sanitize_one() {
  local label=$1 tool=$2 rc
  shift 2
  GTEST_FILTER='-*NeverSlowerThan*' timeout "${KILN_SANITIZE_TIMEOUT:-420}" "$SANITIZER" \
    --tool "$tool" --error-exitcode 86 --report-api-errors no --print-limit 20 "$@" \
    > "$LOGS/$label.log" 2>&1
  rc=$?
  printf '%-44s rc=%d %s\n' "$label" "$rc" \
    "$(grep -m1 'ERROR SUMMARY' "$LOGS/$label.log" || tail -1 "$LOGS/$label.log")" > "$LOGS/$label.csum"
  cat "$LOGS/$label.csum" >> "$OUTDIR/progress.txt"
}

run_sanitize() {
  SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
  if [ ! -x "$SANITIZER" ]; then
    summary+=("sanitize rc=1 compute-sanitizer not found ($SANITIZER)")
    return
  fi
  # The planted bug first: a sanitizer run that cannot fail proves nothing.
  "$SANITIZER" --tool memcheck --error-exitcode 86 "$STAGE/bin/kernels_planted_oob_check" \
    > "$LOGS/sanitize_planted_oob.log" 2>&1
  local rc=$?
  if [ $rc -eq 86 ] && grep -q 'Invalid __global__ write' "$LOGS/sanitize_planted_oob.log"; then
    summary+=("$(printf '%-44s rc=0 memcheck failed on the planted out-of-bounds write (exit 86), as it must: %s' \
      sanitize_planted_oob "$(grep -m1 'ERROR SUMMARY' "$LOGS/sanitize_planted_oob.log")")")
  else
    summary+=("$(printf '%-44s rc=1 memcheck did NOT fail on the planted out-of-bounds write (exit %d)' \
      sanitize_planted_oob "$rc")")
  fi
  echo "---- the planted bug under memcheck (exit $rc):"
  grep -E 'Invalid|ERROR SUMMARY|planted_oob' "$LOGS/sanitize_planted_oob.log" | head -6
  local t name
  for t in "$STAGE"/tests/kernels_*_gpu_test "$STAGE"/tests/runtime_*_gpu_test; do
    name=$(basename "$t")
    if [ -n "${KILN_SANITIZE_TESTS:-}" ] && ! [[ "$name" =~ $KILN_SANITIZE_TESTS ]]; then continue; fi
    # Not these: the stress test sizes itself from free memory and times itself; the device-fault
    # test faults on purpose (in a child process) to check the runtime's context-lost status.
    [[ "$name" == *stress* || "$name" == *device_fault* ]] && continue
    sanitize_one "memcheck_$name" memcheck "$t" &
    while [ "$(jobs -rp | wc -l)" -ge "${KILN_TEST_JOBS:-8}" ]; do wait -n; done
  done
  for tool in racecheck synccheck; do
    for name in kernels_attention_gpu_test kernels_paged_attention_gpu_test kernels_reduce_gpu_test \
        kernels_scan_gpu_test; do
      if [ -n "${KILN_SANITIZE_TESTS:-}" ] && ! [[ "$name" =~ $KILN_SANITIZE_TESTS ]]; then continue; fi
      [ -x "$STAGE/tests/$name" ] && sanitize_one "${tool}_$name" "$tool" "$STAGE/tests/$name" &
      while [ "$(jobs -rp | wc -l)" -ge "${KILN_TEST_JOBS:-8}" ]; do wait -n; done
    done
  done
  wait
  for f in "$LOGS"/memcheck_*.csum "$LOGS"/racecheck_*.csum "$LOGS"/synccheck_*.csum; do
    [ -f "$f" ] && summary+=("$(cat "$f")")
  done
  for f in "$LOGS"/memcheck_*.log "$LOGS"/racecheck_*.log "$LOGS"/synccheck_*.log; do
    if [ -f "$f" ] && grep -qE 'ERROR SUMMARY: [1-9]|^\[  FAILED  \]' "$f"; then
      echo "---- $(basename "$f")"
      grep -E -A6 '^========= (Invalid|Race|Barrier|Error)|ERROR SUMMARY|^\[  FAILED  \]' "$f" | head -40
    fi
  done
  echo "sanitizer: $("$SANITIZER" --version | tail -1)"
}

# The LLM decode benchmark (issue 14).
run_decode() { run_python_bench decode_bench "${KILN_DECODE_TIMEOUT:-585}" "${KILN_DECODE_ARGS:-}"; }

# Where a decode step's time goes (after run_decode, which compiled the caches).
run_profile() {
  local caches=(/tmp/kiln_decode_bench/*/cache_FULL_DECODE_ONLY_*) rc
  if ! [ -d "${caches[0]}" ]; then
    summary+=("$(printf '%-44s rc=1 no decode_bench caches in /tmp/kiln_decode_bench (run decode first)' decode_profile)")
    return
  fi
  # shellcheck disable=SC2086  # KILN_PROFILE_ARGS is a list of options
  timeout "${KILN_PROFILE_TIMEOUT:-540}" python3 tools/bench/decode_profile.py --kiln "$KILN" \
    --out "$LOGS/decode_profile" ${KILN_PROFILE_ARGS:-} "${caches[@]}" > "$LOGS/decode_profile.log" 2>&1
  rc=$?
  summary+=("$(printf '%-44s rc=%d %s' decode_profile "$rc" "$(tail -1 "$LOGS/decode_profile.log" | cut -c1-600)")")
  echo "---- decode_profile (rc=$rc)"
  grep -v '^\[' "$LOGS/decode_profile.log" | tail -80
  cp "$LOGS/decode_profile.log" "$OUTDIR/"
}

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
    sanitize) run_sanitize ;;
    bench) run_bench ;;
    decode) run_decode ;;
    profile) run_profile ;;
    models) run_models ;;
    load) run_python_bench load_bench "${KILN_LOAD_BENCH_TIMEOUT:-300}" "${KILN_LOAD_BENCH_ARGS:-}" ;;
    *) echo "unknown part '$w' (tests, conformance, sanitize, bench, decode, profile, models, load)"; exit 2 ;;
  esac
done
# The pass/fail table: one row per test executable, conformance table, sanitizer run, script and
# benchmark. FAIL: a non-zero exit (a failed, crashed or timed-out test; a test skipped for want
# of a device) or a failed test in its log.
failed_tests=$(grep -l '^\[  FAILED  \]' "$LOGS"/*.log 2>/dev/null || true)
{
  echo "================ pass/fail ================"
  passed=0 failed=0 not_run=0
  for line in "${summary[@]}"; do
    name=${line%% *}
    if ! [[ "$line" =~ \ rc=[0-9]+ ]]; then
      verdict=SKIP not_run=$((not_run + 1))  # not run here, with the reason (e.g. CI runs it)
    elif [[ "$line" =~ \ rc=0( |$) ]] && ! grep -qx "$LOGS/$name.log" <<< "$failed_tests"; then
      verdict=PASS passed=$((passed + 1))
    else
      verdict=FAIL failed=$((failed + 1))
    fi
    printf '%s  %s\n' "$verdict" "$line"
  done
  echo "---- $passed passed, $failed failed, $not_run not run here"
} > "$LOGS/summary.txt"
cp "$LOGS/summary.txt" "$OUTDIR/"
tar -czf "$OUTDIR/logs.tar.gz" -C "$LOGS" .
cat "$LOGS/summary.txt"
# Exit non-zero when anything failed, crashed or timed out: a summary line with rc other than 0,
# or a test log with a failed test.
failed=$(printf '%s\n' "${summary[@]}" | grep -E ' rc=[1-9]' || true)
if [ -n "$failed" ] || [ -n "$failed_tests" ]; then
  echo "run_gpu: FAILED"
  [ -n "$failed" ] && printf '%s\n' "$failed"
  [ -n "$failed_tests" ] && printf 'failed tests in %s\n' $failed_tests
  exit 1
fi
echo "run_gpu: all passed"
