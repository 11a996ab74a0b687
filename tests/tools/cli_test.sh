#!/usr/bin/env bash
# CLI test: kiln compile / verify / inspect / cache ls|gc / run on the example model, generate on a
# KV-cache export, the cache's promises seen from the command line (hits, explain-key,
# reproducibility, relocation, concurrent compiles, gc), and bad-input errors.
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

compile() {  # compile OUT [extra args...]
  local out=$1
  shift
  "$KILN" compile "$MODEL/model.onnx" -c "$MODEL/kiln.yaml" -o "$out" "$@"
}

check "--version" 0 "^kiln [0-9]+\.[0-9]+\.[0-9]+ compiler [0-9.]+\+[0-9a-f]{16} .*artifact format [0-9]+ CUDA runtime [0-9]+\.[0-9]+, NVRTC [0-9]+\.[0-9]+, cuBLASLt [0-9]+\.[0-9]+\.[0-9]+" -- bash -c "'$KILN' --version | tr '\n' ' '"
check "--help shows an example and the exit codes" 0 "Example:.*kiln compile model.onnx.*Exit codes: 0 success, 1 error, 2 usage, 3 no usable CUDA GPU, 4" -- bash -c "'$KILN' --help | tr '\n' ' '"
check "--version needs no subcommand" 0 "^kiln " -- "$KILN" --version
check "explain-key before compiling" 0 "cache    : miss" -- compile "$TMP/cache" --explain-key
check "explain-key lists every factor" 0 "nvrtc_version .*cublaslt_version .*targets .*model_hash .*config_hash" -- bash -c "'$KILN' compile '$MODEL/model.onnx' -c '$MODEL/kiln.yaml' -o '$TMP/cache' --explain-key | tr '\n' ' '"
check "explain-key writes nothing" 0 "^$" -- bash -c "ls -A '$TMP/cache' 2>/dev/null || true"
check "compile" 0 "compiled .*model.onnx" -- compile "$TMP/cache"
check "compile again is a cache hit" 0 "cache hit.*[0-9] s" -- compile "$TMP/cache"
check "compile --json on a hit" 0 '"cache_hit": true' -- compile "$TMP/cache" --json
check "compile --json parses" 0 "^hit ok$" -- bash -c "'$KILN' compile '$MODEL/model.onnx' -c '$MODEL/kiln.yaml' -o '$TMP/cache' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"hit ok\" if j[\"cache_hit\"] and \"artifact\" in j and \"kernels\" not in j else j)'"
check "cache ls --json" 0 "^ls ok$" -- bash -c "'$KILN' cache ls '$TMP/cache' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); e=j[\"entries\"]; print(\"ls ok\" if len(e) == 1 and e[0][\"ok\"] and e[0][\"targets\"] == [\"sm_90\"] and e[0][\"bytes\"] > 0 else j)'"
check "cache gc --dry-run --json" 0 "^gc ok$" -- bash -c "'$KILN' cache gc '$TMP/cache' --dry-run --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"gc ok\" if j[\"dry_run\"] and j[\"intact\"] == 1 and j[\"removed\"] == [] else j)'"
check "verify --json" 0 "^verify ok$" -- bash -c "'$KILN' verify '$TMP/cache' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"verify ok\" if j[\"intact\"] == 1 and j[\"failed\"] == 0 and j[\"entries\"][0][\"ok\"] and j[\"bytes\"] > 0 else j)'"
check "compile --json on a miss" 0 "^miss ok$" -- bash -c "'$KILN' compile '$MODEL/model.onnx' -c '$MODEL/kiln.yaml' -o '$TMP/cache_json' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"miss ok\" if not j[\"cache_hit\"] and j[\"gemms\"] > 0 and j[\"arena_bytes\"] > 0 else j)'"
check "explain-key after compiling" 0 "cache    : hit" -- compile "$TMP/cache" --explain-key
check "verify" 0 "OK .*files" -- "$KILN" verify "$TMP/cache"
check "inspect --json" 0 '"S",' -- "$KILN" inspect "$TMP/cache" --json
check "inspect table" 0 "mlp_softmax .*sm_90 .*1,8 .*ok" -- "$KILN" inspect "$TMP/cache"
check "inspect --json schema" 0 "^ok$" -- python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["format_version"] == 2, j["format_version"]
assert len(j["entries"]) == 1
e = j["entries"][0]
for k in ("key", "targets", "capture_sizes", "compile_sizes", "kernels", "files", "weights_bytes", "factors"):
    assert k in e, k
assert e["targets"] == ["sm_90"] and e["compile_sizes"] == [1, 8] and e["weights_bytes"] > 0
assert {f["path"] for f in e["files"]} >= {"weights.bin", "kernels/module0.sm_90.cubin"}
# launches_by_size: one row per capture or compile size, each at most the steps in all.
steps = sum(p["launches"] for p in e["pieces"])
sizes = sorted(set(e["capture_sizes"]) | set(e["compile_sizes"]))
assert [r["size"] for r in e["launches_by_size"]] == sizes, e["launches_by_size"]
assert all(0 < r["launches"] <= steps for r in e["launches_by_size"]), e["launches_by_size"]
print("ok")' < <("$KILN" inspect "$TMP/cache" --json)
check "inspect launches by size" 0 "launches per run, by padded size: 1: [0-9]+, " -- "$KILN" inspect "$TMP/cache"

