// Host tensors and tensor descriptions at the runtime's public boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/dtype.h"

namespace kiln {

// A host tensor that owns its bytes (row-major, contiguous).
struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numel() const;
  static Tensor zeros(std::string name, DType dtype, std::vector<int64_t> shape);
  template <typename T>
  T* as() { return reinterpret_cast<T*>(data.data()); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data.data()); }
};

// One dim of a model input/output: coef * S + offset, S being the run-time size.
struct DimSpec {
  int64_t coef = 0;
  int64_t offset = 0;
  int64_t eval(int64_t s) const { return coef * s + offset; }
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<DimSpec> dims;
  int size_axis = -1;  // the axis that grows with S, or -1
  std::vector<int64_t> shape_at(int64_t s) const;
};

}  // namespace kiln
