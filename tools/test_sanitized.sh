#!/usr/bin/env bash
# The sanitizer pass of tools/test.sh (also runnable alone): the CPU suite under ASan + UBSan,
# then every fuzz target for a short run. Builds build-san/ (tools/setup.sh --sanitize: clang-14,
# unoptimised, every finding fatal) — only the targets those tests need.
#   tools/test_sanitized.sh [FUZZ_SECONDS]      (default 20 per target)
# Not run under the sanitizers, because they run in the regular build and cost minutes there
# already (NVRTC-bound code generation over whole op families or models, or they launch the
# kiln binary or load the library into Python or into apps built without the sanitizers):
REGULAR_ONLY=(
  e2e_exported_corpus e2e_compilation_levels
  compiler_backend_lower_lower_attention compiler_backend_lower_lower_attention_real_size
  compiler_backend_lower_lower_reduce compiler_backend_lower_lower_elementwise
  compiler_backend_lower_lower_layout compiler_backend_lower_lower_scan
  compiler_backend_lower_size_independence compiler_backend_lower_paged_attention_codegen
  compiler_backend_lower_sampling_codegen compiler_passes_kv_paged
  tools_cli tools_examples python_kiln
  cache_artifact_corruption  # truncates a real artifact at every offset: past 5 minutes here
)
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${1:-20}
BUILD=build-san
tools/setup.sh --sanitize "$BUILD" fuzz/fuzz_config > /dev/null

# The CPU tests not in REGULAR_ONLY, and the build targets they need.
SELECTED=$BUILD/sanitized-tests.txt
meson introspect "$BUILD" --tests --targets | python3 -c '
import json, sys, os
data = json.load(sys.stdin)
skip = set(sys.argv[1].split())
build = os.path.realpath(sys.argv[2])
files = {t["id"]: t["filename"] for t in data["targets"]}
names, targets = [], set()
for t in data["tests"]:
    if not any(s.endswith(":cpu") for s in t["suite"]) or t["name"] in skip:
        continue
    names.append(t["name"])
    for dep in t["depends"]:
        for f in files.get(dep, []):
            targets.add(os.path.relpath(f, build))
with open(sys.argv[3], "w") as out:
    out.write("\n".join(names) + "\n")
print("\n".join(sorted(targets)))
' "${REGULAR_ONLY[*]}" "$BUILD" "$SELECTED" > "$BUILD/sanitized-targets.txt"
mapfile -t targets < "$BUILD/sanitized-targets.txt"
mapfile -t tests < "$SELECTED"
echo "test_sanitized: building ${#targets[@]} targets for ${#tests[@]} CPU tests under ASan + UBSan"
ninja -C "$BUILD" "${targets[@]}" > "$BUILD/sanitized-build.log" 2>&1 || {
  tail -40 "$BUILD/sanitized-build.log"
  exit 1
}
# Leaks are findings too (but not those of NVIDIA's closed libraries: lsan_suppressions.txt).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$PWD/tools/lsan_suppressions.txt
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
meson test -C "$BUILD" --no-rebuild --print-errorlogs --num-processes "$(nproc)" "${tests[@]}"

# A fixed seed: the same mutations every CI run (a fresh seed per run makes CI a lottery; longer,
# random-seed runs are tools/fuzz.sh's job).
for t in onnx_import config manifest inputs; do tools/fuzz.sh "$t" "$FUZZ_SECONDS" 20261127; done
