#!/bin/sh
# Fails when a binary depends on a library the runtime must never pull in: ONNX, full protobuf
# (protobuf-lite is fine), yaml-cpp, NVRTC, or the driver library libcuda (binaries must start on
# machines without a GPU driver). Allowed besides libc/libstdc++: cudart, cuBLASLt, protobuf-lite,
# libxxhash and libsodium (through libkiln_cache). Usage: check_runtime_deps.sh BINARY...
status=0
for bin in "$@"; do
  if [ ! -e "$bin" ]; then
    echo "missing: $bin"
    status=1
    continue
  fi
  deps=$(ldd "$bin") || { echo "ldd failed on $bin"; status=1; continue; }
  bad=$(printf '%s\n' "$deps" | grep -E 'libonnx|libprotobuf\.so|libyaml-cpp|libnvrtc|libcuda\.so' || true)
  if [ -n "$bad" ]; then
    echo "$bin links forbidden libraries:"
    printf '%s\n' "$bad"
    status=1
  else
    echo "$bin: ok"
  fi
done
exit $status