# Reproducible: two compiles into two caches give byte-identical artifacts. (With a GPU present
# autotuning would time things; what it records depends on those timings, so it is off here.)
{ cat "$MODEL/kiln.yaml"; printf 'autotune: {enabled: "off"}\n'; } > "$TMP/untuned.yaml"
"$KILN" compile "$MODEL/model.onnx" -c "$TMP/untuned.yaml" -o "$TMP/u1" >/dev/null 2>&1
"$KILN" compile "$MODEL/model.onnx" -c "$TMP/untuned.yaml" -o "$TMP/u2" >/dev/null 2>&1
check "byte-identical recompiles" 0 "^$" -- diff -r "$TMP/u1/kiln-v2" "$TMP/u2/kiln-v2" -x index.json
compile "$TMP/r1" --dump-sources >/dev/null 2>&1
compile "$TMP/r2" --dump-sources >/dev/null 2>&1

# Relocatable: copy the cache, delete the original, verify and hit there.
cp -r "$TMP/r1" "$TMP/moved"
rm -rf "$TMP/r1"
check "relocated verify" 0 "1 of 1 entry intact" -- "$KILN" verify "$TMP/moved"
check "relocated hit" 0 "cache hit" -- compile "$TMP/moved" --dump-sources

# Eight compiles of one key at once: all succeed, one artifact, nothing left over.
pids=()
for i in 1 2 3 4 5 6 7 8; do
  compile "$TMP/conc" >"$TMP/conc-$i.log" 2>&1 &
  pids+=($!)
done
conc_failed=0
for p in "${pids[@]}"; do wait "$p" || conc_failed=$((conc_failed + 1)); done
check "8 concurrent compiles succeed" 0 "^0$" -- echo "$conc_failed"
check "8 concurrent compiles: one entry" 0 "1 of 1 entry intact" -- "$KILN" verify "$TMP/conc"
check "8 concurrent compiles: no leftovers" 0 "^$" -- bash -c "ls -A '$TMP/conc/kiln-v2' | grep -E '^\.(staging|trash|index)' || true"

if "$KILN" device >/dev/null 2>&1; then
  check "run with reference" 0 "reference: MATCH" -- "$KILN" run "$TMP/cache" --reference "$MODEL/model.onnx" --sizes 1,5 --iters 5
  check "run with given inputs" 0 "probs .*\[13, 32\]" -- "$KILN" run "$TMP/cache" --input "$MODEL/test_data_set_1/input_0.pb" --reference "$MODEL/model.onnx" --iters 5
  check "run rejects a size above max_size" 1 "65" -- "$KILN" run "$TMP/cache" --sizes 65
  check "device --json" 0 "^device ok$" -- bash -c "'$KILN' device --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"device ok\" if j[\"available\"] and j[\"arch\"].startswith(\"sm_\") and j[\"memory_bytes\"] > 0 else j)'"
else
  check "run without a GPU" 3 "running it needs a CUDA GPU" -- "$KILN" run "$TMP/cache"
  check "device --json without a GPU" 3 "^no-gpu ok$" -- bash -c "'$KILN' device --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"no-gpu ok\" if not j[\"available\"] and j[\"reason\"] else j); sys.exit(0)'; exit \${PIPESTATUS[0]}"
fi

# Several keys side by side: another config of the same model.
sed 's/max_size: 64/max_size: 32/; s/, 64\]/]/' "$MODEL/kiln.yaml" > "$TMP/small.yaml"
check "second key" 0 "compiled" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/small.yaml" -o "$TMP/cache" --dump-sources
check "verify all entries" 0 "2 of 2 entries intact" -- "$KILN" verify "$TMP/cache"
check "cache ls lists both" 0 "kiln-v2: 2 entries" -- "$KILN" cache ls "$TMP/cache"
check "cache ls agrees with the index" 1 "" -- bash -c "'$KILN' cache ls '$TMP/cache' | grep -q 'index disagreements'"

