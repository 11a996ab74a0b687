// Fuzz target: ONNX import (parse, structural checks, IR build, shape inference) and the
// front-end passes on whatever imports. Every dim_param binds to a small constant, so inputs
// get as deep as a user's model would; external data resolves beneath an empty directory.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "fuzz/fuzz_scratch_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kiln::compiler::ImportOptions opts;
  opts.max_size = 16;
  opts.unbound_dim = 2;
  auto graph = kiln::compiler::onnx_import_bytes(bytes, "fuzz.onnx",
                                                 kiln::fuzz::scratch_dir("onnx-import"), opts);
  if (!graph.ok()) return 0;
  (void)kiln::compiler::front_end_passes(*graph, opts.max_size);
  return 0;
}
