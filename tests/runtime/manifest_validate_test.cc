// Starts from a valid hand-built manifest and breaks one field class at a time.
#include "runtime/manifest_validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "tests/runtime/expect_error.h"
#include "tests/runtime/test_model.h"

namespace kiln::runtime {
namespace {

using testing::is_error;
using testing::TestModelSpec;

schema::Manifest valid_manifest() {
  TestModelSpec spec;
  schema::Manifest m = testing::test_manifest(spec);
  testing::test_manifest_add_files(&m, spec, 4096);
  return m;
}

// Applies `breaker` to a valid manifest and expects invalid_argument naming all `needles`.
::testing::AssertionResult broken(const std::function<void(schema::Manifest&)>& breaker,
                                  std::initializer_list<std::string> needles) {
  schema::Manifest m = valid_manifest();
  breaker(m);
  return is_error(manifest_validate(m), StatusCode::kInvalidArgument, needles);
}

schema::GemmStep& gemm(schema::Manifest& m) {
  return *m.mutable_pieces(0)->mutable_steps(0)->mutable_gemm();
}
schema::KernelStep& relu(schema::Manifest& m) {
  return *m.mutable_pieces(1)->mutable_steps(0)->mutable_kernel();
}
schema::KernelStep& combine(schema::Manifest& m) {
  return *m.mutable_pieces(2)->mutable_steps(0)->mutable_kernel();
}
// In gated_manifest(): the skinny kernel step and the GEMM after it.
schema::KernelStep& gate(schema::Manifest& m) {
  return *m.mutable_pieces(0)->mutable_steps(0)->mutable_kernel();
}
schema::GemmStep& gemm_after_gate(schema::Manifest& m) {
  return *m.mutable_pieces(0)->mutable_steps(1)->mutable_gemm();
}

TEST(ManifestValidate, ValidManifestPasses) {
  Status s = manifest_validate(valid_manifest());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ManifestValidate, FormatVersion) {
  EXPECT_TRUE(broken([](auto& m) { m.set_format_version(99); }, {"format_version 99"}));
}

TEST(ManifestValidate, Config) {
  EXPECT_TRUE(broken([](auto& m) { m.mutable_config()->set_max_size(0); }, {"config.max_size"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_config()->set_mode(schema::CUDA_GRAPH_MODE_UNSPECIFIED); },
             {"config.mode", "unspecified"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_config()->set_mode(static_cast<schema::CudaGraphMode>(42)); },
             {"config.mode", "42"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_config()->set_precision("fp64"); }, {"precision 'fp64'"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_config()->set_cudagraph_capture_sizes(0, 20); },
                     {"cudagraph_capture_sizes", "sorted and unique", "20 is followed by 16"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_config()->set_cudagraph_capture_sizes(1, 4); },
                     {"cudagraph_capture_sizes", "sorted and unique"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_config()->set_cudagraph_capture_sizes(2, 65); },
                     {"cudagraph_capture_sizes[2] = 65", "max_size 64"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_config()->set_compile_sizes(0, 0); },
                     {"compile_sizes[0] = 0"}));
}

TEST(ManifestValidate, Files) {
  EXPECT_TRUE(broken([](auto& m) { m.mutable_files()->DeleteSubrange(0, 1); },
                     {"weights_file 'weights.bin'", "not listed"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_files(0)->set_size(12); },
                     {"weights_file 'weights.bin'", "size 12", "weights_bytes"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_files(0)->set_role(schema::FILE_ROLE_CUBIN); },
                     {"weights_file", "role WEIGHTS"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_files(1)->set_path("../evil.cubin"); },
                     {"files[1]", "../evil.cubin", "safe"}));
  EXPECT_TRUE(broken([](auto& m) { *m.add_files() = m.files(1); }, {"files[2]", "listed twice"}));
  EXPECT_TRUE(broken([](auto& m) { m.set_weights_file(""); }, {"weights_file is empty"}));
}

TEST(ManifestValidate, Buffers) {
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_buffers(2)->set_dtype(static_cast<schema::DType>(77)); },
             {"buffer 2 ('h0')", "dtype"}));
  EXPECT_TRUE(broken(
      [](auto& m) { m.mutable_buffers(2)->set_location(schema::Buffer::LOCATION_UNSPECIFIED); },
      {"buffer 2 ('h0')", "location"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_buffers(3)->set_offset(100); },
                     {"buffer 3 ('h1')", "offset 100", "256-aligned"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_buffers(3)->mutable_dims(0)->set_coef(-1); },
                     {"buffer 3 ('h1')", "negative coefficient"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_buffers(3)->mutable_dims(0)->set_offset(-2); },
                     {"buffer 3 ('h1')", "negative at S=1"}));
  EXPECT_TRUE(broken([](auto& m) { m.set_arena_bytes(m.arena_bytes() - 1); },
                     {"buffer 5 ('zt')", "exceed arena_bytes"}));
  EXPECT_TRUE(broken(
      [](auto& m) { m.mutable_buffers(8)->set_offset((m.weights_bytes() + 255) / 256 * 256); },
      {"buffer 8 ('b2')", "exceed weights_bytes"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_buffers(2)->mutable_dims(1)->set_offset(int64_t{1} << 60); },
             {"buffer 2 ('h0')", "overflows"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_buffers(2)->mutable_dims(0)->set_coef(int64_t{1} << 60); },
             {"buffer 2 ('h0')", "overflows at max_size 64"}));
}