art=$(ls -d "$TMP"/r2/kiln-v2/*/)
printf '\x00' | dd of="$art/weights.bin" bs=1 seek=10 conv=notrunc status=none
check "verify detects a flipped byte" 1 "FAILED .*weights.bin" -- "$KILN" verify "$TMP/r2"
check "inspect flags it" 1 "CORRUPT.*weights.bin" -- "$KILN" inspect "$TMP/r2"
check "a corrupt entry is a miss, rebuilt" 0 "compiled" -- compile "$TMP/r2" --dump-sources
check "rebuilt entry verifies" 0 "1 of 1 entry intact" -- "$KILN" verify "$TMP/r2"

# gc: a corrupt entry and a stage whose compile died go; intact entries stay.
printf '\x00' | dd of="$art/kernels/module0.sm_90.cubin" bs=1 seek=100 conv=notrunc status=none
mkdir -p "$TMP/r2/kiln-v2/.staging-dead-0000"
check "cache ls shows the leftover" 0 "staging-dead-0000 .*interrupted" -- "$KILN" cache ls "$TMP/r2"
check "gc --dry-run names the corrupt file" 0 "would remove kiln-v2/[0-9a-f]+: .*module0.sm_90.cubin" -- "$KILN" cache gc "$TMP/r2" --dry-run
check "gc --dry-run" 0 "would remove kiln-v2/.staging-dead-0000" -- "$KILN" cache gc "$TMP/r2" --dry-run
check "gc --dry-run changes nothing" 0 "staging-dead" -- ls -A "$TMP/r2/kiln-v2"
check "gc" 0 "removed kiln-v2/.staging-dead-0000" -- "$KILN" cache gc "$TMP/r2"
check "gc removed the corrupt entry" 1 "" -- test -d "$art"
check "gc keeps intact entries" 0 "2 of 2 entries intact" -- "$KILN" verify "$TMP/cache"
check "gc of an intact cache removes nothing" 0 "2 intact entries kept, 0 items removed" -- "$KILN" cache gc "$TMP/cache"
# gc never removes what it cannot read: an entry whose manifest is a directory stays, and is named.
cp -a "$TMP/cache" "$TMP/r3"
un=$(ls -d "$TMP"/r3/kiln-v2/*/ | head -1)
rm "$un/manifest.kiln" && mkdir "$un/manifest.kiln"
check "gc keeps an unreadable entry" 0 "kept kiln-v2/[0-9a-f]+: cannot read: .*manifest.kiln: is a directory" -- "$KILN" cache gc "$TMP/r3"
check "the unreadable entry is still there" 0 "" -- test -d "$un/manifest.kiln"
check "verify of an empty cache fails" 1 "no kiln artifact" -- "$KILN" verify "$TMP/r2"

printf 'size_dim: batch\nmax_size: 8\nfancy: 1\n' > "$TMP/unknown.yaml"
check "unknown config key" 1 "unknown.yaml:3.*fancy" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/unknown.yaml" -o "$TMP/c2"
printf 'size_dim: batch\nmax_size: 8\ncompilation:\n  mode: FASTEST\n' > "$TMP/mode.yaml"
check "bad mode" 1 "mode.yaml:4.*FASTEST" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/mode.yaml" -o "$TMP/c2"
printf 'size_dim: batch\nmax_size: 8\ncompilation:\n  cudagraph_capture_sizes: [1, 16]\n' > "$TMP/cap.yaml"
check "capture size above max_size" 1 "cap.yaml:4.*16" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/cap.yaml" -o "$TMP/c2"
head -c 100 "$MODEL/model.onnx" > "$TMP/truncated.onnx"
check "truncated model" 1 "truncated.onnx" -- "$KILN" compile "$TMP/truncated.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/c2"
check "missing model" 1 "missing.onnx" -- "$KILN" compile "$TMP/missing.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/c2"
check "nothing half-written" 0 "^$" -- bash -c "ls '$TMP/c2/kiln-v2' 2>/dev/null | grep -v '^\.' || true"
# kiln inspect MODEL.onnx: the front end's report on real exporter output.
GPT2="$(dirname "$MODEL")/exported/gpt2_ts17_eager"
check "inspect model" 0 "attention ops: 2" -- "$KILN" inspect "$GPT2/model.onnx" -c "$GPT2/kiln.yaml"
check "inspect model piece plan" 0 "pieces: 5 \(3 unique compute\)" -- "$KILN" inspect "$GPT2/model.onnx" -c "$GPT2/kiln.yaml"
check "inspect model --json schema" 0 "^ok$" -- python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["unsupported"] == [] and j["attention_ops"] == 2, j
assert [p["kind"] for p in j["pieces"]] == ["compute", "attention"] * 2 + ["compute"]
assert all(isinstance(p["nodes"], int) and len(p["hash"]) == 32 for p in j["pieces"])
assert j["unique_compute_pieces"] == 3 and j["ops"]["Softmax"] == 2
print("ok")' < <("$KILN" inspect "$GPT2/model.onnx" -c "$GPT2/kiln.yaml" --json)
printf 'size_dim: batch\nmax_size: 8\n' > "$TMP/wrongdim.yaml"
check "inspect model with a wrong size_dim" 1 "size_dim 'batch'|dim_param 'seq'" -- "$KILN" inspect "$GPT2/model.onnx" -c "$TMP/wrongdim.yaml"

# kiln conformance: backend-test folders. Without a GPU (CI) it says so and exits 3; with one (the
# GPU machine runs this test too) the example model passes. --compile-only needs no GPU.
if "$KILN" device >/dev/null 2>&1; then
  check "conformance" 0 "mlp_softmax +passed +max\|err\|" -- "$KILN" conformance "$MODEL"
else
  check "conformance without a GPU" 3 "no usable CUDA device.*--compile-only" -- "$KILN" conformance "$MODEL"
