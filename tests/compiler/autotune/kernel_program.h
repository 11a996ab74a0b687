// A hand-written lowered program for the kernel autotuner's tests: y = 2·x over [S, 1024] f32,
// one launch, a default configuration and three candidates — two that compute the same thing
// (another block size; one block doing all the work, slow) and one that is wrong (y = 3·x), which
// the tuner must reject. Independent of any kernel family's codegen.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include "compiler/backend/launch_plan.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler::testing {

struct ScaleProgram {
  ir::Graph graph;
  LoweredProgram program;
  KernelLaunch& launch() { return std::get<KernelLaunch>(program.steps[0]); }
};

inline KernelDef scale_kernel(float factor, uint32_t max_threads) {
  KernelDef d;
  d.params = {"const float* __restrict__ x", "float* __restrict__ y"};
  d.body = "  const long long n = S * 1024LL;\n"
           "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
           "       i += (long long)gridDim.x * blockDim.x)\n"
           "    y[i] = x[i] * " +
           std::to_string(factor) + "f;\n";
  d.max_threads = max_threads;
  return d;
}

inline ScaleProgram scale_program() {
  ScaleProgram p;
  for (const char* name : {"x", "y"}) {
    ir::Value v;
    v.name = name;
    v.dtype = DType::kF32;
    v.shape = {ir::DimExpr::size(), ir::DimExpr::constant(1024)};
    p.graph.add_value(std::move(v));
  }
  p.graph.inputs = {0};
  p.graph.outputs = {1};
  KernelDef def = scale_kernel(2.0f, 256);
  def.symbol = "kiln_test_scale_0123456789abcdef";
  p.program.kernels.push_back(def);
  p.program.steps.emplace_back(std::in_place_type<KernelLaunch>);
  KernelLaunch& l = p.launch();
  l.kernel = 0;
  l.args = {KernelArgRef::tensor(0), KernelArgRef::tensor(1), KernelArgRef::size()};
  l.work = ir::DimExpr::size(1024);
  l.work_per_block = 256;
  l.block = 256;
  l.nodes = "scale";
  l.config = "block=256";
  auto candidate = [](std::string config, float factor, uint32_t block, uint32_t per_block,
                      uint32_t max_threads) {
    LaunchCandidate c;
    c.config = std::move(config);
    c.def = scale_kernel(factor, max_threads);
    c.work = ir::DimExpr::size(1024);
    c.work_per_block = per_block;
    c.block = block;
    return c;
  };
  l.candidates.push_back(candidate("block=128", 2.0f, 128, 128, 128));
  l.candidates.push_back(candidate("block=32 blocks=1", 2.0f, 32, 1u << 30, 32));
  l.candidates.push_back(candidate("block=256 wrong=1", 3.0f, 256, 256, 256));
  p.program.pieces.push_back(LoweredPiece{false, "h", 0});
  return p;
}

}  // namespace kiln::compiler::testing
