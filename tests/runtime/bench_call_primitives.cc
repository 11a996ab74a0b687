// What the pieces of one executor call cost on this GPU machine (not a test; needs a GPU).
//
//   build/tests/runtime/runtime_bench_call_primitives [inputs=2] [output_bytes=100000]
//
// A kiln call in FULL mode is, on the executor's stream: the real-size copy (8 bytes from pinned
// memory) and an event, one copy per input into its static buffer, the graph replay, one copy
// per output out of it, then a cudaStreamSynchronize (runtime/executor_run.cc). This times such
// sequences around a stand-in graph (64 chained 256-byte memsets, captured) as host wall clock
// from the first call to the synchronize's return, median of 3000 after 300 warm-ups:
//   sync        an idle cudaStreamSynchronize
//   graph       the stand-in graph alone (launch + synchronize)
//   today       real-size copy + event + the input copies + graph + the output copy
//   no-size     `today` without the real-size copy and its event (skipped when the size is the
//               last one written)
//   batched     `today` with the real-size copy and the input copies as one cudaMemcpyBatchAsync
//               (CUDA 12.8+; whether the driver runs them as one operation is what this shows)
//   in-graph    the input and output copies as memcpy nodes of the graph, their pointers set
//               with cudaGraphExecMemcpyNodeSetParams1D on every call (two caller buffer sets,
//               alternating), one graph launch
//   in-graph=   the same with the pointers unchanged (no update calls)
// and checks that every form moved the bytes it should (exit 1 otherwise; 3 without a GPU).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/median.h"
#include "tests/kernels/bench_common.h"

namespace {

constexpr int kBodyNodes = 64;
constexpr int kWarmup = 300;
constexpr int kIters = 3000;
constexpr size_t kInputBytes = 16;  // a token id and an attention mask entry, or so

bool ok(cudaError_t e, const char* what) {
  return kiln::bench::cuda_ok("bench_call_primitives", e, what);
}
#define CHECK(call) \
  if (!ok((call), #call)) return false

struct Buffers {
  int inputs = 2;
  size_t out_bytes = 100000;
  char* arena = nullptr;       // [inputs x 256] inputs, [body], then the output
  char* caller[2] = {};        // two caller buffer sets: inputs x 256, then the output
  int64_t* size_dev = nullptr;
  int64_t* size_host = nullptr;
  cudaEvent_t size_copied = nullptr;
  cudaStream_t stream = nullptr;
  size_t body_at() const { return static_cast<size_t>(inputs) * 256; }
  size_t out_at() const { return body_at() + kBodyNodes * 256; }
  char* arena_in(int i) const { return arena + static_cast<size_t>(i) * 256; }
  char* caller_in(int set, int i) const { return caller[set] + static_cast<size_t>(i) * 256; }
  char* caller_out(int set) const { return caller[set] + body_at(); }
};

bool body(const Buffers& b) {
  for (int i = 0; i < kBodyNodes; ++i)
    CHECK(cudaMemsetAsync(b.arena + b.body_at() + static_cast<size_t>(i) * 256, i, 256, b.stream));
  CHECK(cudaMemsetAsync(b.arena + b.out_at(), 0x5A, b.out_bytes, b.stream));
  return true;
}

// Stream capture of `fn` into an instantiated graph (and the graph, for its node handles).
bool capture(const Buffers& b, const std::function<bool()>& fn, cudaGraph_t* graph,
             cudaGraphExec_t* exec) {
  CHECK(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal));
  const bool captured = fn();
  CHECK(cudaStreamEndCapture(b.stream, graph));
  if (!captured) return false;
  CHECK(cudaGraphInstantiate(exec, *graph, 0));
  CHECK(cudaGraphUpload(*exec, b.stream));
  return true;
}

bool copies_in(const Buffers& b, int set) {
  for (int i = 0; i < b.inputs; ++i)
    CHECK(cudaMemcpyAsync(b.arena_in(i), b.caller_in(set, i), kInputBytes,
                          cudaMemcpyDeviceToDevice, b.stream));
  return true;
}

bool copy_out(const Buffers& b, int set) {
  CHECK(cudaMemcpyAsync(b.caller_out(set), b.arena + b.out_at(), b.out_bytes,
                        cudaMemcpyDeviceToDevice, b.stream));
  return true;
}

// The real-size copy and the input copies of `set` as one batch (stream-ordered sources).
bool batched_in(const Buffers& b, int set) {
  std::vector<void*> dsts = {b.size_dev};
  std::vector<const void*> srcs = {b.size_host};
  std::vector<size_t> sizes = {sizeof(int64_t)};
  for (int i = 0; i < b.inputs; ++i) {
    dsts.push_back(b.arena_in(i));
    srcs.push_back(b.caller_in(set, i));
    sizes.push_back(kInputBytes);
  }
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attr_index = 0;
  CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr,
                             &attr_index, 1, b.stream));
  return true;
}