fi
check "conformance --compile-only" 0 "mlp_softmax +compiled.*totals: 0 passed, 0 failed, 0 not compiled, 0 excluded, 2 compiled" -- bash -c "'$KILN' -q conformance --compile-only '$MODEL' '$GPT2' | tr '\n' ' '"
check "conformance --json schema" 0 "^ok$" -- python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["compile_only"] and j["totals"]["compiled"] == 1, j["totals"]
f = j["folders"][0]
assert f["name"] == "mlp_softmax" and f["verdict"] == "compiled" and f["compiles"] == 1, f
assert [s["set"] for s in f["sets"]] == ["test_data_set_0", "test_data_set_1"], f["sets"]
print("ok")' < <("$KILN" -q conformance --compile-only --json "$MODEL")
printf '# comment\nmlp_*  excluded by the CLI test\n' > "$TMP/exclude.txt"
check "conformance --exclude" 0 "mlp_softmax +excluded +excluded by the CLI test" -- "$KILN" conformance --compile-only --exclude "$TMP/exclude.txt" "$MODEL"
printf 'mlp_softmax\n' > "$TMP/noreason.txt"
check "conformance exclusion without a reason" 2 "noreason.txt:1: 'mlp_softmax' has no reason" -- "$KILN" conformance --compile-only --exclude "$TMP/noreason.txt" "$MODEL"
check "conformance with a wrong --size-dim" 1 "not compiled +invalid argument: size dim 'nope' is not a dim_param" -- "$KILN" conformance --compile-only --size-dim nope "$MODEL"
check "conformance of a missing folder" 2 "nowhere: no such folder" -- "$KILN" conformance --compile-only "$TMP/nowhere"
check "conformance --precision" 2 "fp8" -- "$KILN" conformance --compile-only --precision fp8 "$MODEL"
NODE=/usr/share/libonnx-testdata/data/node/test_relu
if [ -d "$NODE" ]; then  # a static model (no dim_param): compiled at size 1
  check "conformance of a static model" 0 "test_relu +compiled" -- "$KILN" conformance --compile-only "$NODE"
fi

