#include "runtime/input_validate.h"

#include <gtest/gtest.h>

#include "tests/runtime/expect_error.h"

namespace kiln::runtime {
namespace {

using testing::is_error;

// x [S, 4] (size axis 0), y [3, 2S+1] (size axis 1), c [2] (no size axis).
std::vector<TensorInfo> specs() {
  return {TensorInfo{"x", DType::kF32, {{1, 0}, {0, 4}}, 0},
          TensorInfo{"y", DType::kI64, {{0, 3}, {2, 1}}, 1},
          TensorInfo{"c", DType::kF16, {{0, 2}}, -1}};
}

std::vector<Tensor> inputs(int64_t sx, int64_t y_cols) {
  return {Tensor::zeros("x", DType::kF32, {sx, 4}), Tensor::zeros("y", DType::kI64, {3, y_cols}),
          Tensor::zeros("c", DType::kF16, {2})};
}

TEST(InputValidate, FindsSizeAndOrder) {
  auto in = inputs(5, 11);
  std::swap(in[0], in[2]);  // any order
  auto r = inputs_validate(specs(), in, 64);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size, 5);
  EXPECT_EQ(r->by_input[0]->name, "x");
  EXPECT_EQ(r->by_input[2]->name, "c");
}

TEST(InputValidate, NamesAllListed) {
  auto in = inputs(5, 11);
  in[1].name = "yy";
  in.push_back(in[0]);
  EXPECT_TRUE(is_error(inputs_validate(specs(), in, 64).status(), StatusCode::kInvalidArgument,
                       {"unknown input(s) 'yy'", "more than once 'x'", "missing input(s) 'y'",
                        "the model's inputs are 'x', 'y', 'c'"}));
}

TEST(InputValidate, DtypeRankDims) {
  auto in = inputs(5, 11);
  in[1].dtype = DType::kI32;
  EXPECT_TRUE(is_error(inputs_validate(specs(), in, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'y' is i32, the model expects i64"}));
  in = inputs(5, 11);
  in[0].shape = {5, 4, 1};
  EXPECT_TRUE(is_error(inputs_validate(specs(), in, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'x' has 3 dims, the model expects 2"}));
  in = inputs(5, 11);
  in[0] = Tensor::zeros("x", DType::kF32, {5, 3});
  EXPECT_TRUE(is_error(inputs_validate(specs(), in, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'x' dim 1 is 3, the model expects 4"}));
  in = inputs(5, 10);  // 2S+1 is odd
  EXPECT_TRUE(is_error(inputs_validate(specs(), in, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'y' dim 1 is 10", "not 2*S+1 for any size S"}));
}

TEST(InputValidate, Sizes) {
  EXPECT_TRUE(is_error(inputs_validate(specs(), inputs(0, 1), 64).status(),
                       StatusCode::kInvalidArgument, {"input 'x' dim 0 is 0", "size 0"}));
  EXPECT_TRUE(is_error(inputs_validate(specs(), inputs(65, 131), 64).status(),
                       StatusCode::kInvalidArgument, {"implies size 65", "max_size 64"}));
  EXPECT_TRUE(is_error(inputs_validate(specs(), inputs(5, 7), 64).status(),
                       StatusCode::kInvalidArgument,
                       {"input 'x' implies size 5, input 'y' implies size 3"}));
  EXPECT_TRUE(inputs_validate(specs(), inputs(64, 129), 64).ok());
  EXPECT_TRUE(inputs_validate(specs(), inputs(1, 3), 64).ok());
}

TEST(InputValidate, DataLength) {
  auto in = inputs(5, 11);
  in[0].data.pop_back();
  EXPECT_TRUE(is_error(inputs_validate(specs(), in, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'x' holds 79 bytes", "[5, 4] of f32 needs 80"}));
}

TEST(InputValidate, NoSizeAxisMeansSizeOne) {
  std::vector<TensorInfo> s = {TensorInfo{"c", DType::kF32, {{0, 2}}, -1}};
  auto r = inputs_validate(s, {Tensor::zeros("c", DType::kF32, {2})}, 8);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size, 1);
}

// Views of caller memory go through the same checks; instead of a byte length they need a
// non-null pointer.
std::vector<TensorView> views(int64_t sx, int64_t y_cols) {
  static const char storage[1] = {0};  // never read: validation only looks at the pointer
  return {TensorView{"x", DType::kF32, {sx, 4}, storage, Memory::kDevice},
          TensorView{"y", DType::kI64, {3, y_cols}, storage, Memory::kHost},
          TensorView{"c", DType::kF16, {2}, storage, Memory::kDevice}};
}

TEST(InputValidate, ViewsShareTheChecks) {
  const std::vector<TensorView> ok_views = views(5, 11);  // the result points into them
  auto r = inputs_validate(specs(), ok_views, 64);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size, 5);
  EXPECT_EQ(r->by_input[1]->name, "y");
  auto v = views(5, 11);
  v[2].name = "cc";
  EXPECT_TRUE(is_error(inputs_validate(specs(), v, 64).status(), StatusCode::kInvalidArgument,
                       {"unknown input(s) 'cc'", "missing input(s) 'c'"}));
  v = views(5, 11);
  v[0].dtype = DType::kBF16;
  EXPECT_TRUE(is_error(inputs_validate(specs(), v, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'x' is bf16, the model expects f32"}));
  EXPECT_TRUE(is_error(inputs_validate(specs(), views(70, 141), 64).status(),
                       StatusCode::kInvalidArgument, {"implies size 70", "max_size 64"}));
  v = views(5, 11);
  v[1].data = nullptr;
  EXPECT_TRUE(is_error(inputs_validate(specs(), v, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'y' has a null data pointer"}));
  v = views(5, 11);
  v[0].memory = static_cast<Memory>(7);
  EXPECT_TRUE(is_error(inputs_validate(specs(), v, 64).status(), StatusCode::kInvalidArgument,
                       {"input 'x': memory is neither host nor device"}));
}

// z [S, 4] f32, w [2, S] i64.
std::vector<TensorInfo> out_specs() {
  return {TensorInfo{"z", DType::kF32, {{1, 0}, {0, 4}}, 0},
          TensorInfo{"w", DType::kI64, {{0, 2}, {1, 0}}, 1}};
}

TEST(OutputValidate, SubsetsByNameAndCapacity) {
  char buf[1024];
  std::vector<OutputView> outs = {OutputView{"w", buf, 2 * 5 * 8, Memory::kHost, {}}};
  auto r = outputs_validate(out_specs(), outs, 5);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (std::vector<size_t>{1}));
  outs.push_back(OutputView{"z", buf, 5 * 4 * 4, Memory::kDevice, {}});
  r = outputs_validate(out_specs(), outs, 5);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (std::vector<size_t>{1, 0}));
  EXPECT_TRUE(outputs_validate(out_specs(), {}, 5).ok());  // nothing wanted is allowed
}

TEST(OutputValidate, Errors) {
  char buf[1024];
  std::vector<OutputView> outs = {OutputView{"z", buf, 79, Memory::kHost, {}}};
  EXPECT_TRUE(
      is_error(outputs_validate(out_specs(), outs, 5).status(), StatusCode::kInvalidArgument,
               {"output 'z' needs 80 bytes at size 5", "[5, 4] of f32", "the buffer holds 79"}));
  outs = {OutputView{"q", buf, 80, Memory::kHost, {}}, OutputView{"z", buf, 80, Memory::kHost, {}},
          OutputView{"z", buf, 80, Memory::kHost, {}}};
  EXPECT_TRUE(is_error(outputs_validate(out_specs(), outs, 5).status(),
                       StatusCode::kInvalidArgument,
                       {"unknown output(s) 'q'", "output(s) given more than once 'z'",
                        "the model's outputs are 'z', 'w'"}));
  outs = {OutputView{"z", nullptr, 80, Memory::kDevice, {}}};
  EXPECT_TRUE(is_error(outputs_validate(out_specs(), outs, 5).status(),
                       StatusCode::kInvalidArgument, {"output 'z' has a null data pointer"}));
}

}  // namespace
}  // namespace kiln::runtime
