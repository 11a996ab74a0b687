#include "kiln/tensor.h"

#include <utility>

namespace kiln {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::zeros(std::string name, DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  int64_t n = t.numel();
  t.data.assign(n > 0 ? static_cast<size_t>(n) * dtype_size(dtype) : 0, 0);
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorView TensorView::of(const Tensor& t) {
  return TensorView{t.name, t.dtype, t.shape, t.data.data(), Memory::kHost};
}

std::vector<int64_t> TensorInfo::shape_at(int64_t s) const {
  std::vector<int64_t> shape;
  shape.reserve(dims.size());
  for (const DimSpec& d : dims) shape.push_back(d.eval(s));
  return shape;
}

}  // namespace kiln