TEST(ManifestValidate, IoBindings) {
  EXPECT_TRUE(broken([](auto& m) { m.mutable_inputs(0)->set_buffer(99); },
                     {"input 0 ('x')", "buffer index 99"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_inputs(0)->set_buffer(6); },
                     {"input 0 ('x')", "buffer 6 ('W')", "not an arena buffer"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_outputs(1)->set_dtype(schema::DTYPE_F16); },
                     {"output 1 ('zt')", "dtype f16", "f32"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_inputs(1)->mutable_dims(0)->set_offset(47); },
                     {"input 1 ('y')", "dim 0 is 47", "buffer 1 ('y')'s is 48"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_inputs(1)->add_dims()->set_offset(1); },
                     {"input 1 ('y')", "3 dims", "has 2"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_inputs(1)->set_size_axis(0); },
                     {"input 1 ('y')", "size_axis is 0", "depends on S is 1"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_outputs(0)->set_size_axis(-1); },
                     {"output 0 ('z')", "size_axis is -1"}));
  EXPECT_TRUE(broken(
      [](auto& m) {
        m.mutable_buffers(1)->mutable_dims(0)->set_coef(1);
        m.mutable_inputs(1)->mutable_dims(0)->set_coef(1);
      },
      {"input 1 ('y')", "dims 0 and 1 both depend on S"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_inputs(1)->set_name("x"); },
                     {"input 1 ('x')", "name used twice"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_inputs(0)->set_name(""); }, {"input 0", "empty name"}));
  EXPECT_TRUE(broken([](auto& m) { m.clear_outputs(); }, {"no outputs"}));
}

TEST(ManifestValidate, ModulesAndKernels) {
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_modules(0)->clear_cubins(); }, {"module 0", "no cubins"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_modules(0)->mutable_cubins(0)->set_path("other.cubin"); },
             {"module 0", "'other.cubin'", "role CUBIN"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_modules(0)->mutable_cubins(0)->set_arch("gfx90a"); },
                     {"module 0", "'gfx90a'"}));
  EXPECT_TRUE(broken([](auto& m) { *m.mutable_modules(0)->add_cubins() = m.modules(0).cubins(0); },
                     {"module 0", "two cubins for arch sm_90"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_kernels(2)->set_module(5); },
                     {"kernel 2 ('combine')", "module index 5"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_kernels(2)->set_symbol(""); }, {"kernel 2", "symbol"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_kernels(1)->set_specialised_size(65); },
                     {"kernel 1 ('add_bias_relu_s16')", "specialised_size 65"}));
}

TEST(ManifestValidate, UnusedEmptyModuleIsFine) {
  schema::Manifest m = valid_manifest();
  m.add_modules();
  Status s = manifest_validate(m);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ManifestValidate, KernelSteps) {
  EXPECT_TRUE(broken([](auto& m) { relu(m).set_kernel(99); },
                     {"piece 1 step 0 (kernel 'relu1')", "kernel index 99"}));
  EXPECT_TRUE(broken([](auto& m) { relu(m).set_kernel(1); },
                     {"kernel 'relu1'", "kernel 1 ('add_bias_relu_s16')", "not a general one"}));
  EXPECT_TRUE(
      broken([](auto& m) { (*relu(m).mutable_specialised())[32] = 1; },
             {"specialised[32]", "kernel 1 ('add_bias_relu_s16') has specialised_size 16"}));
  EXPECT_TRUE(broken([](auto& m) { (*relu(m).mutable_specialised())[16] = 9; },
                     {"specialised[16]", "kernel index 9"}));
  EXPECT_TRUE(broken([](auto& m) { relu(m).mutable_grid()->set_work_per_block(0); },
                     {"kernel 'relu1'", "work_per_block is 0"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).set_block(0); }, {"kernel 'combine2'", "block 0"}));
  EXPECT_TRUE(
      broken([](auto& m) { combine(m).set_block(2048); }, {"kernel 'combine2'", "block 2048"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).mutable_args(1)->set_buffer(99); },
                     {"kernel 'combine2'", "arg 1", "buffer index 99"}));
  EXPECT_TRUE(
      broken([](auto& m) { combine(m).add_args(); }, {"kernel 'combine2'", "arg 7 has no value"}));
  EXPECT_TRUE(
      broken([](auto& m) { combine(m).mutable_grid()->mutable_work()->set_coef(int64_t{1} << 40); },
             {"kernel 'combine2'", "blocks at max_size 64 exceed 2^31-1"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_pieces(2)->add_steps(); },
                     {"piece 2 step 1", "neither a kernel nor a gemm"}));
}

