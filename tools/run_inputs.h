// `kiln run`'s inputs, read and checked before any GPU is touched: `-i` files (NAME=FILE.npy,
// NAME=FILE.pb, FILE.npz, FILE.pb) or an `--expect` data set (ONNX backend-test layout:
// input_i.pb and output_j.pb, onnxruntime's outputs for instance), against the inputs the
// artifact's manifest declares (names, all present, dtypes, every dim, one size S in
// [1, max_size]).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cache/status.h"
#include "kiln/tensor.h"
#include "schemas/manifest.pb.h"

namespace kiln::tools {

struct RunInputs {
  std::vector<Tensor> tensors;   // one per model input
  std::vector<Tensor> expected;  // --expect: the stored outputs, named as the model's outputs
  int64_t size = -1;             // the run-time size S the tensors imply (1 if none depends on S)
};

Result<RunInputs> run_inputs_read(const std::vector<std::string>& specs,
                                  const std::filesystem::path& expect_dir,
                                  const schema::Manifest& m);

}  // namespace kiln::tools