# kiln generate: GPT-2 from tests/models/kv compiled for generation (compiling needs no GPU).
# Argument errors come before the artifact is read; a model without a generation section, ids
# outside the vocabulary and prompts past max_seq_len or the batch are found without a GPU;
# generating needs one (exit 3 here, onnxruntime's tokens on the GPU machine).
KV=$ROOT/tests/models/kv/gpt2_ts17_kv
printf 'size_dim: seq\ndims: {batch: 1}\nmax_size: 64\nautotune: {enabled: "off"}\nkv_cache:\n  block_size: 16\n  max_blocks: 64\n  max_sequences: 4\n  max_seq_len: 128\n' > "$TMP/kv.yaml"
check "compile for generation" 0 "compiled" -- "$KILN" -q compile "$KV/model.onnx" -c "$TMP/kv.yaml" -o "$TMP/kv"
check "generate --help" 0 "--prompt-ids.*--prompts.*--max-new-tokens.*--bench-decode.*--batches" -- bash -c "'$KILN' generate --help | tr '\n' ' '"
gen() { "$KILN" generate "$TMP/kv" "$@"; }
check "generate needs a prompt" 2 "give a prompt \(--prompt-ids 1,2,3 or --prompts FILE\) or --bench-decode" -- gen
check "generate: a bad id" 2 "--prompt-ids: 'x' is not a token id" -- gen --prompt-ids 1,x,3
check "generate: a negative id" 2 "--prompt-ids: '-4' is not a token id" -- gen --prompt-ids "1 -4"
check "generate: an empty prompt" 2 "--prompt-ids: the prompt is empty" -- gen --prompt-ids " , "
check "generate: an unknown mode" 2 "--mode: unknown cudagraph mode 'FASTEST'" -- gen --prompt-ids 1 --mode FASTEST
check "generate: one mode" 2 "--mode: generation runs in one mode" -- gen --prompt-ids 1 --mode FULL,NONE
check "generate: --top-p" 2 "--top-p 0 is outside \(0, 1\]" -- gen --prompt-ids 1 --top-p 0
printf '1,2,3\n4 abc\n' > "$TMP/bad_prompts.txt"
check "generate: a bad line in --prompts" 2 "bad_prompts.txt:2: 'abc' is not a token id" -- gen --prompts "$TMP/bad_prompts.txt"
printf '\n\n' > "$TMP/no_prompts.txt"
check "generate: an empty --prompts file" 2 "no_prompts.txt' holds no prompt" -- gen --prompts "$TMP/no_prompts.txt"
check "generate: a missing --prompts file" 2 "--prompts: cannot open '.*nowhere.txt'" -- gen --prompts "$TMP/nowhere.txt"
check "generate: --prompt-ids excludes --prompts" 2 "excludes" -- gen --prompt-ids 1 --prompts "$TMP/no_prompts.txt"
check "generate: --bench-decode excludes sampling" 2 "excludes" -- gen --bench-decode --temperature 0.5
check "generate: --batches needs --bench-decode" 2 "requires --bench-decode" -- gen --prompt-ids 1 --batches 1,2
check "generate: a missing cache" 1 "nowhere" -- "$KILN" generate "$TMP/nowhere" --prompt-ids 1
check "generate: a model not compiled for generation" 1 "model 'mlp_softmax' .* was not compiled for generation" -- "$KILN" generate "$TMP/conc" --prompt-ids 1
{
  check "generate: an id outside the vocabulary" 2 "prompt 0: token 1: 500 is outside the vocabulary \[0, 128\)" -- gen --prompt-ids 1,500
  check "generate: a stop token outside the vocabulary" 2 "--stop-tokens: token 128 is outside" -- gen --prompt-ids 1 --stop-tokens 3,128
  check "generate: past max_seq_len" 2 "prompt 0: 3 tokens \+ --max-new-tokens 127 need 129 cache slots; max_seq_len is 128" -- gen --prompt-ids 1,2,3 --max-new-tokens 127
  printf '1,2,3\n\n4 5 6\n7, 8\n9\n10\n' > "$TMP/prompts.txt"
  check "generate: more prompts than a batch" 2 "5 prompts exceed the largest batch of 'main_graph': 4 \(max_sequences 4" -- gen --prompts "$TMP/prompts.txt"
  if "$KILN" device >/dev/null 2>&1; then
    # onnxruntime's greedy tokens (greedy.json): its first prompt alone, then both as one batch.
    check "generate" 0 "prompt 0 \(5 tokens\) → 16 tokens: 25 25 25 .*time to first token .* ms, time per output token .* ms, .* tokens/s" -- bash -c "'$KILN' generate '$TMP/kv' --prompt-ids 104,13,25,32,25 | tr '\n' ' '"
    python3 -c '
import json, sys
for p in json.load(open(sys.argv[1]))["prompts"]: print(",".join(map(str, p["prompt"])))' "$KV/greedy.json" > "$TMP/ref_prompts.txt"
    check "generate --json: a ragged batch" 0 "^ok$" -- python3 -c '
import json, sys
j = json.load(sys.stdin)
ref = json.load(open(sys.argv[1]))["prompts"]
assert [p["prompt"] for p in j["prompts"]] == [r["prompt"] for r in ref], j
for p, r in zip(j["prompts"], ref):
    assert p["tokens"] == r["tokens"][:8], (p, r["tokens"][:8])
assert j["kv_cache"]["num_blocks"] == 64 and j["kv_cache"]["free_blocks"] == 64, j["kv_cache"]
assert j["mode"] and j["tokens_per_second"] > 0 and j["decode_steps"] == 7, j
print("ok")' "$KV/greedy.json" < <(gen --prompts "$TMP/ref_prompts.txt" --max-new-tokens 8 --json)
    check "generate --bench-decode --json" 0 "^ok$" -- python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["model"] == "main_graph" and j["context"] == 32, j
r = j["results"]
assert [(x["mode"], x["batch"]) for x in r] == [(m, b) for m in ("FULL", "NONE") for b in (1, 4, 8)], r
for x in r:
    if x["batch"] == 8:
        assert set(x) == {"mode", "batch", "skipped"} and "max_sequences 4" in x["skipped"], x
    else:
        assert set(x) == {"mode", "batch", "ms", "tokens_per_s"} and x["ms"] > 0, x
        assert abs(x["tokens_per_s"] - x["batch"] * 1000 / x["ms"]) < 1e-6 * x["tokens_per_s"], x
print("ok")' < <(gen --bench-decode --mode FULL,NONE --batches 1,4,8 --context 32 --iters 5 --json)
  else
    check "generate without a GPU" 3 "generating needs a CUDA GPU" -- gen --prompt-ids 104,13,25
    check "generate --bench-decode without a GPU" 3 "generating needs a CUDA GPU" -- gen --bench-decode --batches 1,8 --context 32
  fi
}

