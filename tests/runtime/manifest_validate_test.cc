// Starts from a valid hand-built manifest and breaks one field class at a time.
#include "runtime/manifest_validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>

#include "cache/kernel_signature.h"
#include "cache/manifest_io.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/test_model.h"
#include "tests/support/source_root.h"

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

// Appends a parameter of `kind` to kernel `index`'s signature (its symbol), keeping "_s<size>":
// the kernel a test's extra argument needs.
void add_param(schema::Manifest& m, int index, cache::ParamKind kind) {
  auto parts = cache::kernel_symbol_parse(m.kernels(index).symbol());
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  parts->signature.params.push_back({kind, std::nullopt});
  std::string symbol = cache::kernel_symbol_with_signature(parts->base, parts->signature);
  if (parts->specialised != 0) symbol += "_s" + std::to_string(parts->specialised);
  m.mutable_kernels(index)->set_symbol(symbol);
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
  // Block digests: one per block of the file's size, at a sane block size.
  EXPECT_TRUE(broken([](auto& m) { m.mutable_files(0)->add_block_xxh3(7); },
                     {"files[0] ('weights.bin')", "block_xxh3 has"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_files(0)->set_block_bytes(12345); },
                     {"files[0] ('weights.bin')", "block_bytes 12345 is not a power of two"}));
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
                     {"kernel 2 ('combine__K", "module index 5"}));
  EXPECT_TRUE(
      broken([](auto& m) { m.mutable_kernels(2)->set_symbol(""); }, {"kernel 2", "symbol"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_kernels(1)->set_specialised_size(65); },
                     {"kernel 1 ('add_bias_relu__K", "_s16')", "specialised_size 65"}));
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
                     {"kernel 'relu1'", "kernel 1 ('add_bias_relu__K", "not a general one"}));
  EXPECT_TRUE(
      broken([](auto& m) { (*relu(m).mutable_specialised())[32] = 1; },
             {"specialised[32]", "kernel 1 ('add_bias_relu__K", "_s16') has specialised_size 16"}));
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

// KernelStep.after_cublaslt (a gated GEMM's epilogue): right after a GEMM step, never gated.
TEST(ManifestValidate, AfterCublasltFollowsAGemmStep) {
  schema::Manifest m = gated_manifest();
  schema::KernelStep k = combine(m);
  k.set_after_cublaslt(true);
  auto* steps = m.mutable_pieces(0)->mutable_steps();
  *steps->Add()->mutable_kernel() = k;
  for (int i = steps->size() - 1; i > 2; --i) steps->SwapElements(i, i - 1);  // after the GEMM
  ASSERT_TRUE(m.pieces(0).steps(1).has_gemm());
  Status s = manifest_validate(m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  schema::Manifest gated = m;
  gated.mutable_pieces(0)->mutable_steps(2)->mutable_kernel()->set_gated(true);
  EXPECT_TRUE(is_error(manifest_validate(gated), StatusCode::kInvalidArgument,
                       {"piece 0 step 2", "after_cublaslt on a gated step"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).set_after_cublaslt(true); },
                     {"piece 2 step 0", "does not follow a GEMM step"}));
}

// KernelStep.before_cublaslt (a norm its GEMM's skinny kernel applies itself): before a GEMM
// step, directly or past the GEMM's gated kernel step; never gated.
TEST(ManifestValidate, BeforeCublasltPrecedesAGemmStep) {
  schema::Manifest m = gated_manifest();
  schema::KernelStep k = combine(m);
  k.set_before_cublaslt(true);
  auto* steps = m.mutable_pieces(0)->mutable_steps();
  *steps->Add()->mutable_kernel() = k;
  for (int i = steps->size() - 1; i > 0; --i) steps->SwapElements(i, i - 1);  // to the front
  ASSERT_TRUE(m.pieces(0).steps(1).kernel().gated() && m.pieces(0).steps(2).has_gemm());
  Status s = manifest_validate(m);
  EXPECT_TRUE(s.ok()) << s.to_string();
  schema::Manifest gated = m;
  gated.mutable_pieces(0)->mutable_steps(0)->mutable_kernel()->set_gated(true);
  EXPECT_TRUE(is_error(manifest_validate(gated), StatusCode::kInvalidArgument,
                       {"piece 0 step 0", "before_cublaslt on a gated step"}));
  schema::Manifest both = m;
  both.mutable_pieces(0)->mutable_steps(0)->mutable_kernel()->set_after_cublaslt(true);
  EXPECT_TRUE(is_error(manifest_validate(both), StatusCode::kInvalidArgument,
                       {"piece 0 step 0", "after_cublaslt and before_cublaslt"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).set_before_cublaslt(true); },
                     {"piece 2 step 0", "not followed by a GEMM step"}));
}

