// The launch program half of manifest validation: pieces, kernel steps and GEMM steps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cache/dtype.h"
#include "cache/kernel_signature.h"
#include "runtime/dim_math.h"
#include "runtime/manifest_validate.h"
#include "runtime/size_gate.h"

namespace kiln::runtime {
namespace {

using schema::Manifest;

std::string kernel_label(const Manifest& m, uint32_t index) {
  return "kernel " + std::to_string(index) + " ('" + m.kernels(static_cast<int>(index)).symbol() +
         "')";
}

// A launch's grid, block and shared memory: launchable at every size up to max_size.
Status geometry_validate(const Manifest& m, const schema::Grid& grid, uint32_t block,
                         uint32_t shared_bytes, const std::string& where) {
  const int64_t max = m.config().max_size();
  if (grid.work_per_block() == 0) return manifest_invalid(where + ": grid.work_per_block is 0");
  if (grid.work().coef() < 0)
    return manifest_invalid(where + ": grid.work (" + dim_string(grid.work()) +
                            ") has a negative coefficient");
  auto work = dim_eval(grid.work(), max);
  if (!work)
    return manifest_invalid(where + ": grid.work overflows at max_size " + std::to_string(max));
  const int64_t blocks = *work <= 0 ? 0 : (*work - 1) / grid.work_per_block() + 1;
  if (blocks > INT32_MAX)
    return manifest_invalid(where + ": " + std::to_string(blocks) + " blocks at max_size " +
                            std::to_string(max) + " exceed 2^31-1");
  if (grid.has_y()) {
    if (grid.y().coef() < 0)
      return manifest_invalid(where + ": grid.y (" + dim_string(grid.y()) +
                              ") has a negative coefficient");
    auto y1 = dim_eval(grid.y(), 1), ymax = dim_eval(grid.y(), max);
    const bool unset = grid.y().coef() == 0 && grid.y().offset() == 0;
    if (!unset && (!y1 || !ymax || *y1 < 1 || *ymax > 65535))
      return manifest_invalid(where + ": grid.y (" + dim_string(grid.y()) +
                              ") is outside [1, 65535] for sizes 1.." + std::to_string(max));
  }
  if (block < 1 || block > 1024)
    return manifest_invalid(where + ": block " + std::to_string(block) + " is outside [1, 1024]");
  if (shared_bytes > 227 * 1024)
    return manifest_invalid(where + ": shared_bytes " + std::to_string(shared_bytes) +
                            " exceed the 227 KiB a block can have");
  return Status::ok_status();
}

// The real-size pointer (KernelArg.real_size_ptr): always true (the executor's one device slot;
// false would be a binding that says nothing), and at most once per step — a kernel reads the
// request's size once, so a second binding is a writer's bug. It exists only as a kernel-step
// argument; its parameter's width (a pointer) is checked against the kernel at load
// (kernel_check). `seen` is the index of the step's first real-size argument, or -1.
Status real_size_arg_validate(const schema::KernelArg& a, int j, int& seen,
                              const std::string& where) {
  if (a.value_case() != schema::KernelArg::kRealSizePtr) return Status::ok_status();
  if (!a.real_size_ptr())
    return manifest_invalid(where +
                            ": real_size_ptr is false; the binding is the pointer to the real size "
                            "and must be true");
  if (seen >= 0)
    return manifest_invalid(where + ": a second real-size pointer (the first is arg " +
                            std::to_string(seen) + "); a kernel takes the real size once");
  seen = j;
  return Status::ok_status();
}

// A KV-cache pointer (KernelArg.kv): only in a generation artifact, a known kind, and a cache
// layer the generation section has (the per-step buffers take no layer).
Status kv_arg_validate(const Manifest& m, const schema::KernelArg& a, const std::string& where) {
  if (a.value_case() != schema::KernelArg::kKv) return Status::ok_status();
  if (!m.has_generation())
    return manifest_invalid(where +
                            ": a KV-cache pointer in a manifest without a generation section");
  const schema::KvArg& kv = a.kv();
  switch (kv.kind()) {
    case schema::KvArg::KIND_KEY_CACHE:
    case schema::KvArg::KIND_VALUE_CACHE:
      if (kv.layer() >= m.generation().num_layers())
        return manifest_invalid(where + ": KV-cache layer " + std::to_string(kv.layer()) +
                                " is out of range (" + std::to_string(m.generation().num_layers()) +
                                " layers)");
      return Status::ok_status();
    case schema::KvArg::KIND_BLOCK_TABLES:
    case schema::KvArg::KIND_CONTEXT_LENS:
    case schema::KvArg::KIND_SLOT_MAPPING:
      if (kv.layer() != 0)
        return manifest_invalid(where + ": KV step buffer kind " + std::to_string(kv.kind()) +
                                " has layer " + std::to_string(kv.layer()) +
                                "; only caches have layers");
      return Status::ok_status();
    default:
      return manifest_invalid(where + ": unknown KV-cache pointer kind " +
                              std::to_string(kv.kind()));
  }
}

// The signature in kernel `index`'s symbol (cache/kernel_signature.h); for a specialised or
// tuned kernel, also that it is the general kernel's signature (`general`, when given) and that
// its "_s<size>" is `size` (0: a general kernel, no "_s").
Result<cache::KernelSymbolParts> kernel_symbol_of(const Manifest& m, uint32_t index, uint32_t size,
                                                  const cache::KernelSymbolParts* general,
                                                  const std::string& where) {
  const std::string& symbol = m.kernels(static_cast<int>(index)).symbol();
  Result<cache::KernelSymbolParts> parts = cache::kernel_symbol_parse(symbol);
  if (!parts.ok()) return manifest_invalid(where + ": " + parts.status().message());
  if (parts->specialised != size)
    return manifest_invalid(where + ": " + kernel_label(m, index) + " is named for size " +
                            std::to_string(parts->specialised) + ", the manifest uses it at size " +
                            std::to_string(size) + " (0: general)");
  if (general == nullptr) {
    if (!parts->candidate.empty())
      return manifest_invalid(where + ": " + kernel_label(m, index) +
                              " is a tuned candidate ('_v'), not a general kernel");
  } else if (parts->base != general->base || parts->signature != general->signature) {
    return manifest_invalid(where + ": " + kernel_label(m, index) +
                            " is not a variant of the step's kernel '" + general->base + "__K" +
                            cache::kernel_signature_encode(general->signature) +
                            "' (another base or signature)");
  }
  return parts;
}

}  // namespace

Status buffer_extent_check(const Manifest& m, uint32_t index, const cache::ParamExtent& e,
                           const std::string& where) {
  const int64_t max = m.config().max_size();
  const schema::Buffer& b = m.buffers(static_cast<int>(index));
  std::vector<cache::ParamExtent> dims;
  for (const auto& d : b.dims()) dims.push_back({d.coef(), d.offset()});
  const auto bound = cache::tensor_bytes_bound(
      dims, static_cast<int64_t>(dtype_size(static_cast<DType>(b.dtype()))));
  const bool quadratic = std::count_if(b.dims().begin(), b.dims().end(),
                                       [](const schema::DimExpr& d) { return d.coef() != 0; }) > 1;
  for (int64_t s : {int64_t{1}, max}) {
    auto need = dim_eval(e.coef, e.offset, s);
    auto have = bound ? dim_eval(bound->coef, bound->offset, s) : std::nullopt;
    if (!need || !have)
      return manifest_invalid(where + ": the extent overflows at S=" + std::to_string(s));
    if (*have < *need)
      return manifest_invalid(
          where + ": " + buffer_label(m, index) + " holds " + std::to_string(*have) +
          " bytes at S=" + std::to_string(s) +
          (quadratic ? " (a lower bound: more than one of its dims depends on S)" : "") +
          ", the kernel may touch " + std::to_string(*need) + " (extent " + std::to_string(e.coef) +
          "*S" + (e.offset < 0 ? "" : "+") + std::to_string(e.offset) + " bytes)");
  }
  return Status::ok_status();
}

namespace {

// One argument against its parameter: a buffer, the real-size pointer or a KV pointer only for
// a pointer (the real size read-only; a weights buffer never writable, and at least the
// declared extent), the size or an i64 only for a 64-bit integer, an f32 only for a float.
Status arg_bind_check(const Manifest& m, const schema::KernelArg& a, const cache::KernelParam& p,
                      const std::string& al) {
  const std::string declared = " the kernel declares " + std::string(param_kind_name(p.kind));
  const bool pointer = cache::param_is_pointer(p.kind);
  switch (a.value_case()) {
    case schema::KernelArg::kBuffer: {
      if (!pointer)
        return manifest_invalid(al + " is " + buffer_label(m, a.buffer()) + ", but" + declared);
      const bool weights =
          m.buffers(static_cast<int>(a.buffer())).location() == schema::Buffer::LOCATION_WEIGHTS;
      if (weights && p.kind == cache::ParamKind::kWritePtr)
        return manifest_invalid(al + " is " + buffer_label(m, a.buffer()) +
                                " in the weights, but the kernel writes it (a writable pointer)");
      if (p.extent) return buffer_extent_check(m, a.buffer(), *p.extent, al);
      return Status::ok_status();
    }
    case schema::KernelArg::kRealSizePtr:
      if (p.kind != cache::ParamKind::kReadPtr)
        return manifest_invalid(al + " is the real-size pointer (const int64*), but" + declared);
      return Status::ok_status();
    case schema::KernelArg::kKv:
      if (!pointer) return manifest_invalid(al + " is a KV-cache pointer, but" + declared);
      return Status::ok_status();
    case schema::KernelArg::kSize:
    case schema::KernelArg::kI64:
      if (p.kind != cache::ParamKind::kI64)
        return manifest_invalid(al + (a.has_size() ? " is the size (int64)" : " is an i64") +
                                ", but" + declared);
      return Status::ok_status();
    case schema::KernelArg::kF32:
      if (p.kind != cache::ParamKind::kF32)
        return manifest_invalid(al + " is an f32, but" + declared);
      return Status::ok_status();
    default:
      return manifest_invalid(al + " has no value");
  }
}

// The step's kernels (general, specialised, tuned) carry one signature, and its arguments bind
// it kind by kind.
Status signature_validate(const Manifest& m, const schema::KernelStep& k,
                          const std::string& where) {
  const std::string kl = where + ", " + kernel_label(m, k.kernel());
  KILN_ASSIGN_OR_RETURN(const cache::KernelSymbolParts general,
                        kernel_symbol_of(m, k.kernel(), 0, nullptr, where));
  const cache::KernelSignature& sig = general.signature;
  for (const auto& [size, index] : k.specialised())
    KILN_RETURN_IF_ERROR(kernel_symbol_of(m, index, size, &general,
                                          where + ": specialised[" + std::to_string(size) + "]")
                             .status());
  for (const auto& t : k.tuned())
    KILN_RETURN_IF_ERROR(kernel_symbol_of(m, t.kernel(), t.size(), &general,
                                          where + ": tuned[size " + std::to_string(t.size()) + "]")
                             .status());
  if (static_cast<size_t>(k.args_size()) != sig.params.size())
    return manifest_invalid(kl + ": the step passes " + std::to_string(k.args_size()) +
                            " arguments, the kernel's signature has " +
                            std::to_string(sig.params.size()) + " parameters");
  for (int j = 0; j < k.args_size(); ++j)
    KILN_RETURN_IF_ERROR(arg_bind_check(m, k.args(j), sig.params[static_cast<size_t>(j)],
                                        kl + ": arg " + std::to_string(j)));
  return Status::ok_status();
}

Status kernel_step_validate(const Manifest& m, const schema::KernelStep& k,
                            const std::string& where) {
  const auto n_kernels = static_cast<uint32_t>(m.kernels_size());
  const int64_t max = m.config().max_size();
  if (k.kernel() >= n_kernels)
    return manifest_invalid(where + ": kernel index " + std::to_string(k.kernel()) +
                            " is out of range (" + std::to_string(n_kernels) + " kernels)");
  if (m.kernels(static_cast<int>(k.kernel())).specialised_size() != 0)
    return manifest_invalid(where + ": " + kernel_label(m, k.kernel()) +
                            " is a specialised kernel, not a general one");
  std::vector<std::pair<uint32_t, uint32_t>> spec(k.specialised().begin(), k.specialised().end());
  std::sort(spec.begin(), spec.end());
  for (const auto& [size, index] : spec) {
    const std::string sl = where + ": specialised[" + std::to_string(size) + "]";
    if (size < 1 || size > max)
      return manifest_invalid(sl + ": size is outside [1, max_size " + std::to_string(max) + "]");
    if (index >= n_kernels)
      return manifest_invalid(sl + ": kernel index " + std::to_string(index) +
                              " is out of range (" + std::to_string(n_kernels) + " kernels)");
    const uint32_t got = m.kernels(static_cast<int>(index)).specialised_size();
    if (got != size)
      return manifest_invalid(sl + ": " + kernel_label(m, index) + " has specialised_size " +
                              std::to_string(got));
  }
  KILN_RETURN_IF_ERROR(geometry_validate(m, k.grid(), k.block(), k.shared_bytes(), where));
  std::vector<uint32_t> tuned_sizes;
  for (const auto& t : k.tuned()) {
    const std::string tl = where + ": tuned[size " + std::to_string(t.size()) + "]";
    if (t.size() < 1 || t.size() > max)
      return manifest_invalid(tl + ": size is outside [1, max_size " + std::to_string(max) + "]");
    if (std::find(tuned_sizes.begin(), tuned_sizes.end(), t.size()) != tuned_sizes.end())
      return manifest_invalid(tl + ": a second decision for the same size");
    tuned_sizes.push_back(t.size());
    if (t.kernel() >= n_kernels)
      return manifest_invalid(tl + ": kernel index " + std::to_string(t.kernel()) +
                              " is out of range (" + std::to_string(n_kernels) + " kernels)");
    const uint32_t got = m.kernels(static_cast<int>(t.kernel())).specialised_size();
    if (got != t.size())
      return manifest_invalid(tl + ": " + kernel_label(m, t.kernel()) + " has specialised_size " +
                              std::to_string(got));
    KILN_RETURN_IF_ERROR(geometry_validate(m, t.grid(), t.block(), t.shared_bytes(), tl));
  }
  int real_size_arg = -1;
  for (int j = 0; j < k.args_size(); ++j) {
    const auto& a = k.args(j);
    const std::string al = where + ": arg " + std::to_string(j);
    if (a.value_case() == schema::KernelArg::VALUE_NOT_SET)
      return manifest_invalid(al + " has no value");
    if (a.value_case() == schema::KernelArg::kBuffer &&
        a.buffer() >= static_cast<uint32_t>(m.buffers_size()))
      return manifest_invalid(al + ": buffer index " + std::to_string(a.buffer()) +
                              " is out of range (" + std::to_string(m.buffers_size()) +
                              " buffers)");
    KILN_RETURN_IF_ERROR(real_size_arg_validate(a, j, real_size_arg, al));
    KILN_RETURN_IF_ERROR(kv_arg_validate(m, a, al));
  }
  return signature_validate(m, k, where);
}

DType gemm_storage(schema::GemmCompute c) {
  switch (c) {
    case schema::GEMM_COMPUTE_F32:
    case schema::GEMM_COMPUTE_TF32:
      return DType::kF32;
    case schema::GEMM_COMPUTE_F16:
      return DType::kF16;
    case schema::GEMM_COMPUTE_BF16:
      return DType::kBF16;
    default:
      return DType::kUnspecified;
  }
}

Status gemm_step_validate(const Manifest& m, const schema::GemmStep& g, const std::string& where) {
  const auto n_buffers = static_cast<uint32_t>(m.buffers_size());
  if (g.compute() == schema::GEMM_COMPUTE_UNSPECIFIED || !schema::GemmCompute_IsValid(g.compute()))
    return manifest_invalid(where + ": compute is unspecified or unknown (value " +
                            std::to_string(g.compute()) + ")");
  if (g.epilogue() == schema::GEMM_EPILOGUE_UNSPECIFIED ||
      !schema::GemmEpilogue_IsValid(g.epilogue()))
    return manifest_invalid(where + ": epilogue is unspecified or unknown (value " +
                            std::to_string(g.epilogue()) + ")");
  const bool wants_bias = g.epilogue() == schema::GEMM_EPILOGUE_BIAS ||
                          g.epilogue() == schema::GEMM_EPILOGUE_BIAS_RELU ||
                          g.epilogue() == schema::GEMM_EPILOGUE_BIAS_GELU;
  if (wants_bias != g.has_bias())
    return manifest_invalid(where + (wants_bias
                                         ? ": the epilogue adds a bias but has_bias is false"
                                         : ": has_bias is set but the epilogue adds no bias"));
  const DType storage = gemm_storage(g.compute());
  const std::pair<const char*, uint32_t> operands[] = {
      {"a", g.a()}, {"b", g.b()}, {"d", g.d()}, {"bias", g.bias()}, {"c", g.c()}};
  for (const auto& [name, index] : operands) {
    if (std::string(name) == "bias" && !g.has_bias()) continue;
    if (std::string(name) == "c" && !g.has_c()) continue;
    if (index >= n_buffers)
      return manifest_invalid(where + ": " + name + " buffer index " + std::to_string(index) +
                              " is out of range (" + std::to_string(n_buffers) + " buffers)");
    const auto dt = static_cast<DType>(m.buffers(static_cast<int>(index)).dtype());
    if (dt != storage)
      return manifest_invalid(where + ": " + name + " is " + buffer_label(m, index) + " of dtype " +
                              std::string(dtype_name(dt)) + "; this compute type needs " +
                              std::string(dtype_name(storage)));
  }
  if (m.buffers(static_cast<int>(g.d())).location() != schema::Buffer::LOCATION_ARENA)
    return manifest_invalid(where + ": d is " + buffer_label(m, g.d()) +
                            " which is not an arena buffer");
  const std::pair<const char*, const schema::DimExpr*> dims[] = {{"m", &g.m()},
                                                                 {"n", &g.n()},
                                                                 {"k", &g.k()},
                                                                 {"batch", &g.batch()},
                                                                 {"stride_a", &g.stride_a()},
                                                                 {"stride_b", &g.stride_b()},
                                                                 {"stride_d", &g.stride_d()}};
  for (const auto& [name, d] : dims) {
    if (d->coef() < 0)
      return manifest_invalid(where + ": " + name + " (" + dim_string(*d) +
                              ") has a negative coefficient");
    auto at1 = dim_eval(*d, 1);
    if (!at1 || *at1 < 0)
      return manifest_invalid(where + ": " + name + " (" + dim_string(*d) + ") is negative at S=1");
  }
  if (!std::isfinite(g.alpha())) return manifest_invalid(where + ": alpha is not finite");
  if (g.has_c() && !std::isfinite(g.beta()))
    return manifest_invalid(where + ": beta is not finite");
  std::vector<uint32_t> algo_sizes;
  for (const auto& a : g.algos()) {
    if (a.size() < 1 || a.size() > m.config().max_size())
      return manifest_invalid(where + ": a recorded algorithm's size " + std::to_string(a.size()) +
                              " is outside [1, max_size " + std::to_string(m.config().max_size()) +
                              "]");
    if (std::find(algo_sizes.begin(), algo_sizes.end(), a.size()) != algo_sizes.end())
      return manifest_invalid(where + ": two recorded algorithms for size " +
                              std::to_string(a.size()));
    algo_sizes.push_back(a.size());
  }
  for (int64_t s : manifest_check_sizes(m)) {
    Status st = gemm_step_check_at(m, g, s);
    if (!st.ok()) return st;
  }
  return Status::ok_status();
}

}  // namespace

Status gemm_step_check_at(const Manifest& m, const schema::GemmStep& g, int64_t s) {
  const std::string where = "gemm '" + g.node() + "' at S=" + std::to_string(s);
  auto M = dim_eval(g.m(), s), N = dim_eval(g.n(), s), K = dim_eval(g.k(), s);
  auto batch = dim_eval(g.batch(), s);
  if (!M || !N || !K || !batch || *M < 1 || *N < 1 || *K < 1 || *batch < 1)
    return manifest_invalid(where + ": m, n, k and batch must be >= 1 (m=" + dim_string(g.m()) +
                            ", n=" + dim_string(g.n()) + ", k=" + dim_string(g.k()) +
                            ", batch=" + dim_string(g.batch()) + ")");
  if (*batch > INT32_MAX)
    return manifest_invalid(where + ": batch " + std::to_string(*batch) + " exceeds 2^31-1");
  struct Operand {
    const char* name;
    uint32_t buffer;
    int64_t rows, cols;
    const schema::DimExpr* stride;
  };
  // C has D's layout (strides included).
  const Operand ops[] = {{"A", g.a(), *M, *K, &g.stride_a()},
                         {"B", g.b(), *K, *N, &g.stride_b()},
                         {"D", g.d(), *M, *N, &g.stride_d()},
                         {"C", g.c(), *M, *N, &g.stride_d()}};
  for (const auto& op : ops) {
    if (std::string(op.name) == "C" && !g.has_c()) continue;
    auto stride = dim_eval(*op.stride, s);
    auto one = checked_mul(op.rows, op.cols);
    auto span = stride ? checked_mul(*batch - 1, *stride) : std::nullopt;
    auto need = (one && span) ? checked_add(*span, *one) : std::nullopt;
    auto have = dims_numel(m.buffers(static_cast<int>(op.buffer)).dims(), s);
    if (!need || !have || *stride < 0)
      return manifest_invalid(where + ": operand " + op.name + " extent overflows");
    if (*need > *have)
      return manifest_invalid(where + ": operand " + op.name + " needs " + std::to_string(*need) +
                              " elements (" + std::to_string(op.rows) + "x" +
                              std::to_string(op.cols) + ", batch " + std::to_string(*batch) +
                              ", stride " + std::to_string(*stride) + ") but " +
                              buffer_label(m, op.buffer) + " holds " + std::to_string(*have));
    if (std::string(op.name) == "D" && *batch > 1 && *stride < *one)
      return manifest_invalid(where + ": stride_d " + std::to_string(*stride) +
                              " is smaller than M*N = " + std::to_string(*one) +
                              ", so the batches of D overlap");
  }
  if (g.has_bias()) {
    auto have = dims_numel(m.buffers(static_cast<int>(g.bias())).dims(), s);
    if (!have || *have < *N)
      return manifest_invalid(where + ": bias " + buffer_label(m, g.bias()) +
                              " holds fewer than N = " + std::to_string(*N) + " elements");
  }
  return Status::ok_status();
}

namespace {

// A size list of a gated step: ascending, unique, each in [1, max_size].
template <typename List>
Status size_list_validate(const Manifest& m, const List& sizes, const std::string& where) {
  uint32_t prev = 0;
  for (uint32_t s : sizes) {
    if (s < 1 || s > m.config().max_size())
      return manifest_invalid(where + ": size " + std::to_string(s) + " is outside [1, max_size " +
                              std::to_string(m.config().max_size()) + "]");
    if (s <= prev) return manifest_invalid(where + ": sizes are not ascending and unique");
    prev = s;
  }
  return Status::ok_status();
}

// Step i of `piece` and its gating partner: a gated kernel step is followed by a GEMM step with
// the same skinny_sizes, and a GEMM step with skinny_sizes follows such a kernel step; a kernel
// step that runs after_cublaslt follows a GEMM step, and one that runs before_cublaslt precedes
// one (directly or past its gated kernel step).
Status gating_validate(const Manifest& m, const schema::Piece& piece, int i,
                       const std::string& at) {
  const auto& step = piece.steps(i);
  if (step.has_kernel() && step.kernel().after_cublaslt()) {
    if (step.kernel().gated()) return manifest_invalid(at + ": after_cublaslt on a gated step");
    if (step.kernel().before_cublaslt())
      return manifest_invalid(at + ": after_cublaslt and before_cublaslt on one step");
    if (i == 0 || !piece.steps(i - 1).has_gemm())
      return manifest_invalid(at + ": after_cublaslt on a step that does not follow a GEMM step");
  }
  if (step.has_kernel() && step.kernel().before_cublaslt()) {
    if (step.kernel().gated()) return manifest_invalid(at + ": before_cublaslt on a gated step");
    if (gemm_step_after(piece.steps(), i) == nullptr)
      return manifest_invalid(
          at +
          ": before_cublaslt on a step that is not followed by a GEMM step (directly or "
          "past its gated kernel step)");
  }
  if (step.has_kernel() && step.kernel().gated()) {
    KILN_RETURN_IF_ERROR(size_list_validate(m, step.kernel().run_sizes(), at + ": run_sizes"));
    const bool paired = i + 1 < piece.steps_size() && piece.steps(i + 1).has_gemm();
    if (!paired)
      return manifest_invalid(
          at + ": a gated kernel step must be followed by the GEMM step it replaces");
    const auto& want = piece.steps(i + 1).gemm().skinny_sizes();
    if (!std::equal(want.begin(), want.end(), step.kernel().run_sizes().begin(),
                    step.kernel().run_sizes().end()))
      return manifest_invalid(at + ": run_sizes differ from the next GEMM step's skinny_sizes");
  } else if (step.has_kernel() && step.kernel().run_sizes_size() > 0) {
    return manifest_invalid(at + ": run_sizes on a step that is not gated");
  }
  if (step.has_gemm() && step.gemm().skinny_sizes_size() > 0) {
    KILN_RETURN_IF_ERROR(size_list_validate(m, step.gemm().skinny_sizes(), at + ": skinny_sizes"));
    if (i == 0 || !piece.steps(i - 1).has_kernel() || !piece.steps(i - 1).kernel().gated())
      return manifest_invalid(at + ": skinny_sizes without the gated kernel step before it");
  }
  return Status::ok_status();
}

// Route gating (KernelStep.skip_on_decode / decode_only / route_sizes): only in a generation
// artifact (the only kind with a decode route), on kernel steps of attention pieces, one flag a
// step, with its sizes; a step skipped on the decode route is one whose work a later decode_only
// step of the piece does there, at the same sizes.
Status route_gating_validate(const Manifest& m, const schema::Piece& piece, int i,
                             const std::string& at) {
  const auto& step = piece.steps(i);
  if (!step.has_kernel()) return Status::ok_status();
  const schema::KernelStep& k = step.kernel();
  if (!k.skip_on_decode() && !k.decode_only()) {
    if (k.route_sizes_size() > 0)
      return manifest_invalid(at + ": route_sizes without skip_on_decode or decode_only");
    return Status::ok_status();
  }
  const char* flag = k.skip_on_decode() ? "skip_on_decode" : "decode_only";
  if (k.skip_on_decode() && k.decode_only())
    return manifest_invalid(at + ": skip_on_decode and decode_only on one step");
  if (!m.has_generation())
    return manifest_invalid(at + ": " + flag +
                            " in a manifest without a generation section (only generation has "
                            "a decode route)");
  if (!piece.is_attention())
    return manifest_invalid(at + ": " + flag + " on a step of a compute piece");
  if (k.route_sizes_size() == 0) return manifest_invalid(at + ": " + flag + " without route_sizes");
  KILN_RETURN_IF_ERROR(size_list_validate(m, k.route_sizes(), at + ": route_sizes"));
  if (k.decode_only()) return Status::ok_status();
  for (int j = i + 1; j < piece.steps_size(); ++j) {
    if (!piece.steps(j).has_kernel() || !piece.steps(j).kernel().decode_only()) continue;
    const auto& sizes = piece.steps(j).kernel().route_sizes();
    if (std::equal(sizes.begin(), sizes.end(), k.route_sizes().begin(), k.route_sizes().end()))
      return Status::ok_status();
  }
  return manifest_invalid(at +
                          ": skip_on_decode, but no later decode_only step of the piece has the "
                          "same route_sizes (nothing would do the skipped work)");
}

}  // namespace

Status program_validate(const Manifest& m) {
  for (int p = 0; p < m.pieces_size(); ++p) {
    const auto& piece = m.pieces(p);
    for (int i = 0; i < piece.steps_size(); ++i) {
      const auto& step = piece.steps(i);
      const std::string at = "piece " + std::to_string(p) + " step " + std::to_string(i);
      KILN_RETURN_IF_ERROR(gating_validate(m, piece, i, at));
      KILN_RETURN_IF_ERROR(route_gating_validate(m, piece, i, at));
      switch (step.op_case()) {
        case schema::Step::kKernel:
          KILN_RETURN_IF_ERROR(kernel_step_validate(
              m, step.kernel(), at + " (kernel '" + step.kernel().node() + "')"));
          break;
        case schema::Step::kGemm:
          KILN_RETURN_IF_ERROR(
              gemm_step_validate(m, step.gemm(), at + " (gemm '" + step.gemm().node() + "')"));
          break;
        default:
          return manifest_invalid(at + ": neither a kernel nor a gemm step");
      }
    }
  }
  return Status::ok_status();
}

}  // namespace kiln::runtime
