// The lowered program: what the graph becomes before buffers get addresses. Steps refer to IR
// values by id; memory_plan gives them arena offsets and artifact_write turns the whole thing
// into the manifest's launch program.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "compiler/ir/ir.h"

namespace kiln::compiler {

// A generated kernel: a C++ parameter list and a body that may use the identifier `S` (the
// run-time size, a `long long`). kernel_codegen wraps it as a general kernel (S a parameter,
// always the last) and one specialised kernel per compile size (S a constexpr). The body may
// use everything in kernels/*.cuh (every module includes all of them).
struct KernelDef {
  std::string symbol;               // set by LowerContext::add_kernel: "<prefix>_<hash>"
  std::vector<std::string> params;  // "const float* __restrict__ in0", ... (without S)
  std::string body;
  uint32_t max_threads = 256;  // __launch_bounds__; every launch's block must be <= this
  // The body calls kiln::kernel_enter() itself, after reading only data no kernel writes (a
  // skinny GEMM's weights), instead of as its first statement (kernels/common.cuh): those reads
  // then overlap the previous kernel under programmatic dependent launch.
  bool enters_itself = false;
};

// kRealSize: a device pointer (`const long long*`) to the request's real size s, which the
// runtime writes before every run; inside a graph captured at the padded size P, it is how a
// kernel tells real rows from padding (manifest: KernelArg.real_size_ptr).
// kKv: a device pointer into the runtime's paged KV cache (generation programs; manifest:
// KvArg): a layer's key or value cache, or one of the per-step buffers. Values as KvArg.Kind.
enum class KvRef {
  kKeyCache = 1,
  kValueCache = 2,
  kBlockTables = 3,
  kContextLens = 4,
  kSlotMapping = 5
};

struct KernelArgRef {
  enum class Kind { kValue, kSize, kI64, kF32, kRealSize, kKv };
  Kind kind = Kind::kValue;
  int value = -1;  // IR value id for kValue
  int64_t i64 = 0;  // kI64; the layer for kKv's caches
  float f32 = 0.0f;
  KvRef kv = KvRef::kKeyCache;  // kKv
  static KernelArgRef tensor(int v) { return {Kind::kValue, v}; }
  static KernelArgRef size() { return {Kind::kSize}; }
  static KernelArgRef imm_i64(int64_t x) { return {Kind::kI64, -1, x}; }
  static KernelArgRef imm_f32(float x) { return {Kind::kF32, -1, 0, x}; }
  static KernelArgRef real_size() { return {Kind::kRealSize}; }
  static KernelArgRef kv_cache(KvRef r, int64_t layer = 0) {
    return {Kind::kKv, -1, layer, 0.0f, r};
  }
};

// Another launch configuration of a KernelLaunch's computation: the same arguments
// (`def.params` identical to the default kernel's, same order and types), another kernel text
// and geometry — a block size, vector width, rows per block or tile shape. Family codegen offers
// candidates; the autotuner (compiler/autotune/kernel_autotune.h) times them against the default
// at each compile size and records a winner in KernelLaunch::tuned, which the artifact carries
// as a kernel specialised for that size only. A candidate must be correct for every S (it is
// compiled specialised, but the same rules as the default apply).
struct LaunchCandidate {
  // Names the configuration in the family's terms, "key=value" pairs joined by spaces
  // ("block=128 vec=4", "tiles=4x2x64 q=regs"). Stable across compiles: the tuning database
  // records the winner by it. Unique among a launch's candidates and different from the
  // launch's own `config`.
  std::string config;
  KernelDef def;  // symbol empty: named when the candidate is compiled (candidate_symbol)
  ir::DimExpr work;
  uint32_t work_per_block = 256;
  ir::DimExpr grid_y = ir::DimExpr::constant(1);
  uint32_t block = 256;  // <= def.max_threads
  uint32_t shared_bytes = 0;
};

// A tuning decision for one compile size.
struct TunedChoice {
  int candidate = -1;    // index into KernelLaunch::candidates; -1: the default was fastest
  std::string source;    // "autotune", "tuning-db", "heuristic" (decided by the lowering, never
                         // timed: the paged decode's split configuration) or "forced" (tests)
  double ms = 0;         // measured time of the choice (0 when forced)
  double default_ms = 0; // measured time of the default
};

// Launch geometry: grid.x = ceil(work(S) / work_per_block) (a launch with zero blocks is
// skipped), grid.y = grid_y(S) (must be >= 1 for every S in [1, max_size]).
struct KernelLaunch {
  int kernel = -1;                 // index into LoweredProgram::kernels
  std::vector<KernelArgRef> args;  // matches KernelDef::params, then kSize last
  ir::DimExpr work;
  uint32_t work_per_block = 256;
  ir::DimExpr grid_y = ir::DimExpr::constant(1);
  uint32_t block = 256;
  uint32_t shared_bytes = 0;  // dynamic shared memory; the runtime raises the >48 KiB limit
  std::string nodes;          // IR node names, for diagnostics
  // The default configuration's name, in the terms its candidates use ("block=256 vec=4");
  // empty when the launch has no candidates.
  std::string config;
  std::vector<LaunchCandidate> candidates;  // alternatives to the default; may be empty
  std::map<int64_t, TunedChoice> tuned;     // by compile size; set by the autotuner
  // Size gating: when set, the launch runs only at these padded sizes (ascending; may become
  // empty) and is skipped at every other. A skinny GEMM kernel is gated to the sizes where it
  // replaces the cuBLASLt step that follows it (GemmLaunch::skinny_sizes, the same list).
  std::optional<std::vector<int64_t>> run_sizes;
  // Runs only where the GEMM step right before it runs on cuBLASLt (skipped at that step's
  // skinny_sizes): a gated GEMM's epilogue, which its skinny kernel applies itself.
  bool after_cublaslt = false;
  // Runs only where the GEMM step after it (next, or after its skinny kernel) runs on cuBLASLt:
  // a norm whose skinny kernel applies it as a prologue.
  bool before_cublaslt = false;
  // Route gating (manifest: KernelStep.skip_on_decode / decode_only / route_sizes): at the
  // padded sizes in route_sizes, a skip_on_decode launch does not run on the runtime's decode
  // route and a decode_only one runs only there. The paged KV append and the plain split
  // attention kernel are skipped where a decode split kernel with PagedAttnSpec::decode_fresh
  // appends itself.
  bool skip_on_decode = false;
  bool decode_only = false;
  std::vector<int64_t> route_sizes;
};

// What cuBLASLt applies after D = alpha * op(A) op(B) + beta * C: a bias row broadcast over
// D's rows, then an activation.
enum class Epilogue { kNone, kBias, kRelu, kBiasRelu, kGelu, kBiasGelu };

struct GemmLaunch {
  int a = -1, b = -1, d = -1, bias = -1;  // IR value ids; bias -1 when absent
  int c = -1;          // optional addend C (same shape as D, e.g. a residual); -1 when absent
  float beta = 0.0f;   // scale of C (1 for a residual add)
  ir::DimExpr m, n, k;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f;
  Epilogue epilogue = Epilogue::kNone;
  ir::DimExpr batch = ir::DimExpr::constant(1);
  ir::DimExpr stride_a, stride_b, stride_d;  // elements; 0 broadcasts (C uses D's stride)
  std::string nodes;
  // Padded sizes at which the kernel launch just before this step (a skinny GEMM, gated with
  // KernelLaunch::run_sizes to the same list) computes this GEMM instead of cuBLASLt.
  std::vector<int64_t> skinny_sizes;
};

using LaunchStep = std::variant<KernelLaunch, GemmLaunch>;

struct LoweredPiece {
  bool is_attention = false;  // a splitting op's piece: eager between graph replays (PIECEWISE)
  std::string hash;           // graph_split's structural hash
  size_t first_step = 0;      // steps [first_step, next piece's first_step)
};

struct LoweredProgram {
  std::vector<KernelDef> kernels;  // deduplicated: identical definitions appear once
  std::vector<LaunchStep> steps;   // in execution order
  std::vector<LoweredPiece> pieces;  // in order; empty pieces (no steps) are kept
  // Views: value -> the value whose buffer it shares (a Reshape's output shares its input's).
  // Steps only ever name base values; the map is kept for diagnostics and the memory plan.
  std::map<int, int> aliases;
};

// Every IR value a step reads or writes, in argument order.
std::vector<int> step_values(const LaunchStep& step);

}  // namespace kiln::compiler