// A valid manifest whose first GEMM has a skinny kernel (a copy of combine2, gated) just before
// it, both at sizes 1 and 4.
schema::Manifest gated_manifest() {
  schema::Manifest m = valid_manifest();
  schema::KernelStep k = combine(m);
  k.set_gated(true);
  k.add_run_sizes(1);
  k.add_run_sizes(4);
  auto* steps = m.mutable_pieces(0)->mutable_steps();
  *steps->Add()->mutable_kernel() = k;
  for (int i = steps->size() - 1; i > 0; --i) steps->SwapElements(i, i - 1);  // to the front
  gemm_after_gate(m).add_skinny_sizes(1);
  gemm_after_gate(m).add_skinny_sizes(4);
  return m;
}

::testing::AssertionResult gated_broken(const std::function<void(schema::Manifest&)>& breaker,
                                        std::initializer_list<std::string> needles) {
  schema::Manifest m = gated_manifest();
  breaker(m);
  return is_error(manifest_validate(m), StatusCode::kInvalidArgument, needles);
}

// KernelStep.gated / GemmStep.skinny_sizes: the pair runs exactly one of its steps at any size.
TEST(ManifestValidate, GatedSkinnyGemmPair) {
  Status s = manifest_validate(gated_manifest());
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(gated_broken([](auto& m) { gemm_after_gate(m).set_skinny_sizes(1, 8); },
                           {"piece 0 step 0", "run_sizes differ"}));
  EXPECT_TRUE(gated_broken(
      [](auto& m) {
        gate(m).set_run_sizes(0, 4);
        gate(m).set_run_sizes(1, 1);
        gemm_after_gate(m).set_skinny_sizes(0, 4);
        gemm_after_gate(m).set_skinny_sizes(1, 1);
      },
      {"piece 0 step 0", "not ascending"}));
  EXPECT_TRUE(gated_broken([](auto& m) { gate(m).set_run_sizes(1, 65); },
                           {"piece 0 step 0", "size 65 is outside [1, max_size 64]"}));
  EXPECT_TRUE(gated_broken([](auto& m) { gate(m).set_gated(false); },
                           {"piece 0 step 0", "run_sizes on a step that is not gated"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).add_skinny_sizes(1); },
                     {"piece 0 step 0", "skinny_sizes without the gated kernel step"}));
  EXPECT_TRUE(broken(
      [](auto& m) {
        combine(m).set_gated(true);
        combine(m).add_run_sizes(1);
      },
      {"piece 2 step 0", "must be followed by the GEMM step it replaces"}));
}

