#include "tests/support/op_cases.h"

namespace kiln::testing {

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  auto add = [&](std::string name, OnnxBuilder b, bool gemm, int64_t k, int kernels, int gemms) {
    cases.push_back({std::move(name), std::move(b), gemm, k, kernels, gemms});
  };
  const std::string S = "batch";

  add("add_broadcast_row",
      OnnxBuilder("add_broadcast_row").input("x", {S, int64_t{16}}).input("y", {int64_t{16}})
          .node("Add", {"x", "y"}, {"z"}).output("z"),
      false, 0, 1, 0);
  add("sub_mul_div_chain",
      OnnxBuilder("sub_mul_div_chain").input("x", {S, int64_t{3}, int64_t{5}})
          .random_initializer("c", {5}, 1.0f, 2.0f).random_initializer("d", {3, 1}, -1.0f, 1.0f, 9)
          .node("Sub", {"x", "d"}, {"t0"}).node("Mul", {"t0", "x"}, {"t1"})
          .node("Div", {"t1", "c"}, {"z"}).output("z"),
      false, 0, 1, 0);
  add("relu_sigmoid_tanh",
      OnnxBuilder("relu_sigmoid_tanh").input("x", {S, int64_t{7}})
          .node("Relu", {"x"}, {"a"}).node("Sigmoid", {"a"}, {"b"}).node("Tanh", {"b"}, {"z"})
          .output("z"),
      false, 0, 1, 0);
  add("relu_keeps_nan_shape_scalar_bcast",
      OnnxBuilder("scalar_bcast").input("x", {int64_t{2}, S, int64_t{9}}).initializer("one", {}, {1.5f})
          .node("Mul", {"x", "one"}, {"a"}).node("Relu", {"a"}, {"z"}).output("z"),
      false, 0, 1, 0);
  add("softmax_3d",
      OnnxBuilder("softmax_3d").input("x", {S, int64_t{7}, int64_t{33}})
          .node("Softmax", {"x"}, {"z"}, {{"axis", int64_t{-1}}}).output("z"),
      false, 0, 1, 0);
  add("softmax_wide_row",
      OnnxBuilder("softmax_wide_row").input("x", {S, int64_t{1000}})
          .node("Softmax", {"x"}, {"z"}, {{"axis", int64_t{1}}}).output("z"),
      false, 0, 1, 0);
  add("matmul_bias_relu_epilogue",
      OnnxBuilder("matmul_bias_relu").input("x", {S, int64_t{24}})
          .random_initializer("w", {24, 40}).random_initializer("b", {40}, -1, 1, 3)
          .node("MatMul", {"x", "w"}, {"h"}).node("Add", {"h", "b"}, {"hb"})
          .node("Relu", {"hb"}, {"z"}).output("z"),
      true, 24, 0, 1);
  add("matmul_3d_folds_m",
      OnnxBuilder("matmul_3d").input("x", {S, int64_t{6}, int64_t{24}}).random_initializer("w", {24, 40})
          .node("MatMul", {"x", "w"}, {"z"}).output("z"),
      true, 24, 0, 1);
  add("matmul_batched_activations",
      OnnxBuilder("matmul_batched").input("a", {S, int64_t{4}, int64_t{8}, int64_t{16}})
          .input("b", {S, int64_t{4}, int64_t{16}, int64_t{8}})
          .node("MatMul", {"a", "b"}, {"z"}).output("z"),
      true, 16, 0, 1);
  add("gemm_transb_alpha_beta_bias",
      OnnxBuilder("gemm_bias").input("x", {S, int64_t{32}}).random_initializer("w", {48, 32})
          .random_initializer("c", {48}, -1, 1, 5)
          .node("Gemm", {"x", "w", "c"}, {"z"},
                {{"transB", int64_t{1}}, {"alpha", 0.75f}, {"beta", 0.5f}})
          .output("z"),
      true, 32, 0, 1);
  add("gemm_transa_general_c",
      OnnxBuilder("gemm_general_c").input("a", {int64_t{20}, S}).input("c", {S, int64_t{12}})
          .random_initializer("w", {20, 12})
          .node("Gemm", {"a", "w", "c"}, {"z"}, {{"transA", int64_t{1}}, {"beta", 0.25f}})
          .output("z"),
      true, 20, 0, 1);  // C has D's shape: cuBLASLt's beta * C
  add("gemm_no_c_then_add_activation",
      OnnxBuilder("gemm_then_add").input("x", {S, int64_t{16}}).input("y", {S, int64_t{8}})
          .random_initializer("w", {16, 8})
          .node("Gemm", {"x", "w"}, {"g"}).node("Add", {"g", "y"}, {"z"}).output("z"),
      true, 16, 0, 1);  // the Add of a D-shaped tensor folds as C with beta 1
  add("identity_and_dropout_outputs",
      OnnxBuilder("identity_dropout").input("x", {S, int64_t{10}})
          .node("Dropout", {"x"}, {"d"}).node("Relu", {"d"}, {"r"})
          .node("Identity", {"r"}, {"z"}).output("z"),
      false, 0, 1, 0);
  return cases;
}

}  // namespace kiln::testing
