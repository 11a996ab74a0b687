// Fuzz target: `kiln run`'s input readers. The first byte picks the reader — .npy, .npz or an
// ONNX TensorProto (.pb) — and the rest is the file's bytes.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz/fuzz_scratch_dir.h"
#include "tools/npy_io.h"
#include "tools/tensor_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)kiln::tools::npy_parse(bytes, "x", "fuzz.npy");
      break;
    case 1:
      (void)kiln::tools::npz_parse(bytes, "fuzz.npz");
      break;
    default:
      (void)kiln::tools::tensor_parse_pb(bytes, "fuzz.pb", kiln::fuzz::scratch_dir("inputs"));
      break;
  }
  return 0;
}