bool size_copy(const Buffers& b) {
  CHECK(cudaMemcpyAsync(b.size_dev, b.size_host, sizeof(int64_t), cudaMemcpyHostToDevice,
                        b.stream));
  CHECK(cudaEventRecord(b.size_copied, b.stream));
  return true;
}

// Median microseconds of `call` followed by a synchronize; false when a call fails.
bool time_us(const Buffers& b, const std::function<bool(int)>& call, double* us) {
  std::vector<double> t;
  for (int it = 0; it < kWarmup + kIters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!call(it)) return false;
    CHECK(cudaStreamSynchronize(b.stream));
    const auto t1 = std::chrono::steady_clock::now();
    if (it >= kWarmup) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  *us = kiln::runtime::median(t);
  return true;
}

// The caller's output of `set` holds the body's output and the static inputs hold the caller's
// inputs of `set` (the bytes the last call should have moved).
bool moved(const Buffers& b, int set, const char* form) {
  std::vector<unsigned char> out(b.out_bytes), in(kInputBytes), want(kInputBytes);
  CHECK(cudaMemcpy(out.data(), b.caller_out(set), b.out_bytes, cudaMemcpyDeviceToHost));
  for (unsigned char c : out)
    if (c != 0x5A) {
      std::fprintf(stderr, "bench_call_primitives: %s: the output copy did not arrive\n", form);
      return false;
    }
  for (int i = 0; i < b.inputs; ++i) {
    CHECK(cudaMemcpy(in.data(), b.arena_in(i), kInputBytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(want.data(), b.caller_in(set, i), kInputBytes, cudaMemcpyDeviceToHost));
    if (in != want) {
      std::fprintf(stderr, "bench_call_primitives: %s: input %d was not copied in\n", form, i);
      return false;
    }
  }
  return true;
}

bool run(Buffers& b) {
  CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  CHECK(cudaMalloc(&b.arena, b.out_at() + b.out_bytes));
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaMalloc(&b.caller[s], b.body_at() + b.out_bytes));
    CHECK(cudaMemset(b.caller[s], 0x10 + s, b.body_at()));  // distinct inputs per set
  }
  CHECK(cudaMalloc(&b.size_dev, sizeof(int64_t)));
  CHECK(cudaMallocHost(&b.size_host, sizeof(int64_t)));
  *b.size_host = 1;
  CHECK(cudaEventCreateWithFlags(&b.size_copied, cudaEventDisableTiming));

  cudaGraph_t body_graph = nullptr, io_graph = nullptr;
  cudaGraphExec_t body_exec = nullptr, io_exec = nullptr;
  if (!capture(b, [&] { return body(b); }, &body_graph, &body_exec)) return false;
  if (!capture(b, [&] { return copies_in(b, 0) && body(b) && copy_out(b, 0); }, &io_graph,
               &io_exec))
    return false;
  // The memcpy nodes of the I/O graph, told apart by their destination.
  size_t n = 0;
  CHECK(cudaGraphGetNodes(io_graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CHECK(cudaGraphGetNodes(io_graph, nodes.data(), &n));
  std::vector<cudaGraphNode_t> in_nodes(static_cast<size_t>(b.inputs), nullptr);
  cudaGraphNode_t out_node = nullptr;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemcpy) continue;
    cudaMemcpy3DParms p{};
    CHECK(cudaGraphMemcpyNodeGetParams(node, &p));
    if (p.dstPtr.ptr == b.caller_out(0)) out_node = node;
    for (int i = 0; i < b.inputs; ++i)
      if (p.dstPtr.ptr == b.arena_in(i)) in_nodes[static_cast<size_t>(i)] = node;
  }
  if (out_node == nullptr) {
    std::fprintf(stderr, "bench_call_primitives: no memcpy node for the output\n");
    return false;
  }
  for (cudaGraphNode_t node : in_nodes)
    if (node == nullptr) {
      std::fprintf(stderr, "bench_call_primitives: no memcpy node for an input\n");
      return false;
    }
  auto set_io = [&](int set) {
    for (int i = 0; i < b.inputs; ++i)
      CHECK(cudaGraphExecMemcpyNodeSetParams1D(io_exec, in_nodes[static_cast<size_t>(i)],
                                               b.arena_in(i), b.caller_in(set, i), kInputBytes,
                                               cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphExecMemcpyNodeSetParams1D(io_exec, out_node, b.caller_out(set),
                                             b.arena + b.out_at(), b.out_bytes,
                                             cudaMemcpyDeviceToDevice));
    return true;
  };

  struct Form {
    const char* name;
    std::function<bool(int)> call;
    bool checks;  // moves the caller's bytes (and is checked)
  };
  // Today's shape: `in` copies set it % 2 in on the stream, the stand-in graph, the output copy.
  auto stream_form = [&](std::function<bool(int)> in) {
    return [&b, &body_exec, in](int it) {
      const int set = it % 2;
      return in(set) && ok(cudaGraphLaunch(body_exec, b.stream), "launch") && copy_out(b, set);
    };
  };
  const std::vector<Form> forms = {
      {"sync", [&](int) { return true; }, false},
      {"graph", [&](int) { return ok(cudaGraphLaunch(body_exec, b.stream), "launch"); }, false},
      {"today", stream_form([&](int set) { return size_copy(b) && copies_in(b, set); }), true},
      {"no-size", stream_form([&](int set) { return copies_in(b, set); }), true},
      {"batched", stream_form([&](int set) { return batched_in(b, set); }), true},
      {"in-graph",
       [&](int it) { return set_io(it % 2) && ok(cudaGraphLaunch(io_exec, b.stream), "launch"); },
       true},
      {"in-graph=",
       [&](int it) {
         return (it > 0 || set_io(1)) && ok(cudaGraphLaunch(io_exec, b.stream), "launch");
       },
       true},
  };
  std::printf("%d inputs of %zu bytes, an output of %zu bytes, a stand-in graph of %d nodes; "
              "median µs of %d calls + synchronize\n",
              b.inputs, kInputBytes, b.out_bytes, kBodyNodes + 1, kIters);
  bool all = true;
  for (const Form& f : forms) {
    // Nothing a form should move is in place before it runs.
    for (int s = 0; s < 2; ++s) CHECK(cudaMemset(b.caller_out(s), 0, b.out_bytes));
    CHECK(cudaMemset(b.arena, 0, b.body_at()));
    double us = 0;
    if (!time_us(b, f.call, &us)) return false;
    // The last timed call (an odd iteration count in all: kWarmup + kIters - 1 is odd) used
    // set 1, except in-graph=, which always does.
    const bool good = !f.checks || moved(b, 1, f.name);
    all = all && good;
    std::printf("  %-10s %8.2f%s\n", f.name, us, good ? "" : "  (bytes not moved: FAILED)");
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_call_primitives: no CUDA device\n");
    return 3;
  }
  Buffers b;
  if (argc > 1) b.inputs = std::max(1, std::atoi(argv[1]));
  if (argc > 2) b.out_bytes = static_cast<size_t>(std::max(1L, std::atol(argv[2])));
  return run(b) ? 0 : 1;
}
