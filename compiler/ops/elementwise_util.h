// Helpers shared by the elementwise family's two files (elementwise.cc, elementwise_select.cc):
// dtype classes, wrapping integer arithmetic, n-ary broadcasting (symbolic and concrete) and
// the symbolic contents of small integer results. Defined in elementwise_select.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"
#include "compiler/ir/op_registry.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

// Where, Cast, Clip (elementwise_select.cc); called by ops_register_elementwise.
void ops_register_elementwise_select(std::vector<OpDef>& defs);

// --- dtype classes -----------------------------------------------------------------------------
inline constexpr unsigned kFloating = 1;  // f32, f16, bf16, f64
inline constexpr unsigned kIntegral = 2;  // i64, i32, i8, u8
inline constexpr unsigned kBoolean = 4;
inline constexpr unsigned kNumeric = kFloating | kIntegral;

bool dtype_in(DType d, unsigned kinds);
std::string kinds_name(unsigned kinds);  // "a float dtype (f32, f16, bf16, f64)" ...

// Inputs [0, count) must be present, of one dtype, and in `kinds`.
Status check_same_dtypes(const InferContext& c, size_t count, unsigned kinds);

// --- integers ----------------------------------------------------------------------------------
// Two's-complement arithmetic, as the integer kernels of onnxruntime compute it.
int64_t wrapping_add(int64_t a, int64_t b);
int64_t wrapping_sub(int64_t a, int64_t b);
int64_t wrapping_mul(int64_t a, int64_t b);
// v wrapped to the width of an integer dtype (i32, i8, u8), as a double; bool: v != 0.
double int_wrap(DType dt, int64_t v);

// --- broadcasting ------------------------------------------------------------------------------
// numpy broadcast of the shapes of every present input from `first` on.
Result<ir::Shape> broadcast_inputs(const InferContext& c, size_t first);

struct Broadcast {
  std::vector<int64_t> dims;                // the common dims
  std::vector<std::vector<int64_t>> index;  // per input: its element for each output element
};
// Every tensor must be present and hold numel() values.
Result<Broadcast> ref_broadcast(const std::vector<const RefTensor*>& in);

// --- symbolic contents -------------------------------------------------------------------------
inline constexpr int64_t kMaxFoldInts = 1024;  // longer shape vectors are left to run time

// Contents of an elementwise integer result of shape `out` (rank <= 1) when every present
// input's contents are known: f(args) per element, args holding one (broadcast) element per
// input. nullopt when an input is unknown or f cannot decide an element for every S.
template <typename F>
std::optional<std::vector<ir::DimExpr>> fold_ints(const InferContext& c, const ir::Shape& out,
                                                  F f) {
  if (out.size() > 1) return std::nullopt;
  int64_t len = 1;
  if (out.size() == 1) {
    if (!out[0].is_constant() || out[0].offset > kMaxFoldInts) return std::nullopt;
    len = out[0].offset;
  }
  std::vector<std::vector<ir::DimExpr>> ins;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    std::optional<std::vector<ir::DimExpr>> v = c.input_ints(i);
    if (!v || (v->size() != 1 && static_cast<int64_t>(v->size()) != len)) return std::nullopt;
    ins.push_back(std::move(*v));
  }
  std::vector<ir::DimExpr> result, args(ins.size());
  for (int64_t k = 0; k < len; ++k) {
    for (size_t i = 0; i < ins.size(); ++i)
      args[i] = ins[i].size() == 1 ? ins[i][0] : ins[i][static_cast<size_t>(k)];
    std::optional<ir::DimExpr> r = f(args);
    if (!r) return std::nullopt;
    result.push_back(*r);
  }
  return result;
}

}  // namespace kiln::compiler