// KernelArg.real_size_ptr: the pointer to the executor's device-resident real size, accepted in
// kernel steps of any piece (graph or attention), always true, at most once per step.
TEST(ManifestValidate, RealSizePointer) {
  schema::Manifest m = valid_manifest();
  relu(m).add_args()->set_real_size_ptr(true);     // an attention piece
  combine(m).add_args()->set_real_size_ptr(true);  // a graph piece
  Status s = manifest_validate(m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(broken([](auto& m) { combine(m).add_args()->set_real_size_ptr(false); },
                     {"kernel 'combine2'", "arg 7", "real_size_ptr is false"}));
  EXPECT_TRUE(broken(
      [](auto& m) {
        combine(m).add_args()->set_real_size_ptr(true);
        combine(m).add_args()->set_real_size_ptr(true);
      },
      {"kernel 'combine2'", "arg 8", "a second real-size pointer (the first is arg 7)"}));
}

TEST(ManifestValidate, TunedLaunches) {
  // A valid decision: at size 16, the specialised kernel with another block.
  auto tuned = [](schema::Manifest& m) -> schema::TunedLaunch& {
    schema::TunedLaunch* t = relu(m).add_tuned();
    t->set_size(16);
    t->set_kernel(1);
    *t->mutable_grid() = relu(m).grid();
    t->mutable_grid()->set_work_per_block(128);
    t->set_block(128);
    t->set_config("block=128");
    t->set_source("autotune");
    return *t;
  };
  schema::Manifest ok = valid_manifest();
  tuned(ok);
  Status s = manifest_validate(ok);
  EXPECT_TRUE(s.ok()) << s.to_string();

  EXPECT_TRUE(broken([&](auto& m) { tuned(m).set_size(65); },
                     {"kernel 'relu1'", "tuned[size 65]", "outside [1, max_size 64]"}));
  EXPECT_TRUE(broken([&](auto& m) { tuned(m).set_kernel(9); },
                     {"tuned[size 16]", "kernel index 9"}));
  EXPECT_TRUE(broken([&](auto& m) { tuned(m).set_kernel(0); },
                     {"tuned[size 16]", "kernel 0 ('add_bias_relu') has specialised_size 0"}));
  EXPECT_TRUE(broken(
      [&](auto& m) {
        tuned(m);
        tuned(m);
      },
      {"tuned[size 16]", "a second decision for the same size"}));
  EXPECT_TRUE(broken([&](auto& m) { tuned(m).set_block(0); }, {"tuned[size 16]", "block 0"}));
  EXPECT_TRUE(broken([&](auto& m) { tuned(m).mutable_grid()->set_work_per_block(0); },
                     {"tuned[size 16]", "work_per_block is 0"}));
  EXPECT_TRUE(broken([&](auto& m) { tuned(m).set_shared_bytes(300 * 1024); },
                     {"tuned[size 16]", "shared_bytes"}));
}

TEST(ManifestValidate, GemmSteps) {
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_a(99); }, {"gemm 'gemm0'", "a buffer index 99"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_d(6); },
                     {"gemm 'gemm0'", "buffer 6 ('W')", "not an arena buffer"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_compute(schema::GEMM_COMPUTE_UNSPECIFIED); },
                     {"gemm 'gemm0'", "compute"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_epilogue(static_cast<schema::GemmEpilogue>(9)); },
                     {"gemm 'gemm0'", "epilogue", "9"}));
  EXPECT_TRUE(
      broken([](auto& m) { gemm(m).set_has_bias(false); }, {"gemm 'gemm0'", "has_bias is false"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_epilogue(schema::GEMM_EPILOGUE_RELU); },
                     {"gemm 'gemm0'", "has_bias is set"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_compute(schema::GEMM_COMPUTE_F16); },
                     {"gemm 'gemm0'", "buffer 0 ('x') of dtype f32", "needs f16"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).mutable_m()->set_coef(0); },
                     {"gemm 'gemm0' at S=1", "must be >= 1"}));
  EXPECT_TRUE(
      broken([](auto& m) { gemm(m).mutable_k()->set_offset(97); },
             {"gemm 'gemm0' at S=1", "operand A needs 97 elements", "buffer 0 ('x') holds 96"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).mutable_batch()->set_offset(2); },
                     {"gemm 'gemm0'", "stride_d 0", "overlap"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).mutable_n()->set_coef(-1); },
                     {"gemm 'gemm0'", "n (", "negative coefficient"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_alpha(std::numeric_limits<float>::quiet_NaN()); },
                     {"gemm 'gemm0'", "alpha is not finite"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_buffers(7)->mutable_dims(0)->set_offset(47); },
                     {"gemm 'gemm0'", "bias buffer 7 ('bias1') holds fewer than N = 48"}));
}

TEST(ManifestValidate, GemmCheckAtSize) {
  schema::Manifest m = valid_manifest();
  EXPECT_TRUE(gemm_step_check_at(m, gemm(m), 37).ok());
  gemm(m).mutable_m()->set_offset(1);  // M = S + 1 rows no longer fit x [S, K]
  EXPECT_TRUE(is_error(gemm_step_check_at(m, gemm(m), 37), StatusCode::kInvalidArgument,
                       {"gemm 'gemm0' at S=37", "operand A"}));
}

TEST(ManifestValidate, CheckSizes) {
  EXPECT_EQ(manifest_check_sizes(valid_manifest()), (std::vector<int64_t>{1, 4, 16, 32, 64}));
}

}  // namespace
}  // namespace kiln::runtime
