#!/usr/bin/env bash
# Runs one fuzz target (fuzz/README.md) under libFuzzer with ASan + UBSan.
#   tools/fuzz.sh TARGET SECONDS [SEED]   TARGET: onnx_import, config, manifest, inputs, or all
# SEED (default 0: a new random seed each run) fixes libFuzzer's mutations: CI passes one, so
# its short runs repeat the same inputs (a slower machine runs a prefix of them).
# Builds the sanitizer tree (tools/setup.sh --sanitize, build-san/) as far as the target needs,
# assembles its seed corpus under build-san/fuzz-work/TARGET/corpus, fuzzes for SECONDS and prints
# one line: executions, corpus size, findings. A finding (crash, leak, sanitizer report, 10 s
# timeout, 2 GiB of memory) is saved in build-san/fuzz-work/TARGET/findings/ and the script
# exits 1. Exit 2: bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=(onnx_import config manifest inputs)
usage() { echo "usage: tools/fuzz.sh TARGET SECONDS [SEED] (TARGET: ${TARGETS[*]} or all)" >&2; exit 2; }
[ $# -eq 2 ] || [ $# -eq 3 ] || usage
[[ "$2" =~ ^[0-9]+$ ]] || usage
SEED=${3:-0}
[[ "$SEED" =~ ^[0-9]+$ ]] || usage
if [ "$1" = all ]; then
  rc=0
  for t in "${TARGETS[@]}"; do "$0" "$t" "$2" "$SEED" || rc=1; done
  exit $rc
fi
[[ " ${TARGETS[*]} " == *" $1 "* ]] || usage
TARGET=$1
SECONDS_TO_RUN=$2
BUILD=build-san
tools/setup.sh --sanitize "$BUILD" "fuzz/fuzz_$TARGET" > /dev/null

WORK=$BUILD/fuzz-work/$TARGET
CORPUS=$WORK/corpus
mkdir -p "$CORPUS" "$WORK/findings"
# Seeds, added to what earlier runs found (the corpus folder persists between runs).
seed() { cp -n "$@" "$CORPUS/" 2>/dev/null || true; }
case "$TARGET" in
  onnx_import)
    while IFS= read -r f; do
      cp -n "$f" "$CORPUS/$(echo "$f" | tr '/' '_')"
    done < <(find tests/models -name '*.onnx' -size -256k)
    if [ -d /usr/share/libonnx-testdata ]; then
      while IFS= read -r f; do
        cp -n "$f" "$CORPUS/$(echo "$f" | tr '/' '_')"
      done < <(find /usr/share/libonnx-testdata -name model.onnx -path '*node*' | sort | awk 'NR % 8 == 1')
    fi ;;
  config)
    while IFS= read -r f; do
      cp -n "$f" "$CORPUS/$(echo "$f" | tr '/' '_')"
    done < <(find tests/models -name 'kiln.yaml')
    seed fuzz/corpus/config/* ;;
  manifest) seed fuzz/corpus/manifest/* ;;
  inputs) seed fuzz/corpus/inputs/* ;;
esac
[ -d "fuzz/regressions/$TARGET" ] && seed "fuzz/regressions/$TARGET"/*

LOG=$WORK/fuzz.log
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} LSAN_OPTIONS=suppressions=$PWD/tools/lsan_suppressions.txt \
  "$BUILD/fuzz/fuzz_$TARGET" "$CORPUS" -max_total_time="$SECONDS_TO_RUN" -timeout=10 \
  -rss_limit_mb=2048 -max_len=262144 -seed="$SEED" -print_final_stats=1 -artifact_prefix="$WORK/findings/" \
  > "$LOG" 2>&1
rc=$?
set -e
execs=$(grep -m1 '^stat::number_of_executed_units' "$LOG" | awk '{print $2}')
findings=$(find "$WORK/findings" -type f | wc -l)
printf 'fuzz %-12s %5ss  executions %-9s corpus %-6s findings %s  (log %s)\n' "$TARGET" \
  "$SECONDS_TO_RUN" "${execs:-?}" "$(find "$CORPUS" -type f | wc -l)" "$findings" "$LOG"
if [ $rc -ne 0 ] || [ "$findings" -gt 0 ]; then
  grep -E 'ERROR: |SUMMARY: |runtime error|==[0-9]+==' "$LOG" | head -20 >&2
  echo "fuzz $TARGET: FINDING (exit $rc): inputs in $WORK/findings/; fix, then add each to fuzz/regressions/$TARGET/" >&2
  exit 1
fi
