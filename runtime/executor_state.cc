#include "runtime/executor_state.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "runtime/cuda_check.h"
#include "runtime/input_validate.h"

namespace kiln {
namespace {

// Bytes of the static buffer of `info` at capture size p.
Result<size_t> buffer_bytes(const TensorInfo& info, int64_t p) {
  const std::optional<int64_t> bytes = runtime::tensor_bytes_at(info, p);
  if (!bytes)
    return internal_error("'" + info.name + "': byte size overflows at size " + std::to_string(p));
  return static_cast<size_t>(*bytes);
}

}  // namespace

Executor::State::~State() {
  if (ms == nullptr || ms->device < 0) return;
  runtime::DeviceGuard guard(ms->device);
  if (stream != nullptr) (void)cudaStreamSynchronize(stream);
  graphs.clear();
  decode_graphs.clear();
  plans.clear();
  kv.reset();
  for (cudaEvent_t e : {caller_ready, run_done})
    if (e != nullptr) (void)cudaEventDestroy(e);
  if (run_start != nullptr) (void)cudaEventDestroy(run_start);
  if (run_stop != nullptr) (void)cudaEventDestroy(run_stop);
  if (real_size_copied != nullptr) (void)cudaEventDestroy(real_size_copied);
  if (real_size_host != nullptr) (void)cudaFreeHost(real_size_host);
  if (host_inputs_block != nullptr) (void)cudaFreeHost(host_inputs_block);
  if (real_size_dev != nullptr) (void)cudaFree(real_size_dev);
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
  if (workspace != nullptr) (void)cudaFree(workspace);
  if (arena != nullptr) (void)cudaFree(arena);
  (void)cudaGetLastError();
}

runtime::LaunchContext Executor::State::context(bool decode_route) const {
  runtime::LaunchContext ctx;
  ctx.decode_route = decode_route;
  ctx.model = ms;
  ctx.arena = arena;
  ctx.workspace = workspace;
  ctx.workspace_bytes = workspace_bytes;
  ctx.stream = stream;
  ctx.real_size = real_size_dev;
  ctx.kv = kv.get();
  return ctx;
}

Status Executor::State::real_size_init() {
  bool used = false;
  for (const auto& piece : ms->manifest.pieces())
    for (const auto& step : piece.steps())
      if (step.op_case() == schema::Step::kKernel)
        for (const auto& a : step.kernel().args())
          used = used || a.value_case() == schema::KernelArg::kRealSizePtr;
  if (!used) return Status::ok_status();
  void* dev = nullptr;
  KILN_CUDA_TRY(cudaMalloc(&dev, sizeof(int64_t)), "cudaMalloc of the real-size slot");
  real_size_dev = static_cast<int64_t*>(dev);
  void* host = nullptr;
  KILN_CUDA_TRY(cudaMallocHost(&host, sizeof(int64_t)), "cudaMallocHost of the real-size slot");
  real_size_host = static_cast<int64_t*>(host);
  *real_size_host = 0;
  KILN_CUDA_TRY(cudaEventCreateWithFlags(&real_size_copied, cudaEventDisableTiming),
                "cudaEventCreate (real size)");
  return Status::ok_status();
}

// The KV cache of a generation model, before any capture (the graphs bind its addresses).
Status Executor::State::kv_init() {
  if (!ms->manifest.has_generation()) return Status::ok_status();
  const schema::Generation& g = ms->manifest.generation();
  runtime::KvCacheDeviceOptions o = kv_options;
  o.device = ms->device;
  o.num_layers = g.num_layers();
  o.num_kv_heads = g.num_kv_heads();
  o.head_dim = g.head_dim();
  o.dtype = static_cast<DType>(ms->manifest.generation().dtype());
  o.block_size = g.block_size();
  if (o.max_blocks == 0 && o.memory_fraction == 0.0) {
    o.max_blocks = static_cast<int64_t>(g.max_blocks());
    o.memory_fraction = g.max_blocks() == 0 ? g.memory_fraction() : 0.0;
  }
  o.max_sequences = g.max_sequences();
  o.max_seq_len = g.max_seq_len();
  o.max_tokens = model->max_size();
  KILN_ASSIGN_OR_RETURN(kv, runtime::KvCacheDevice::create(o));
  return host_inputs_init();
}

// The pinned input images of a generation model (host_inputs), zeroed.
Status Executor::State::host_inputs_init() {
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const TensorInfo& info : ms->inputs) {
    KILN_ASSIGN_OR_RETURN(size_t bytes, buffer_bytes(info, model->max_size()));
    offsets.push_back(total);
    total += (bytes + 255) / 256 * 256;
  }
  void* host = nullptr;
  KILN_CUDA_TRY(cudaMallocHost(&host, std::max<size_t>(total, 1)),
                "cudaMallocHost of the step input images (" + std::to_string(total) + " bytes)");
  host_inputs_block = static_cast<char*>(host);
  std::memset(host_inputs_block, 0, total);
  for (size_t off : offsets) host_inputs.push_back(host_inputs_block + off);
  return Status::ok_status();
}