// KernelArg.real_size_ptr: the pointer to the executor's device-resident real size, accepted in
// kernel steps of any piece (graph or attention), always true, at most once per step.
TEST(ManifestValidate, RealSizePointer) {
  schema::Manifest m = valid_manifest();
  for (int k : {0, 1, 2}) add_param(m, k, cache::ParamKind::kReadPtr);
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
  EXPECT_TRUE(
      broken([&](auto& m) { tuned(m).set_kernel(9); }, {"tuned[size 16]", "kernel index 9"}));
  EXPECT_TRUE(broken([&](auto& m) { tuned(m).set_kernel(0); },
                     {"tuned[size 16]", "kernel 0 ('add_bias_relu__K", "has specialised_size 0"}));
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

// Tampering with the launch program against the kernels' signatures (cache/kernel_signature.h):
// the test kernels carry add_bias_relu(r, r, w, l) and combine(r, r, w, w, f, l, l), each
// [S, 48] / [N, S] f32 pointer declaring 192*S bytes, b2 192 bytes.

// (a) An argument of another kind than the kernel's parameter.
TEST(ManifestValidate, TamperedArgumentKinds) {
  const std::string step = "piece 2 step 0 (kernel 'combine2'), kernel 2 ('combine__K";
  EXPECT_TRUE(broken([](auto& m) { combine(m).mutable_args(0)->set_i64(0x1000); },
                     {step, "arg 0 is an i64, but the kernel declares a read-only pointer"}));
  EXPECT_TRUE(broken([](auto& m) { relu(m).mutable_args(0)->set_size(true); },
                     {"kernel 'relu1'",
                      "arg 0 is the size (int64), but the kernel declares a "
                      "read-only pointer"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).mutable_args(5)->set_buffer(2); },
                     {step, "arg 5 is buffer 2 ('h0'), but the kernel declares a 64-bit integer"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).mutable_args(4)->set_i64(1); },
                     {step, "arg 4 is an i64, but the kernel declares a float"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).mutable_args(2)->set_f32(1.0f); },
                     {step, "arg 2 is an f32, but the kernel declares a writable pointer"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).mutable_args()->RemoveLast(); },
                     {step, "passes 6 arguments, the kernel's signature has 7 parameters"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).add_args()->set_i64(1); },
                     {step, "passes 8 arguments, the kernel's signature has 7 parameters"}));
  EXPECT_TRUE(broken(
      [](auto& m) {
        add_param(m, 2, cache::ParamKind::kWritePtr);
        combine(m).add_args()->set_real_size_ptr(true);
      },
      {step,
       "arg 7 is the real-size pointer (const int64*), but the kernel declares a writable "
       "pointer"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_kernels(2)->set_symbol("combine"); },
                     {"kernel 2 ('combine')", "no parameter signature"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_kernels(2)->set_symbol("combine__Krrwwfl2"); },
                     {"kernel 2 ('combine__Krrwwfl2')", "unknown code '2'"}));
  // Another signature that parses: the step's arguments no longer fit it.
  EXPECT_TRUE(broken([](auto& m) { m.mutable_kernels(2)->set_symbol("combine__Krrwwlll"); },
                     {"kernel 'combine2'",
                      "arg 4 is an f32, but the kernel declares a 64-bit "
                      "integer"}));
}

