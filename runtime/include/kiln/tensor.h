// Tensors at the runtime's public boundary: owning host tensors, borrowed views of caller
// memory (host or device: zero host copies), and descriptions of a model's inputs/outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "kiln/export.h"

namespace kiln {

// A host tensor that owns its bytes (row-major, contiguous).
struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  KILN_API int64_t numel() const;
  KILN_API static Tensor zeros(std::string name, DType dtype, std::vector<int64_t> shape);
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data.data());
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
};

// Where the bytes of a view live. kDevice: device memory on the model's GPU (cudaMalloc or
// managed); kHost: any host memory (pageable or pinned).
enum class Memory { kHost, kDevice };

// A borrowed, read-only view of a caller's input tensor (row-major, contiguous). The executor
// copies it into its static buffers during run() and keeps no reference afterwards. For device
// memory the contents must be complete when run() is called: the copies run on the executor's
// own stream and do not wait for any other stream.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // borrowed; numel * dtype_size bytes
  Memory memory = Memory::kDevice;

  KILN_API int64_t numel() const;
  KILN_API static TensorView of(const Tensor& t);  // a host view of a host tensor
};

// A caller-owned buffer that run() writes one model output into (exactly the requested size's
// rows, row-major). run() checks `capacity` before anything runs and sets `shape`.
struct OutputView {
  std::string name;
  void* data = nullptr;  // borrowed
  size_t capacity = 0;   // bytes at data
  Memory memory = Memory::kDevice;
  std::vector<int64_t> shape;  // out: the output's shape at the run's size
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
  KILN_API std::vector<int64_t> shape_at(int64_t s) const;
};

}  // namespace kiln