// Why a copy on the executor's stream, outside every graph:
//  - A graph captured at P keeps the kernel arguments it was captured with, so the request's s
//    cannot be an argument: kernels get a pointer to a device slot (captured once), and the
//    slot's contents change per run.
//  - The copy is enqueued on `stream` right before the replay or the eager launches, so stream
//    order completes it before any kernel of this run starts and after every kernel of the
//    previous run (which may still read the old value) — in every mode: FULL, PIECEWISE (whose
//    attention pieces launch eagerly between graphs) and NONE. A copy node inside a FULL graph
//    would serve only FULL.
//  - cudaMemcpyAsync reads the pinned source when the copy executes, not when it is enqueued, so
//    the host slot must not change while a copy from it is pending: it is rewritten only when
//    the value differs, after waiting on the event behind the last copy (normally long done:
//    run() synchronises the stream before it returns). Pinned memory makes the copy a plain DMA
//    that never blocks the host; a pageable source would be staged through a driver buffer.
Status Executor::State::real_size_write(int64_t s) {
  if (real_size_dev == nullptr) return Status::ok_status();
  // The slot already holds s: the last copy enqueued on `stream` wrote it, and nothing else
  // writes the slot, so stream order gives this run s without another copy.
  if (real_size_on_device == s) return Status::ok_status();
  if (*real_size_host != s) {
    KILN_CUDA_TRY(cudaEventSynchronize(real_size_copied),
                  "waiting for the previous real-size copy");
    *real_size_host = s;
  }
  KILN_CUDA_TRY(cudaMemcpyAsync(real_size_dev, real_size_host, sizeof(int64_t),
                                cudaMemcpyHostToDevice, stream),
                "copying the real size " + std::to_string(s) + " to the device");
  KILN_CUDA_TRY(cudaEventRecord(real_size_copied, stream), "cudaEventRecord (real size)");
  real_size_on_device = s;
  return Status::ok_status();
}

Result<const runtime::GemmPlanSet*> Executor::State::plans_for(int64_t p) {
  auto it = plans.find(p);
  if (it != plans.end()) return &it->second;
  KILN_ASSIGN_OR_RETURN(runtime::GemmPlanSet set,
                        runtime::gemm_plans_create(*ms, arena, p, workspace_bytes));
  return &plans.emplace(p, std::move(set)).first->second;
}

std::vector<const void*> Executor::State::io_addresses() const {
  std::vector<const void*> a(inputs.begin(), inputs.end());
  a.insert(a.end(), outputs.begin(), outputs.end());
  return a;
}

Status Executor::State::execute_decode(int64_t s, int64_t p, const runtime::GemmPlanSet& set) {
  auto it = decode_graphs.find(p);
  if (it == decode_graphs.end()) return execute(s, p, set);
  KILN_RETURN_IF_ERROR(real_size_write(s));
  if (options.debug) KILN_RETURN_IF_ERROR(it->second->check_addresses(io_addresses(), io_names, p));
  return it->second->run(context(true), set, decode_segments, p);
}

