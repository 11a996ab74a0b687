// Helpers shared by the op families under compiler/ops/: symbolic-dim arithmetic, axis handling,
// broadcasting (symbolic and concrete) and small RefTensor utilities.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"
#include "compiler/ir/op_registry.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

// --- symbolic dims ---------------------------------------------------------------------------
std::optional<ir::DimExpr> dim_add(const ir::DimExpr& a, const ir::DimExpr& b);
std::optional<ir::DimExpr> dim_sub(const ir::DimExpr& a, const ir::DimExpr& b);
// a / b when b is a nonzero constant dividing both coef and offset of a exactly.
std::optional<ir::DimExpr> dim_div_exact(const ir::DimExpr& a, const ir::DimExpr& b);
// Whether a == b for every S in [1, max_size] (true), for none (false), or depends (nullopt).
std::optional<bool> dim_equal_always(const ir::DimExpr& a, const ir::DimExpr& b, int64_t max_size);
// Same for a < b.
std::optional<bool> dim_less_always(const ir::DimExpr& a, const ir::DimExpr& b, int64_t max_size);

// numpy broadcasting of symbolic shapes (dims equal or one side the constant 1).
Result<ir::Shape> shape_broadcast(const InferContext& c, const ir::Shape& a, const ir::Shape& b);

// Input i has input `like`'s dtype, else "<what> '<name>' is <dtype>, expected <dtype>".
Status check_dtype_as(const InferContext& c, size_t i, size_t like, std::string_view what);

// axis in [-rank, rank) → [0, rank); nullopt when out of range.
std::optional<int64_t> axis_normalize(int64_t axis, int64_t rank);
// The same for an input of `shape` (inference) or `dims` (reference), erring with the messages
// the ops share: "axis A is out of range for input [shape]" and "axis A out of range for [dims]".
Result<int64_t> infer_axis(const InferContext& c, int64_t axis, const ir::Shape& shape);
Result<int64_t> ref_axis(int64_t axis, const std::vector<int64_t>& dims);
// Transpose's perm attribute, or the axes of a rank-`rank` input reversed when it is absent
// (unchecked).
std::vector<int64_t> transpose_perm_attr(const ir::Node& n, size_t rank);

// --- concrete tensors ------------------------------------------------------------------------
RefTensor ref_make(DType dtype, std::vector<int64_t> dims);          // zero-filled
std::vector<int64_t> ref_strides(const std::vector<int64_t>& dims);  // row-major, in elements
// numpy broadcasting of concrete dims (equal or one side 1; the shorter one padded with 1s on
// the left). The error reads "<what> [a] and [b] do not broadcast".
Result<std::vector<int64_t>> ref_broadcast_dims(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b,
                                                std::string_view what = "dims");
// For each element of `out` (row-major), the index of the element of a tensor with dims `in`
// that broadcasts to it. `in` must broadcast to `out`.
std::vector<int64_t> ref_broadcast_index(const std::vector<int64_t>& out,
                                         const std::vector<int64_t>& in);
// double → int64 for index/shape data, saturating (INT64_MAX in a Slice end stays huge).
int64_t ref_to_int(double v);
// Rounds a value to what dtype can hold (float → float32 rounding, ints truncate, bool 0/1).
double ref_round_to(DType dtype, double v);

// Longest integer tensor whose elements are tracked symbolically (shapes are far shorter).
inline constexpr size_t kMaxSymbolicInts = 64;

// Errors unless `in` has at least `required` entries and the first `required` are present.
Status ref_check_inputs(const std::vector<const RefTensor*>& in, size_t required);
// Every present input holds numel() values.
Status ref_check_data(const std::vector<const RefTensor*>& in);
// Input i, or nullptr when it is omitted or past the end.
const RefTensor* ref_opt(const std::vector<const RefTensor*>& in, size_t i);
// The elements as int64 (saturating, see ref_to_int).
std::vector<int64_t> ref_to_ints(const RefTensor& t);

bool dtype_is_float(DType d);     // f16, bf16, f32, f64
bool dtype_is_integer(DType d);   // i8, u8, i32, i64
bool dtype_is_int_like(DType d);  // an integer dtype or bool

// An elementwise op of the ONNX domain: each output element is a function of the input elements
// at the same (broadcast) position (Cast, Where and the comparisons included).
bool onnx_elementwise_op(std::string_view op);

}  // namespace kiln::compiler