// (b) A buffer smaller than the bytes the kernel may touch; a declared extent raised.
TEST(ManifestValidate, TamperedExtents) {
  EXPECT_TRUE(broken([](auto& m) { m.mutable_buffers(3)->mutable_dims(1)->set_offset(47); },
                     {"kernel 'relu1'", "arg 2",
                      "buffer 3 ('h1') holds 188 bytes at S=1, the kernel may touch 192"}));
  EXPECT_TRUE(broken([](auto& m) { m.mutable_buffers(8)->mutable_dims(0)->set_offset(47); },
                     {"kernel 'relu1'", "arg 1",
                      "buffer 8 ('b2') holds 188 bytes at S=1, the kernel may touch 192"}));
  // The symbol claims a larger extent for b2: the specialised kernel no longer matches, and
  // with both renamed the buffer is too small. (On a GPU the cubin has no such symbol at all.)
  auto raise_b2 = [](schema::Manifest& m, int index) {
    auto parts = cache::kernel_symbol_parse(m.kernels(index).symbol());
    ASSERT_TRUE(parts.ok());
    parts->signature.params[1].extent = cache::ParamExtent{0, 196};
    m.mutable_kernels(index)->set_symbol(
        cache::kernel_symbol_with_signature(parts->base, parts->signature) +
        (parts->specialised != 0 ? "_s" + std::to_string(parts->specialised) : ""));
  };
  EXPECT_TRUE(broken([&](auto& m) { raise_b2(m, 0); },
                     {"kernel 'relu1'", "specialised[16]", "not a variant of the step's kernel"}));
  EXPECT_TRUE(broken(
      [&](auto& m) {
        raise_b2(m, 0);
        raise_b2(m, 1);
      },
      {"kernel 'relu1'", "arg 1",
       "buffer 8 ('b2') holds 192 bytes at S=1, the kernel may touch 196"}));
  // More work and a larger output buffer: the buffer no longer fits the arena.
  EXPECT_TRUE(broken(
      [](auto& m) {
        combine(m).mutable_grid()->mutable_work()->set_coef(96);
        m.mutable_buffers(5)->mutable_dims(0)->set_offset(96);
      },
      {"buffer 5 ('zt')", "exceed arena_bytes"}));
}