# kiln run: inputs by name from .npy/.npz/.pb (read and checked before the GPU is), --expect,
# --output-dir, --json. ($TMP/conc holds the one mlp_softmax entry.)
# The fixtures are written by NumPy and onnx's numpy_helper: without them these checks cannot run.
if python3 -c 'import numpy, onnx' 2>/dev/null; then
run_numpy_checks() {
NP=$TMP/np
mkdir -p "$NP"
python3 -c "
import numpy as np
r = np.random.default_rng(0)
x = r.standard_normal((3, 64)).astype(np.float32)
np.save('$NP/x.npy', x)
np.save('$NP/x64.npy', x.astype(np.float64))
np.savez('$NP/x.npz', x=x)
np.savez_compressed('$NP/xc.npz', x=x)
np.save('$NP/ids.npy', np.ones((2, 5), np.int64))
np.savez('$NP/gpt2.npz', input_ids=np.ones((2, 5), np.int64), attention_mask=np.ones((2, 5), np.int64))
with open('$NP/x_v2.npy', 'wb') as f:
    np.lib.format.write_array(f, x, version=(2, 0))
np.save('$NP/x_fortran.npy', np.asfortranarray(x))
np.save('$NP/x_wide.npy', np.zeros((3, 65), np.float32))
np.save('$NP/x_tall.npy', np.zeros((65, 64), np.float32))
"
# A backend-test data set whose stored outputs do not fit the model: an unknown name, a shape.
python3 -c "
import onnx, numpy as np
from onnx import numpy_helper as nh
def save(t, path):
    open(path, 'wb').write(t.SerializeToString())
for name, shape in (('nope', (3, 32)), ('probs', (3, 31))):
    d = '$NP/set_' + name + '_' + str(shape[1])
    __import__('os').makedirs(d)
    save(nh.from_array(np.zeros((3, 64), np.float32), 'x'), d + '/input_0.pb')
    save(nh.from_array(np.zeros(shape, np.float32), name), d + '/output_0.pb')
"
"$KILN" -q compile "$GPT2/model.onnx" -c "$GPT2/kiln.yaml" -o "$TMP/gpt2" >/dev/null
check "run: a wrong dtype" 1 "-i: input 'x' is f64, the model expects f32" -- "$KILN" run "$TMP/conc" -i "x=$NP/x64.npy"
check "run: an unknown input" 1 "the model has no input 'y'; its inputs are 'x'" -- "$KILN" run "$TMP/conc" -i "y=$NP/x.npy"
check "run: a missing input" 1 "input 'attention_mask' is missing \(the model's inputs are 'input_ids', 'attention_mask'\)" -- "$KILN" run "$TMP/gpt2" -i "input_ids=$NP/ids.npy"
check "run: a .npy needs a name" 1 "pass -i NAME=" -- "$KILN" run "$TMP/conc" -i "$NP/x.npy"
check "run: a Fortran-order .npy" 1 "x_fortran.npy: Fortran-order arrays are not supported" -- "$KILN" run "$TMP/conc" -i "x=$NP/x_fortran.npy"
check "run: a wrong dim" 1 "-i: input 'x' dim 1 is 65, the model expects 64" -- "$KILN" run "$TMP/conc" -i "x=$NP/x_wide.npy"
check "run: a size above max_size" 1 "input 'x' implies size 65, above the model's max_size 64" -- "$KILN" run "$TMP/conc" -i "x=$NP/x_tall.npy"
check "run: a bad -i file" 1 "-i x=.*x.txt: expected a .npy, .npz or .pb file" -- "$KILN" run "$TMP/conc" -i "x=$NP/x.txt"
check "run: a truncated .npy" 1 "x_cut.npy: .*data bytes, its shape \(3, 64\) of f32 needs 768" -- bash -c "head -c 500 '$NP/x.npy' > '$NP/x_cut.npy' && '$KILN' run '$TMP/conc' -i 'x=$NP/x_cut.npy'"
check "run --json on an input error" 1 "^json ok$" -- bash -c "'$KILN' run '$TMP/conc' -i 'x=$NP/x64.npy' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"json ok\" if j[\"ok\"] is False and \"expects f32\" in j[\"error\"] else j)'; exit \${PIPESTATUS[0]}"
check "run --expect: a stored output the model lacks" 1 "stored output 'nope' is not a model output \('probs', 'logits'\)" -- "$KILN" run "$TMP/conc" --expect "$NP/set_nope_32"
check "run --expect: a stored output of another shape" 1 "stored output 'probs' has shape \[3, 31\], the model's output at size 3 is \[3, 32\]" -- "$KILN" run "$TMP/conc" --expect "$NP/set_probs_31"
check "run: --sizes excludes -i" 2 "excludes" -- "$KILN" run "$TMP/conc" -i "x=$NP/x.npy" --sizes 1,8
check "run: --expect excludes -i" 2 "excludes" -- "$KILN" run "$TMP/conc" -i "$NP/x.npz" --expect "$MODEL/test_data_set_0"
check "run: --expect of a missing set" 1 "no input_0.pb" -- "$KILN" run "$TMP/conc" --expect "$TMP/nowhere"
check "run: --output-format" 2 "pbtxt" -- "$KILN" run "$TMP/conc" --output-format pbtxt
check "run --help" 0 "-i input_ids=ids.npy.*--expect.*--output-dir.*--json.*Example:.*--expect model_dir/test_data_set_0" -- bash -c "'$KILN' run --help | tr '\n' ' '"
if "$KILN" device >/dev/null 2>&1; then
  check "run: .npz inputs by name" 0 "probs .*\[3, 32\]" -- "$KILN" run "$TMP/conc" -i "$NP/x.npz" --iters 5
  check "run: np.savez_compressed inputs" 0 "probs .*\[3, 32\]" -- "$KILN" run "$TMP/conc" -i "$NP/xc.npz" --iters 5
  check "run --output-format pb, several sizes" 0 "^pb ok$" -- bash -c "'$KILN' run '$TMP/conc' --sizes 1,8 --output-dir '$TMP/outpb' --output-format pb --iters 5 >/dev/null && python3 -c 'import onnx; from onnx import numpy_helper as nh; t=onnx.load_tensor(\"$TMP/outpb/size_8/probs.pb\"); print(\"pb ok\" if t.name == \"probs\" and nh.to_array(t).shape == (8, 32) else t)'"
  check "run --expect (stored outputs)" 0 "expected  : .*MATCH.*summary: .*expected outputs: MATCH" -- bash -c "'$KILN' run '$TMP/conc' --expect '$MODEL/test_data_set_0' --iters 5 | tr '\n' ' '"
  check "run --expect a GPT-2 export's onnxruntime outputs" 0 "expected outputs: MATCH" -- "$KILN" run "$TMP/gpt2" --expect "$GPT2/test_data_set_1" --iters 5
  check "run --output-dir" 0 "^written ok$" -- bash -c "'$KILN' run '$TMP/conc' -i 'x=$NP/x.npy' --output-dir '$TMP/out' --iters 5 >/dev/null && python3 -c 'import numpy as np; p=np.load(\"$TMP/out/probs.npy\"); print(\"written ok\" if p.shape == (3, 32) and abs(p.sum() - 3) < 1e-3 else p)'"
  check "run --json" 0 "^json ok$" -- bash -c "'$KILN' run '$TMP/conc' --expect '$MODEL/test_data_set_0' --iters 5 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); o=j[\"sets\"][0][\"outputs\"]; print(\"json ok\" if j[\"ok\"] and o and all(x[\"expected\"][\"ok\"] for x in o) else j)'"
else
  check "run: good .npy inputs pass the checks" 3 "its inputs check out; running it needs a CUDA GPU" -- "$KILN" run "$TMP/conc" -i "x=$NP/x.npy"
  check "run: a NumPy .npz passes the checks" 3 "its inputs check out" -- "$KILN" run "$TMP/gpt2" -i "$NP/gpt2.npz"
  check "run: np.savez_compressed passes the checks" 3 "its inputs check out" -- "$KILN" run "$TMP/conc" -i "$NP/xc.npz"
  check "run: a format 2.0 .npy passes the checks" 3 "its inputs check out" -- "$KILN" run "$TMP/conc" -i "x=$NP/x_v2.npy"
  check "run: a .pb input by name passes the checks" 3 "its inputs check out" -- "$KILN" run "$TMP/conc" -i "$MODEL/test_data_set_0/input_0.pb"
  check "run --json without a GPU lists the checked inputs" 3 "^inputs ok$" -- bash -c "'$KILN' run '$TMP/gpt2' -i '$NP/gpt2.npz' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"inputs ok\" if j[\"size\"] == 5 and [i[\"name\"] for i in j[\"inputs\"]] == [\"input_ids\", \"attention_mask\"] and j[\"inputs\"][0][\"shape\"] == [2, 5] else j)'; exit \${PIPESTATUS[0]}"
  check "run: an --expect set passes the checks" 3 "its inputs check out" -- "$KILN" run "$TMP/gpt2" --expect "$GPT2/test_data_set_0"
  check "run --json without a GPU" 3 "^json ok$" -- bash -c "'$KILN' run '$TMP/conc' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"json ok\" if j[\"ok\"] is False and \"CUDA GPU\" in j[\"error\"] else j)'; exit \${PIPESTATUS[0]}"
fi

}
run_numpy_checks
else
  echo "NOTE: python3 has no numpy/onnx here: the kiln run .npy/.npz/--expect checks did not run"
