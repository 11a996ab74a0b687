#include "compiler/reference_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::compiler {

namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ", "));
}

int64_t product(const std::vector<int64_t>& d, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, d.size()); ++i) n *= d[i];
  return n;
}

// Row-major strides of `in` seen at the rank of `out`: 0 on broadcast (size-1 or missing) axes.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in,
                                       const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    s[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
}

// Offset into a tensor with `strides` of the element at linear index `linear` of `dims`.
int64_t offset_of(int64_t linear, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t i = dims.size(); i-- > 0;) {
    off += (linear % dims[i]) * strides[i];
    linear /= dims[i];
  }
  return off;
}

RefTensor make(DType dtype, std::vector<int64_t> dims) {
  RefTensor t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  t.data.assign(static_cast<size_t>(product(t.dims)), 0.0);
  return t;
}

}  // namespace

Result<std::vector<int64_t>> ref_broadcast_dims(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return invalid_argument(
          fmt::format("dims {} and {} do not broadcast", dims_str(a), dims_str(b)));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Result<RefTensor> ref_matmul(const RefTensor& a, const RefTensor& b) {
  if (a.dims.empty() || b.dims.empty())
    return invalid_argument(
        fmt::format("MatMul of {} and {}: rank 0", dims_str(a.dims), dims_str(b.dims)));
  std::vector<int64_t> ad = a.dims, bd = b.dims;
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), k2 = bd[bd.size() - 2], n = bd.back();
  if (k != k2)
    return invalid_argument(
        fmt::format("MatMul of {} and {}: inner dims differ", dims_str(a.dims), dims_str(b.dims)));
  const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> batch, ref_broadcast_dims(a_batch, b_batch));
  const auto as = broadcast_strides(a_batch, batch), bs = broadcast_strides(b_batch, batch);
  std::vector<int64_t> out_dims = batch;
  if (!a_vec) out_dims.push_back(m);
  if (!b_vec) out_dims.push_back(n);
  RefTensor out = make(a.dtype, out_dims);
  const int64_t nb = product(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const double* pa = a.data.data() + offset_of(bi, batch, as) * m * k;
    const double* pb = b.data.data() + offset_of(bi, batch, bs) * k * n;
    double* po = out.data.data() + bi * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) acc += pa[i * k + p] * pb[p * n + j];
        po[i * n + j] = acc;
      }
  }
  return out;
}

Result<RefTensor> ref_gemm(const RefTensor& a, const RefTensor& b, const RefTensor* c, bool trans_a,
                           bool trans_b, double alpha, double beta) {
  if (a.dims.size() != 2 || b.dims.size() != 2)
    return invalid_argument(
        fmt::format("Gemm of {} and {}: A and B must be 2-D", dims_str(a.dims), dims_str(b.dims)));
  const int64_t m = trans_a ? a.dims[1] : a.dims[0], k = trans_a ? a.dims[0] : a.dims[1];
  const int64_t k2 = trans_b ? b.dims[1] : b.dims[0], n = trans_b ? b.dims[0] : b.dims[1];
  if (k != k2)
    return invalid_argument(
        fmt::format("Gemm of {} and {}: inner dims differ", dims_str(a.dims), dims_str(b.dims)));
  RefTensor out = make(a.dtype, {m, n});
  std::vector<int64_t> cs;
  if (c) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> cd, ref_broadcast_dims(c->dims, out.dims));
    if (cd != out.dims || c->dims.size() > 2)
      return invalid_argument(
          fmt::format("Gemm: C {} does not broadcast to [{}, {}]", dims_str(c->dims), m, n));
    cs = broadcast_strides(c->dims, out.dims);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a.data[p * m + i] : a.data[i * k + p];
        const double bv = trans_b ? b.data[j * k + p] : b.data[p * n + j];
        acc += av * bv;
      }
      double y = alpha * acc;
      if (c) y += beta * c->data[i * cs[0] + j * cs[1]];
      out.data[i * n + j] = y;
    }
  return out;
}

Result<RefTensor> ref_binary(std::string_view op, const RefTensor& a, const RefTensor& b) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ref_broadcast_dims(a.dims, b.dims));
  const auto as = broadcast_strides(a.dims, dims), bs = broadcast_strides(b.dims, dims);
  RefTensor out = make(a.dtype, dims);
  auto apply = [&](auto f) {
    for (int64_t i = 0; i < static_cast<int64_t>(out.data.size()); ++i)
      out.data[i] = f(a.data[offset_of(i, dims, as)], b.data[offset_of(i, dims, bs)]);
  };
  if (op == "Add") {
    apply([](double x, double y) { return x + y; });
  } else if (op == "Sub") {
    apply([](double x, double y) { return x - y; });
  } else if (op == "Mul") {
    apply([](double x, double y) { return x * y; });
  } else if (op == "Div") {
    apply([](double x, double y) { return x / y; });
  } else {
    return unimplemented(fmt::format("reference: binary op {} is not implemented", op));
  }
  return out;
}

Result<RefTensor> ref_unary(std::string_view op, const RefTensor& x) {
  RefTensor out = x;
  double (*f)(double) = nullptr;
  if (op == "Relu") {
    f = [](double v) { return v < 0.0 ? 0.0 : v; };  // NaN passes through
  } else if (op == "Sigmoid") {
    f = [](double v) {
      if (v >= 0.0) return 1.0 / (1.0 + std::exp(-v));
      const double e = std::exp(v);
      return e / (1.0 + e);
    };
  } else if (op == "Tanh") {
    f = [](double v) { return std::tanh(v); };
  } else {
    return unimplemented(fmt::format("reference: unary op {} is not implemented", op));
  }
  for (double& v : out.data) v = f(v);
  return out;
}

Result<RefTensor> ref_softmax(const RefTensor& x, int64_t axis) {
  const auto rank = static_cast<int64_t>(x.dims.size());
  if (axis < -rank || axis >= rank)
    return invalid_argument(
        fmt::format("Softmax: axis {} out of range for {}", axis, dims_str(x.dims)));
  const auto ax = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  const int64_t outer = product(x.dims, 0, ax), len = x.dims[ax], inner = product(x.dims, ax + 1);
  RefTensor out = x;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * len * inner + in;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < len; ++i) mx = std::max(mx, x.data[base + i * inner]);
      double sum = 0.0;
      for (int64_t i = 0; i < len; ++i) {
        const double e = std::exp(x.data[base + i * inner] - mx);
        out.data[base + i * inner] = e;
        sum += e;
      }
      for (int64_t i = 0; i < len; ++i) out.data[base + i * inner] /= sum;
    }
  return out;
}

}  // namespace kiln::compiler