// (c) Weights are read-only to every kernel and every GEMM output.
TEST(ManifestValidate, TamperedWeightsWrites) {
  EXPECT_TRUE(broken([](auto& m) { relu(m).mutable_args(2)->set_buffer(8); },
                     {"kernel 'relu1'",
                      "arg 2 is buffer 8 ('b2') in the weights, but the kernel "
                      "writes it"}));
  EXPECT_TRUE(broken([](auto& m) { combine(m).mutable_args(3)->set_buffer(6); },
                     {"kernel 'combine2'",
                      "arg 3 is buffer 6 ('W') in the weights, but the "
                      "kernel writes it"}));
  EXPECT_TRUE(gated_broken([](auto& m) { gate(m).mutable_args(2)->set_buffer(6); },
                           {"piece 0 step 0", "arg 2 is buffer 6 ('W') in the weights"}));
  EXPECT_TRUE(broken([](auto& m) { gemm(m).set_d(7); },
                     {"gemm 'gemm0'", "d is buffer 7 ('bias1') which is not an arena buffer"}));
  // Reading weights through a read-only pointer is what kernels do.
  schema::Manifest m = valid_manifest();
  combine(m).mutable_args(1)->set_buffer(6);  // W holds 18432 bytes, more than y at S=64
  Status s = manifest_validate(m);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// (d) Buffers and arena_bytes shrunk together: each buffer still fits the arena, but no longer
// holds what the kernel writes.
TEST(ManifestValidate, TamperedBuffersAndArenaShrunkTogether) {
  EXPECT_TRUE(broken(
      [](auto& m) {
        m.mutable_buffers(5)->mutable_dims(0)->set_offset(24);  // zt, the last arena buffer
        m.mutable_outputs(1)->mutable_dims(0)->set_offset(24);
        m.set_arena_bytes(m.arena_bytes() - 24 * 64 * 4);
      },
      {"kernel 'combine2'", "arg 3",
       "buffer 5 ('zt') holds 96 bytes at S=1, the kernel may "
       "touch 192"}));
}

// Specialised and tuned kernels are variants of the step's kernel: same base and signature, and
// named for the size they are used at.
TEST(ManifestValidate, VariantsCarryTheStepsSignature) {
  const std::string relu_symbol = testing::test_symbol(TestModelSpec{}, "add_bias_relu");
  EXPECT_TRUE(broken([&](auto& m) { m.mutable_kernels(1)->set_symbol(relu_symbol + "_s32"); },
                     {"kernel 1 ('add_bias_relu__K",
                      "the symbol is for size 32 (0: general) but "
                      "specialised_size is 16"}));
  EXPECT_TRUE(
      broken([&](auto& m) { m.mutable_kernels(0)->set_symbol(relu_symbol + "_v0123456789abcdef"); },
             {"kernel 'relu1'", "a tuned candidate ('_v'), not a general kernel"}));
  auto add_tuned = [](schema::Manifest& m, const std::string& symbol) {
    auto* k = m.add_kernels();
    k->set_symbol(symbol);
    k->set_specialised_size(16);
    schema::TunedLaunch* t = relu(m).add_tuned();
    t->set_size(16);
    t->set_kernel(static_cast<uint32_t>(m.kernels_size() - 1));
    *t->mutable_grid() = relu(m).grid();
    t->set_block(128);
  };
  schema::Manifest ok = valid_manifest();
  add_tuned(ok, relu_symbol + "_v0123456789abcdef_s16");
  Status s = manifest_validate(ok);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(broken([&](auto& m) { add_tuned(m, "add_bias_relu__Krrwl_v0123456789abcdef_s16"); },
                     {"tuned[size 16]", "not a variant of the step's kernel"}));
  EXPECT_TRUE(broken([&](auto& m) { add_tuned(m, "other__Krrwl_s16"); },
                     {"tuned[size 16]", "not a variant of the step's kernel"}));
}

// buffer_extent_check on a buffer whose bytes are quadratic in S (two dims depend on S): a
// linear extent below its tangent at S = 1 passes; one that exceeds the buffer somewhere in
// (1, max_size) is refused even though it fits at both ends.
TEST(ManifestValidate, ExtentOfAQuadraticBuffer) {
  schema::Manifest m = valid_manifest();
  m.mutable_buffers(3)->mutable_dims(1)->set_coef(1);  // h1 [S, S+48]
  // 4*S*(S+48) bytes: its tangent at S=1 is 200*S-4.
  EXPECT_TRUE(buffer_extent_check(m, 3, {200, -4}, "here").ok());
  EXPECT_TRUE(buffer_extent_check(m, 3, {192, 0}, "here").ok());
  // 448*S-252 is 196 at S=1 and 28420 <= 28672 at S=64, but 14084 > 10240 at S=32.
  EXPECT_TRUE(is_error(buffer_extent_check(m, 3, {448, -252}, "here"), StatusCode::kInvalidArgument,
                       {"here", "buffer 3 ('h1')", "at S=64", "a lower bound"}));
}

TEST(ManifestValidate, CheckSizes) {
  EXPECT_EQ(manifest_check_sizes(valid_manifest()), (std::vector<int64_t>{1, 4, 16, 32, 64}));
}

}  // namespace
}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

// The manifest fuzz target's seeds (fuzz/corpus/manifest: payloads of compiled artifacts) are
// manifests this kiln reads and validates: after a format change they must be recompiled, or
// fuzzing would stop at the first check instead of reaching the validator.
TEST(ManifestValidate, FuzzSeedsAreValidManifests) {
  const std::filesystem::path dir = kiln::testing::source_root() / "fuzz" / "corpus" / "manifest";
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string payload((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    Result<schema::Manifest> m =
        cache::manifest_decode(cache::manifest_frame(payload), e.path().string());
    ASSERT_TRUE(m.ok()) << m.status().to_string() << " (recompile the seed: fuzz/README.md)";
    EXPECT_TRUE(manifest_validate(*m).ok())
        << e.path() << ": " << manifest_validate(*m).to_string();
    ++seen;
  }
  EXPECT_GE(seen, 3);
}

}  // namespace
}  // namespace kiln::runtime
