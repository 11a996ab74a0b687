// A real artifact (the example model, tests/models/mlp_softmax, compiled by the pipeline) whose
// manifest an attacker with write access to the cache re-encodes, checksum and all: the load
// plan (verify, then manifest validation, before any CUDA call) must refuse each edit the issue
// names, against the signatures the compiler put in the kernels' symbols
// (cache/kernel_signature.h); and the untouched artifact must pass, so the compiler's declared
// extents and the runtime's checks agree. CPU only.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "cache/dtype.h"
#include "cache/kernel_signature.h"
#include "cache/manifest_io.h"
#include "runtime/dim_math.h"
#include "tests/cache/example_compile.h"
#include "tests/runtime/expect_error.h"

namespace kiln::runtime {
namespace {

namespace fs = std::filesystem;

// A kernel step's argument bound to a pointer parameter, with what the signature says of it.
struct PointerArg {
  int piece = -1, step = -1, arg = -1;
  cache::KernelParam param;
};

class ArtifactTamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto out = compiler::compile_model(kiln::testing::example_request(tmp_.path()));
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    dir_ = out->artifact_dir;
    auto m = kiln::testing::load_plan(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    manifest_ = *m;
  }

  schema::KernelStep& kernel_step(schema::Manifest& m, const PointerArg& p) {
    return *m.mutable_pieces(p.piece)->mutable_steps(p.step)->mutable_kernel();
  }

  // Every buffer argument of every kernel step, with its parameter.
  std::vector<PointerArg> pointer_args() const {
    std::vector<PointerArg> out;
    for (int p = 0; p < manifest_.pieces_size(); ++p)
      for (int i = 0; i < manifest_.pieces(p).steps_size(); ++i) {
        const auto& step = manifest_.pieces(p).steps(i);
        if (!step.has_kernel()) continue;
        const auto& k = step.kernel();
        auto parts =
            cache::kernel_symbol_parse(manifest_.kernels(static_cast<int>(k.kernel())).symbol());
        EXPECT_TRUE(parts.ok()) << parts.status().to_string();
        if (!parts.ok()) continue;
        for (int j = 0; j < k.args_size(); ++j)
          if (k.args(j).has_buffer())
            out.push_back({p, i, j, parts->signature.params[static_cast<size_t>(j)]});
      }
    return out;
  }

  // Writes `m` as the artifact's manifest (a valid frame and checksum: what a re-encoding
  // attacker writes) and runs the load plan on it.
  Status load_with(const schema::Manifest& m) {
    std::ofstream f(dir_ / cache::kManifestFileName, std::ios::binary | std::ios::trunc);
    f << cache::manifest_encode(m);
    f.close();
    if (!f) return io_error("cannot write the manifest");
    return kiln::testing::load_plan(dir_).status();
  }

  // The load plan refuses `m`, naming all `needles`.
  ::testing::AssertionResult refused(const schema::Manifest& m,
                                     std::initializer_list<std::string> needles) {
    return testing::is_error(load_with(m), StatusCode::kInvalidArgument, needles);
  }

  int weights_buffer() const {
    for (int b = 0; b < manifest_.buffers_size(); ++b)
      if (manifest_.buffers(b).location() == schema::Buffer::LOCATION_WEIGHTS) return b;
    return -1;
  }

