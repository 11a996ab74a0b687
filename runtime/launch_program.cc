#include "runtime/launch_program.h"

#include <array>
#include <string>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/dim_math.h"
#include "runtime/kv_cache_device.h"
#include "runtime/size_gate.h"

namespace kiln::runtime {
namespace {

union ArgSlot {
  void* ptr;
  int64_t i64;
  float f32;
};

// What one launch of a step at a size uses: the kernel and its geometry (the step's defaults,
// or the tuned configuration for that size).
struct LaunchShape {
  uint32_t kernel = 0;
  const schema::Grid* grid = nullptr;
  uint32_t block = 0;
  uint32_t shared_bytes = 0;
};

LaunchShape launch_shape(const schema::KernelStep& k, int64_t p) {
  for (const auto& t : k.tuned())
    if (t.size() == static_cast<uint64_t>(p)) return {t.kernel(), &t.grid(), t.block(), t.shared_bytes()};
  uint32_t index = k.kernel();
  if (auto it = k.specialised().find(static_cast<uint32_t>(p)); it != k.specialised().end())
    index = it->second;
  return {index, &k.grid(), k.block(), k.shared_bytes()};
}

// The device pointer of a KV argument (validated: the kind is known, the layer in range).
void* kv_pointer(const KvCacheDevice& kv, const schema::KvArg& a) {
  switch (a.kind()) {
    case schema::KvArg::KIND_KEY_CACHE:
      return kv.key_cache(a.layer());
    case schema::KvArg::KIND_VALUE_CACHE:
      return kv.value_cache(a.layer());
    case schema::KvArg::KIND_BLOCK_TABLES:
      return kv.block_tables();
    case schema::KvArg::KIND_CONTEXT_LENS:
      return kv.context_lens();
    case schema::KvArg::KIND_SLOT_MAPPING:
      return kv.slot_mapping();
    default:
      return nullptr;
  }
}

std::string launch_label(const schema::Manifest& m, const LaunchShape& l,
                         const schema::KernelStep& k, int64_t blocks, int64_t p) {
  return "kernel '" + m.kernels(static_cast<int>(l.kernel)).symbol() + "' of step '" + k.node() +
         "' (grid " + std::to_string(blocks) + ", block " + std::to_string(l.block) +
         ", shared " + std::to_string(l.shared_bytes) + " bytes, size " + std::to_string(p) + ")";
}

Status kernel_launch(const LaunchContext& ctx, const schema::KernelStep& k, int64_t p) {
  const ModelState& st = *ctx.model;
  const LaunchShape shape = launch_shape(k, p);
  const schema::Grid& g = *shape.grid;
  auto work = dim_eval(g.work(), p);
  if (!work)
    return internal_error("step '" + k.node() + "': grid work overflows at size " +
                          std::to_string(p));
  KILN_ASSIGN_OR_RETURN(int64_t blocks, grid_blocks(*work, g.work_per_block()));
  if (blocks == 0) return Status::ok_status();  // no work at this size

  constexpr int kInline = 32;
  std::array<ArgSlot, kInline> inline_slots{};
  std::array<void*, kInline> inline_args{};
  std::vector<ArgSlot> heap_slots;
  std::vector<void*> heap_args;
  ArgSlot* slots = inline_slots.data();
  void** args = inline_args.data();
  if (k.args_size() > kInline) {
    heap_slots.resize(static_cast<size_t>(k.args_size()));
    heap_args.resize(static_cast<size_t>(k.args_size()));
    slots = heap_slots.data();
    args = heap_args.data();
  }
  for (int j = 0; j < k.args_size(); ++j) {
    const auto& a = k.args(j);
    switch (a.value_case()) {
      case schema::KernelArg::kBuffer:
        slots[j].ptr = st.buffer_ptr(ctx.arena, a.buffer());
        break;
      case schema::KernelArg::kSize:
        slots[j].i64 = p;
        break;
      case schema::KernelArg::kI64:
        slots[j].i64 = a.i64();
        break;
      case schema::KernelArg::kF32:
        slots[j].f32 = a.f32();
        break;
      case schema::KernelArg::kRealSizePtr:
        if (ctx.real_size == nullptr)
          return internal_error("step '" + k.node() + "': argument " + std::to_string(j) +
                                " is the real-size pointer, but this launch has no device slot "
                                "for the real size");
        slots[j].ptr = const_cast<int64_t*>(ctx.real_size);
        break;
      case schema::KernelArg::kKv:
        slots[j].ptr = ctx.kv == nullptr ? nullptr : kv_pointer(*ctx.kv, a.kv());
        if (slots[j].ptr == nullptr)
          return internal_error("step '" + k.node() + "': argument " + std::to_string(j) +
                                " is a KV-cache pointer (kind " + std::to_string(a.kv().kind()) +
                                ", layer " + std::to_string(a.kv().layer()) +
                                "), but this launch has no KV cache that holds it");
        break;
      default:
        return internal_error("step '" + k.node() + "': argument " + std::to_string(j) +
                              " has no value");
    }
    args[j] = &slots[j];
  }
  int64_t blocks_y = 1;
  if (g.has_y() && (g.y().coef() != 0 || g.y().offset() != 0)) {
    auto y = dim_eval(g.y(), p);
    if (!y || *y < 1 || *y > 65535)
      return internal_error("step '" + k.node() + "': grid.y is outside [1, 65535] at size " +
                            std::to_string(p));
    blocks_y = *y;
  }
  const void* fn = reinterpret_cast<const void*>(st.kernels[shape.kernel]);
  if (shape.shared_bytes > 48 * 1024) {  // above the default limit: opt in (idempotent)
    cudaError_t attr = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(shape.shared_bytes));
    if (attr != cudaSuccess)
      return cuda_status(attr, "raising the shared-memory limit of " +
                                   launch_label(st.manifest, shape, k, blocks, p));
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(blocks_y));
  const dim3 block(shape.block);
  cudaError_t err =
      launch_kernel(fn, grid, block, args, shape.shared_bytes, ctx.stream, st.programmatic_launch);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess)
    return cuda_status(err, "launching " + launch_label(st.manifest, shape, k, blocks, p));
  return Status::ok_status();
}

}  // namespace