Status Executor::State::execute(int64_t s, int64_t p, const runtime::GemmPlanSet& set,
                                bool io_prepared) {
  KILN_RETURN_IF_ERROR(real_size_write(s));
  auto it = graphs.find(p);
  if (it != graphs.end()) {
    if (!io_prepared && it->second->has_io())
      KILN_RETURN_IF_ERROR(it->second->prepare_io(nullptr).status());
    if (options.debug)
      KILN_RETURN_IF_ERROR(it->second->check_addresses(io_addresses(), io_names, p));
    return it->second->run(context(), set, segments, p);
  }
  return runtime::launch_pieces(context(), set, 0, static_cast<size_t>(ms->manifest.pieces_size()),
                                p);
}

Status Executor::State::capture_size(int64_t p, bool decode) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string at = (decode ? "decode size " : "size ") + std::to_string(p);
  KILN_ASSIGN_OR_RETURN(const runtime::GemmPlanSet* set, plans_for(p));
  // Warm-up: cuBLASLt and lazy module loading may allocate on first use, which must not happen
  // inside a capture (and must not be counted as graph memory below).
  // The warm-up runs a request of exactly p (the real size is p).
  Status warm = real_size_write(p);
  if (warm.ok())
    warm = runtime::launch_pieces(context(), *set, 0,
                                  static_cast<size_t>(ms->manifest.pieces_size()), p);
  if (!warm.ok()) return warm.with_context("warm-up run at " + at);
  KILN_CUDA_TRY(cudaStreamSynchronize(stream), "warm-up run at " + at + " (cudaStreamSynchronize)");
  size_t free_before = 0, free_after = 0, total = 0;
  KILN_CUDA_TRY(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo before capturing " + at);
  // FULL graphs of the mixed route copy a request's device inputs and outputs themselves
  // (memcpy nodes, SizeGraphs::prepare_io); generation models move theirs through the Generator.
  std::optional<runtime::IoPlan> io;
  if (!decode && mode == CudaGraphMode::kFull && !ms->manifest.has_generation()) {
    io.emplace();
    for (size_t i = 0; i < ms->inputs.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(size_t bytes, buffer_bytes(ms->inputs[i], p));
      io->inputs.push_back(inputs[i]);
      io->input_bytes.push_back(bytes);
    }
    for (size_t i = 0; i < ms->outputs.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(size_t bytes, buffer_bytes(ms->outputs[i], p));
      io->outputs.push_back(outputs[i]);
      io->output_bytes.push_back(bytes);
    }
  }
  // Decode graphs of generation models copy the step's inputs and KV images from their pinned
  // images (the Generator fills them before the launch), so a decode step enqueues no copies.
  if (decode && kv != nullptr) {
    io.emplace();
    for (size_t i = 0; i < ms->inputs.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(size_t bytes, buffer_bytes(ms->inputs[i], p));
      io->host_copies.push_back({inputs[i], host_inputs[i], bytes});
    }
    const runtime::KvStepView images = kv->token_images(p);
    io->host_copies.push_back(
        {kv->block_tables(), images.block_tables.data(), images.block_tables.size_bytes()});
    io->host_copies.push_back(
        {kv->context_lens(), images.context_lens.data(), images.context_lens.size_bytes()});
    io->host_copies.push_back(
        {kv->slot_mapping(), images.slot_mapping.data(), images.slot_mapping.size_bytes()});
  }
  KILN_ASSIGN_OR_RETURN(
      auto size_graphs,
      runtime::SizeGraphs::capture(context(decode), *set, decode ? decode_segments : segments, p,
                                   io_addresses(), io ? &*io : nullptr));
  KILN_CUDA_TRY(cudaStreamSynchronize(stream), "uploading the graphs of " + at);
  KILN_CUDA_TRY(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo after capturing " + at);
  SizeCapture c;
  c.size = p;
  c.graphs = size_graphs->graph_count();
  c.device_bytes = static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  (decode ? decode_graphs : graphs).emplace(p, std::move(size_graphs));
  (decode ? decode_captured : captured).push_back(p);
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  report.sizes.push_back(c);
  report.capture_ms += c.ms;
  report.graph_device_bytes += c.device_bytes;
  return Status::ok_status();
}

Status Executor::State::init() {
  const auto& m = ms->manifest;
  KILN_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags");
  arena_bytes = std::max<uint64_t>(m.arena_bytes(), 1);
  void* ptr = nullptr;
  KILN_CUDA_TRY(cudaMalloc(&ptr, arena_bytes),
                "cudaMalloc of the " + std::to_string(arena_bytes) + "-byte activation arena");
  arena = static_cast<char*>(ptr);
  // Zeroed once, so a warm-up run never reads garbage (an index buffer, say) before the first
  // inputs arrive.
  KILN_CUDA_TRY(cudaMemsetAsync(arena, 0, arena_bytes, stream), "zeroing the arena");
  workspace_bytes = ms->workspace_bytes;
  KILN_CUDA_TRY(cudaMalloc(&workspace, workspace_bytes),
                "cudaMalloc of the " + std::to_string(workspace_bytes) + "-byte GEMM workspace");
  KILN_CUDA_TRY(cudaEventCreateWithFlags(&caller_ready, cudaEventDisableTiming), "cudaEventCreate");
  KILN_CUDA_TRY(cudaEventCreateWithFlags(&run_done, cudaEventDisableTiming), "cudaEventCreate");
  if (options.time_runs) {
    KILN_CUDA_TRY(cudaEventCreate(&run_start), "cudaEventCreate");
    KILN_CUDA_TRY(cudaEventCreate(&run_stop), "cudaEventCreate");
  }
  KILN_RETURN_IF_ERROR(real_size_init());
  report.arena_bytes = arena_bytes;
  report.workspace_bytes = workspace_bytes;
  for (int i = 0; i < m.inputs_size(); ++i) {
    inputs.push_back(ms->buffer_ptr(arena, m.inputs(i).buffer()));
    io_names.push_back("input '" + m.inputs(i).name() + "'");
  }
  for (int i = 0; i < m.outputs_size(); ++i) {
    outputs.push_back(ms->buffer_ptr(arena, m.outputs(i).buffer()));
    io_names.push_back("output '" + m.outputs(i).name() + "'");
  }
  KILN_RETURN_IF_ERROR(kv_init());
  segments = runtime::segments_for_mode(m, mixed_mode(mode));
  // Largest first: the largest size is the likeliest to fail (memory), so a failure comes
  // before the small sizes were spent on. Decode graphs first (they are the latency-critical
  // ones), then the mixed route's; all share the one arena.
  std::vector<int64_t> sizes = ms->capture_sizes;
  std::sort(sizes.rbegin(), sizes.rend());
  const int64_t max_batch =
      separate_routine(mode) && m.has_generation() ? m.generation().max_sequences() : 0;
  const size_t total = static_cast<size_t>(std::count_if(
                           sizes.begin(), sizes.end(), [&](int64_t p) { return p <= max_batch; })) +
                       (mixed_mode(mode) != CudaGraphMode::kNone ? sizes.size() : 0);
  size_t done = 0;
  auto capture = [&](int64_t p, bool decode) -> Status {
    KILN_RETURN_IF_ERROR(capture_size(p, decode));
    if (options.capture_progress) options.capture_progress(p, ++done, total);
    return Status::ok_status();
  };
  if (separate_routine(mode)) {
    decode_segments = runtime::segments_for_mode(m, decode_mode(mode));
    for (int64_t p : sizes)
      if (p <= max_batch) KILN_RETURN_IF_ERROR(capture(p, true));
    std::sort(decode_captured.begin(), decode_captured.end());
  }
  if (mixed_mode(mode) != CudaGraphMode::kNone) {
    for (int64_t p : sizes) KILN_RETURN_IF_ERROR(capture(p, false));
    std::sort(captured.begin(), captured.end());
  }
  KILN_CUDA_TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize after capture");
  return Status::ok_status();
}

}  // namespace kiln
