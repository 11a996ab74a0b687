#!/usr/bin/env bash
# CLI test: kiln compile / verify / inspect / run on the example model, and bad-input errors.
#   cli_test.sh KILN_BINARY SOURCE_ROOT
set -uo pipefail
KILN=$1
ROOT=$2
MODEL=$ROOT/tests/models/mlp_softmax
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
check() {  # check NAME EXPECTED_RC PATTERN -- command...
  local name=$1 want_rc=$2 pattern=$3
  shift 4
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$want_rc" ] && grep -qE -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name (rc $rc, expected $want_rc; pattern '$pattern')"
    echo "$out" | sed 's/^/    /'
  fi
}

check "compile" 0 "compiled .*model.onnx" -- "$KILN" compile "$MODEL/model.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/cache"
check "compile again is a cache hit" 0 "cache hit" -- "$KILN" compile "$MODEL/model.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/cache"
check "verify" 0 "OK .*files" -- "$KILN" verify "$TMP/cache"
check "inspect" 0 '"S",' -- "$KILN" inspect "$TMP/cache"

if "$KILN" device >/dev/null 2>&1; then
  check "run with reference" 0 "reference MATCH" -- "$KILN" run "$TMP/cache" --reference "$MODEL/model.onnx" --sizes 1,5 --iters 5
  check "run with given inputs" 0 "probs .*\[13, 32\]" -- "$KILN" run "$TMP/cache" --input "$MODEL/test_data_set_1/input_0.pb" --reference "$MODEL/model.onnx" --iters 5
  check "run rejects a size above max_size" 1 "65" -- "$KILN" run "$TMP/cache" --sizes 65
else
  check "run without a GPU" 3 "running it needs a CUDA GPU" -- "$KILN" run "$TMP/cache"
fi

art=$(ls -d "$TMP"/cache/kiln-v1/*/)
printf '\x00' | dd of="$art/weights.bin" bs=1 seek=10 conv=notrunc status=none
check "verify detects a flipped byte" 1 "weights.bin" -- "$KILN" verify "$TMP/cache"

printf 'size_dim: batch\nmax_size: 8\nfancy: 1\n' > "$TMP/unknown.yaml"
check "unknown config key" 1 "unknown.yaml:3.*fancy" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/unknown.yaml" -o "$TMP/c2"
printf 'size_dim: batch\nmax_size: 8\ncompilation:\n  mode: FASTEST\n' > "$TMP/mode.yaml"
check "bad mode" 1 "mode.yaml:4.*FASTEST" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/mode.yaml" -o "$TMP/c2"
printf 'size_dim: batch\nmax_size: 8\ncompilation:\n  cudagraph_capture_sizes: [1, 16]\n' > "$TMP/cap.yaml"
check "capture size above max_size" 1 "cap.yaml:4.*16" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/cap.yaml" -o "$TMP/c2"
head -c 100 "$MODEL/model.onnx" > "$TMP/truncated.onnx"
check "truncated model" 1 "truncated.onnx" -- "$KILN" compile "$TMP/truncated.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/c2"
check "missing model" 1 "missing.onnx" -- "$KILN" compile "$TMP/missing.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/c2"
check "nothing half-written" 0 "^$" -- bash -c "ls '$TMP/c2/kiln-v1' 2>/dev/null | grep -v '^\.' || true"
check "usage error" 2 "subcommand|frobnicate" -- "$KILN" frobnicate

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