fi

# Compilation levels: -O overrides compilation.level, is part of the key, shown by inspect.
check "compile -O0 --json" 0 "^O0 ok$" -- bash -c "'$KILN' compile '$MODEL/model.onnx' -c '$MODEL/kiln.yaml' -o '$TMP/levels' -O0 --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"O0 ok\" if j[\"level\"] == 0 and j[\"compile_sizes\"] == [] and not j[\"cache_hit\"] else j)'"
check "compile -O3 is another key" 0 "compiled .*\(level 3\)" -- "$KILN" compile "$MODEL/model.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/levels"
check "inspect shows each level" 0 "^levels ok$" -- bash -c "'$KILN' inspect '$TMP/levels' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"levels ok\" if sorted(e[\"config\"][\"level\"] for e in j[\"entries\"]) == [0, 3] else j)'"
check "compile -O4" 2 "4 not in range" -- "$KILN" compile "$MODEL/model.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/levels" -O4
check "--version names the git revision" 0 "built from git revision [0-9a-f]{7,}|built from git revision unknown" -- "$KILN" --version

# Signing: keygen, compile --sign (signed inside the atomic publish), verify --trust; a changed
# byte, an unsigned entry or another signer is refused (exit 1).
check "keygen" 0 "wrote .*release.key .*release.pub" -- "$KILN" keygen -o "$TMP/release"
check "keygen: the secret key is 0600" 0 "^600$" -- stat -c %a "$TMP/release.key"
check "keygen never overwrites a key" 1 "release.pub: exists" -- "$KILN" keygen -o "$TMP/release"
"$KILN" keygen -o "$TMP/other" >/dev/null
check "compile --sign" 0 "signed   : by key [0-9a-f]{64}" -- compile "$TMP/signed" --sign "$TMP/release.key"
sart=$(ls -d "$TMP"/signed/kiln-v2/*/)
check "the entry holds signature.kiln" 0 "^KILNSIG1$" -- head -c 8 "$sart/signature.kiln"
check "verify --trust" 0 "OK .*signed by trusted key [0-9a-f]{64}" -- "$KILN" verify "$TMP/signed" --trust "$TMP/release.pub"
check "verify --trust --json" 0 "^signed ok$" -- bash -c "'$KILN' verify '$TMP/signed' --trust '$TMP/release.pub' --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(\"signed ok\" if j[\"trusted_keys\"] == 1 and len(j[\"entries\"][0][\"signed_by\"]) == 64 else j)'"
check "verify --trust, one of two keys" 0 "1 of 1 entry intact and signed by a trusted key" -- "$KILN" verify "$TMP/signed" --trust "$TMP/other.pub" --trust "$TMP/release.pub"
check "verify --trust another key" 1 "FAILED .*signed by key [0-9a-f]{64}, which is not trusted" -- "$KILN" verify "$TMP/signed" --trust "$TMP/other.pub"
check "verify without --trust ignores the signature" 0 "1 of 1 entry intact( and loadable here)? \(" -- "$KILN" verify "$TMP/signed"
check "compile --sign again is a hit" 0 "cache hit: .*verified and signed by this key" -- compile "$TMP/signed" --sign "$TMP/release.key"
check "unsigned entries under --trust" 1 "FAILED .*the artifact is unsigned" -- "$KILN" verify "$TMP/cache" --trust "$TMP/release.pub"
check "compile --sign with a .pub" 1 "release.pub: is a public key file" -- compile "$TMP/signed" --sign "$TMP/release.pub"
check "verify --trust with a .key" 1 "release.key: is a secret key file" -- "$KILN" verify "$TMP/signed" --trust "$TMP/release.key"
check "verify --trust with a missing file" 1 "nope.pub" -- "$KILN" verify "$TMP/signed" --trust "$TMP/nope.pub"
check "compile --sign replaces an unsigned entry" 0 "signed   : by key" -- "$KILN" compile "$MODEL/model.onnx" -c "$TMP/untuned.yaml" -o "$TMP/u2" --sign "$TMP/release.key"
check "the replaced entry is signed" 0 "1 of 1 entry intact and signed" -- "$KILN" verify "$TMP/u2" --trust "$TMP/release.pub"
"$KILN" compile "$MODEL/model.onnx" -c "$TMP/untuned.yaml" -o "$TMP/u3" --sign "$TMP/release.key" >/dev/null 2>&1
check "signed recompiles are byte-identical (signature included)" 0 "^$" -- diff -r "$TMP/u2/kiln-v2" "$TMP/u3/kiln-v2" -x index.json
cp -r "$TMP/u3" "$TMP/u3moved" && rm -rf "$TMP/u3"
check "a relocated signed cache verifies" 0 "1 of 1 entry intact and signed" -- "$KILN" verify "$TMP/u3moved" --trust "$TMP/release.pub"
check "kiln sign signs an entry in place" 0 "signed .* with key [0-9a-f]{64}" -- "$KILN" sign "$TMP/u1" --key "$TMP/other.key"
check "kiln sign: verify --trust" 0 "1 of 1 entry intact and signed" -- "$KILN" verify "$TMP/u1" --trust "$TMP/other.pub"
for what in weights.bin kernels/module0.sm_90.cubin manifest.kiln signature.kiln; do
  rm -rf "$TMP/tampered" && cp -r "$TMP/signed" "$TMP/tampered"
  tart=$(ls -d "$TMP"/tampered/kiln-v2/*/)
  python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[60] ^= 0x5a; open(p, "wb").write(b)' "$tart/$what"
  check "verify --trust refuses a changed $what" 1 "FAILED .*(${what//./\\.}|signature does not verify)" -- "$KILN" verify "$TMP/tampered" --trust "$TMP/release.pub"