cudaError_t launch_kernel(const void* fn, dim3 grid, dim3 block, void** args, uint32_t shared_bytes,
                          cudaStream_t stream, bool programmatic) {
  if (!programmatic) return cudaLaunchKernel(fn, grid, block, args, shared_bytes, stream);
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, fn, args);
}

Result<int64_t> grid_blocks(int64_t work, uint32_t work_per_block) {
  if (work <= 0) return int64_t{0};
  if (work_per_block == 0) return internal_error("grid.work_per_block is 0");
  const int64_t blocks = (work - 1) / static_cast<int64_t>(work_per_block) + 1;
  if (blocks > INT32_MAX)
    return invalid_argument(std::to_string(blocks) + " blocks exceed the grid limit 2^31-1");
  return blocks;
}

Status launch_pieces(const LaunchContext& ctx, const GemmPlanSet& plans, size_t first, size_t last,
                     int64_t p) {
  const ModelState& st = *ctx.model;
  for (size_t piece = first; piece < last; ++piece) {
    size_t flat = st.piece_first_step[piece];
    const StepList& steps = st.manifest.pieces(static_cast<int>(piece)).steps();
    for (int i = 0; i < steps.size(); ++i) {
      const schema::Step& step = steps.Get(i);
      if (step.op_case() == schema::Step::kKernel) {
        if (kernel_step_runs_at(steps, i, p) &&
            kernel_step_on_route(step.kernel(), ctx.decode_route, p))
          KILN_RETURN_IF_ERROR(kernel_launch(ctx, step.kernel(), p));
      } else if (!gemm_step_is_skinny_at(step.gemm(), p)) {
        const GemmPlan* plan = flat < plans.by_step.size() ? plans.by_step[flat].get() : nullptr;
        if (plan == nullptr)
          return internal_error("no GEMM plan for step '" + step.gemm().node() + "' at size " +
                                std::to_string(p));
        KILN_RETURN_IF_ERROR(plan->run(st.lt, ctx.workspace, ctx.workspace_bytes, ctx.stream));
      }
      ++flat;
    }
  }
  return Status::ok_status();
}

}  // namespace kiln::runtime