  kiln::testing::TempDir tmp_;
  fs::path dir_;
  schema::Manifest manifest_;
};

TEST_F(ArtifactTamperTest, CompiledArtifactCarriesSignaturesAndValidates) {
  int extents = 0, writable = 0;
  for (const auto& k : manifest_.kernels()) {
    auto parts = cache::kernel_symbol_parse(k.symbol());
    ASSERT_TRUE(parts.ok()) << parts.status().to_string();
    EXPECT_EQ(parts->specialised, k.specialised_size()) << k.symbol();
  }
  for (const PointerArg& p : pointer_args()) {
    extents += p.param.extent.has_value();
    writable += p.param.kind == cache::ParamKind::kWritePtr;
  }
  EXPECT_GT(extents, 0);
  EXPECT_GT(writable, 0);
  // Re-encoded unchanged, it still loads: the refusals below are the edits', not the writing's.
  Status s = load_with(manifest_);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// (a) A pointer argument retargeted to an integer.
TEST_F(ArtifactTamperTest, PointerArgumentAsI64) {
  const auto args = pointer_args();
  ASSERT_FALSE(args.empty());
  schema::Manifest m = manifest_;
  kernel_step(m, args[0]).mutable_args(args[0].arg)->set_i64(0x7f0000000000);
  EXPECT_TRUE(refused(m, {"arg " + std::to_string(args[0].arg) +
                          " is an i64, but the kernel "
                          "declares"}));
}

// (b) The bytes a kernel may touch beyond its buffer: the buffer shrunk.
// (d) The same with arena_bytes shrunk to fit the buffers, so every buffer is inside the arena.
TEST_F(ArtifactTamperTest, BufferShrunkBelowTheKernelsExtentAloneAndWithTheArena) {
  // A buffer (not model I/O) that a kernel step binds where an extent is declared, before any
  // other step uses it: validation, in program order, meets it there first.
  std::set<uint32_t> seen;
  for (const auto& io : manifest_.inputs()) seen.insert(io.buffer());
  for (const auto& io : manifest_.outputs()) seen.insert(io.buffer());
  std::optional<PointerArg> target;
  const auto args = pointer_args();
  for (int p = 0; p < manifest_.pieces_size() && !target; ++p)
    for (int i = 0; i < manifest_.pieces(p).steps_size() && !target; ++i) {
      const auto& step = manifest_.pieces(p).steps(i);
      if (step.has_gemm()) {
        const auto& g = step.gemm();
        for (uint32_t b : {g.a(), g.b(), g.d(), g.bias(), g.c()}) seen.insert(b);
        continue;
      }
      for (const PointerArg& a : args) {
        if (a.piece != p || a.step != i) continue;
        const uint32_t b = step.kernel().args(a.arg).buffer();
        const auto& dims = manifest_.buffers(static_cast<int>(b)).dims();
        if (!target && a.param.extent && seen.count(b) == 0 && !dims.empty() &&
            dims[dims.size() - 1].offset() > 1)
          target = a;
      }
      for (const auto& arg : step.kernel().args())
        if (arg.has_buffer()) seen.insert(arg.buffer());
    }
  ASSERT_TRUE(target.has_value()) << "no buffer a kernel step binds first with a declared extent";
  const uint32_t b =
      manifest_.pieces(target->piece).steps(target->step).kernel().args(target->arg).buffer();
  schema::Manifest m = manifest_;
  auto* last = m.mutable_buffers(static_cast<int>(b))
                   ->mutable_dims(m.buffers(static_cast<int>(b)).dims_size() - 1);
  last->set_offset(last->offset() - 1);
  EXPECT_TRUE(refused(m, {buffer_label(m, b), "the kernel may touch"}));

  // (d): arena_bytes down to the end of the last arena buffer at max_size.
  uint64_t end = 0;
  for (const auto& buf : m.buffers()) {
    if (buf.location() != schema::Buffer::LOCATION_ARENA) continue;
    auto n = dims_numel(buf.dims(), m.config().max_size());
    ASSERT_TRUE(n.has_value());
    end = std::max<uint64_t>(end, buf.offset() + static_cast<uint64_t>(*n) *
                                                     dtype_size(static_cast<DType>(buf.dtype())));
  }
  ASSERT_LE(end, m.arena_bytes());
  m.set_arena_bytes(end);
  EXPECT_TRUE(refused(m, {buffer_label(m, b), "the kernel may touch"}));
}

// (c) A weights buffer as a kernel's writable argument, and as a GEMM's output.
TEST_F(ArtifactTamperTest, WeightsWrittenByAKernelOrAGemm) {
  const int w = weights_buffer();
  ASSERT_GE(w, 0);
  std::optional<PointerArg> out;
  for (const PointerArg& p : pointer_args())
    if (p.param.kind == cache::ParamKind::kWritePtr) {
      out = p;
      break;
    }
  ASSERT_TRUE(out.has_value());
  schema::Manifest m = manifest_;
  kernel_step(m, *out).mutable_args(out->arg)->set_buffer(static_cast<uint32_t>(w));
  EXPECT_TRUE(refused(
      m, {"arg " + std::to_string(out->arg) + " is " + buffer_label(m, static_cast<uint32_t>(w)) +
          " in the weights, but the kernel writes it"}));

  m = manifest_;
  bool gemm = false;
  for (auto& piece : *m.mutable_pieces())
    for (auto& step : *piece.mutable_steps())
      if (step.has_gemm() && !gemm) {
        step.mutable_gemm()->set_d(static_cast<uint32_t>(w));
        gemm = true;
      }
  ASSERT_TRUE(gemm) << "the example model has a GEMM";
  EXPECT_TRUE(
      refused(m, {"d is " + buffer_label(m, static_cast<uint32_t>(w)), "not an arena buffer"}));
}

}  // namespace
}  // namespace kiln::runtime