done
head -c 50 "$sart/signature.kiln" > "$TMP/sig.short" && cp "$TMP/sig.short" "$sart/signature.kiln"
check "verify --trust: a truncated signature file" 1 "signature.kiln is 50 bytes" -- "$KILN" verify "$TMP/signed" --trust "$TMP/release.pub"

# Every command explains itself: `kiln help COMMAND` = its --help, with an example and the exit
# codes; every reporting command takes --json.
for cmd in compile run bench generate conformance verify inspect "cache ls" "cache gc" device keygen sign help; do
  # shellcheck disable=SC2086  # "cache ls" is two words
  check "help $cmd" 0 "Example:.*kiln .*Exit codes: 0 success" -- bash -c "'$KILN' help $cmd | tr '\n' ' '"
done
for cmd in compile run bench generate conformance verify inspect "cache ls" "cache gc" device; do
  # shellcheck disable=SC2086
  check "$cmd takes --json" 0 "--json" -- bash -c "'$KILN' $cmd --help"
done
check "help of an unknown command" 2 "no command 'nope'" -- "$KILN" help nope

check "usage error" 2 "subcommand|frobnicate" -- "$KILN" frobnicate
# The log level flags: global, before or after the subcommand; results on stdout either way.
check "-q before the subcommand" 0 "cache hit" -- "$KILN" -q compile "$MODEL/model.onnx" -c "$MODEL/kiln.yaml" -o "$TMP/cache"
check "--verbose after the subcommand" 0 "cache hit" -- compile "$TMP/cache" --verbose
check "-v and -q exclude each other" 2 "excludes" -- "$KILN" -v -q device

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
