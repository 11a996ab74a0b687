// ONNX models for the GEMM family's GPU tests (tests/kernels/gemm_gpu_test.cc and
// skinny_gemm_gpu_test.cc): one GEMM with each epilogue cuBLASLt and the skinny kernel share,
// built so the reference and the GPU differ only by accumulation order and output rounding.
//
// Inputs are exact in the compute dtype. In fp32/tf32 the activations are rows of tables of
// multiples of 1/8 picked by int64 ids (exact in tf32); in fp16/bf16 the model itself is typed
// f16/bf16 (inputs, outputs, weights via a folded Cast), so the random inputs are drawn in that
// dtype. (Gathered rows would stay f32 under precision fp16/bf16: the precision pass keeps
// index-derived floats.)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/config.h"
#include "tests/support/gpu_model_check.h"
#include "tests/support/onnx_builder.h"

namespace kiln::testing {

inline constexpr int64_t kGemmVocab = 64;  // rows of the fp32 activation tables
inline constexpr compiler::Precision kGemmPrecisions[] = {
    compiler::Precision::kF32, compiler::Precision::kTF32, compiler::Precision::kF16,
    compiler::Precision::kBF16};

// n multiples of 1/8 in [-1, 1], from `seed`.
std::vector<float> eighths(int64_t n, uint32_t seed);
int64_t numel(const std::vector<int64_t>& dims);
// The element type of a model checked under precision `p`.
int model_elem(compiler::Precision p);

// A model of one dtype: f32 activations gathered from exact tables by int64 ids, 16-bit ones
// as typed inputs; constants cast to the model's dtype.

class GemmModel {
 public:
  GemmModel(const std::string& name, compiler::Precision p, int64_t opset = 17)
      : b_(name, opset), elem_(model_elem(p)) {
    if (elem_ == onnx::TensorProto::FLOAT)
      b_.typed_input("ids", onnx::TensorProto::INT64, {std::string("S")});
  }
  // An activation [S, row_dims...] of exact values.
  GemmModel& activation(const std::string& name, std::vector<int64_t> row_dims, uint32_t seed) {
    if (elem_ != onnx::TensorProto::FLOAT) {
      std::vector<Dim> dims;
      dims.reserve(row_dims.size() + 1);
      dims.emplace_back(std::in_place_type<std::string>, "S");
      for (int64_t d : row_dims) dims.emplace_back(std::in_place_type<int64_t>, d);
      b_.typed_input(name, elem_, dims);
      return *this;
    }
    row_dims.insert(row_dims.begin(), kGemmVocab);
    b_.initializer(name + "_table", row_dims, eighths(numel(row_dims), seed));
    std::vector<std::pair<std::string, Attr>> axis0;
    axis0.emplace_back("axis", Attr(int64_t{0}));
    b_.node("Gather", {name + "_table", "ids"}, {name}, axis0);
    return *this;
  }
  // A constant of the model's dtype (an f32 initializer, Cast when the model is 16-bit).
  GemmModel& constant(const std::string& name, const std::vector<int64_t>& dims,
                      const std::vector<float>& values) {
    if (elem_ == onnx::TensorProto::FLOAT) {
      b_.initializer(name, dims, values);
    } else {
      b_.initializer(name + "_f32", dims, values);
      std::vector<std::pair<std::string, Attr>> to;
      to.emplace_back("to", Attr(int64_t{elem_}));
      b_.node("Cast", {name + "_f32"}, {name}, to);
    }
    return *this;
  }
  GemmModel& weight(const std::string& name, const std::vector<int64_t>& dims, uint32_t seed) {
    return constant(name, dims, eighths(numel(dims), seed));
  }
  GemmModel& node(const std::string& op, const std::vector<std::string>& in,
                  const std::vector<std::string>& out,
                  const std::vector<std::pair<std::string, Attr>>& attrs = {}) {
    b_.node(op, in, out, attrs);
    return *this;
  }
  // An f32 constant whatever the model's dtype.
  GemmModel& f32_constant(const std::string& name, const std::vector<int64_t>& dims,
                          const std::vector<float>& values) {
    b_.initializer(name, dims, values);
    return *this;
  }
  bool is_f32() const { return elem_ == onnx::TensorProto::FLOAT; }
  int elem() const { return elem_; }
  OnnxBuilder finish(const std::string& output) {
    if (elem_ == onnx::TensorProto::FLOAT)
      b_.output(output);
    else
      b_.typed_output(output, elem_);
    return b_;
  }

 private:
  OnnxBuilder b_;
  int elem_;
};

// GELU in GPT-2's tanh form (fuse_gelu makes it one Gelu(approximate = "tanh")).
void gelu_tanh(GemmModel& b, const std::string& x, const std::string& y);

enum class Epi { kNone, kBias, kBiasRelu, kBiasGelu, kBiasResidual, kResidualBiasRelu };
const char* epi_name(Epi e);

// y[S, N] = epilogue(x[S, K] @ w[K, N]). The residual exists before the GEMM (as in a
// transformer), so it can be the GEMM's C.
OnnxBuilder dense_model(Epi e, int64_t k, int64_t n, compiler::Precision p);

// y[S, N] = act(x @ wg) * (x @ wu), the gated MLP of Llama-style models, with act SiLU (as the
// exporters write it: g * Sigmoid(g)) or Relu; fuse_gated_mlp makes it one kiln.GatedMatMul.
OnnxBuilder gated_mlp_model(bool silu, int64_t k, int64_t n, compiler::Precision p);

// y[S, N] = norm(x) @ w + b, or the gated MLP of norm(x) (`gated`, no b): norm an RMSNorm
// (opset 23's RMSNormalization) or a LayerNorm with or without its bias, over x's K elements,
// with constant parameters. The norm's only reader is the GEMM, so the skinny kernel takes it as
// its prologue (compiler/backend/lower/reduce_codegen.h, "Norm prologues").
enum class NormKind { kRms, kLayer, kLayerBias };
const char* norm_kind_name(NormKind n);
OnnxBuilder norm_gemm_model(NormKind norm, bool gated, int64_t k, int64_t n, compiler::Precision p);

// The tolerance of a norm model (norm_gemm_model): the GEMM's, plus the rounding of the
// normalised rows, which are not exact like the GEMM models' inputs. Where cuBLASLt runs, the
// norm kernel rounds them to the storage dtype (tf32 rounds them again); the skinny kernel keeps
// them in fp32. About 3·sqrt(K)·u absolute (u: 2^-11 for fp16 and tf32, 2^-8 for bf16, 2^-20 for
// fp32, whose norm and sums round too), times sqrt(K), the size of the gate's sums, in the gated
// MLP (act(g) · u carries g's size into u's error).
compiler::Tolerance norm_gemm_tolerance(compiler::Precision p, int64_t k, bool gated);

// The check of a GEMM model with reduction length k: sizes 1, 3, 17, 1000, the GEMM tolerance.
GpuCheck gemm_check(compiler::Precision p, int64_t k);

}  // namespace kiln::testing
