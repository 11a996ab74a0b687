// kiln::Executor: one stream, one activation arena, static input/output buffers, and one CUDA
// graph per capture size, captured at creation. run() pads the request up to the smallest
// captured size >= its size, replays, and returns exactly the requested rows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "cache/status.h"
#include "runtime/model.h"
#include "runtime/tensor.h"

namespace kiln {

struct ExecutorOptions {
  std::optional<CudaGraphMode> mode;  // default: the mode the artifact was compiled with
  bool debug = false;                 // poison padding rows and the arena before each run
};

struct ExecutorStats {
  int64_t graph_replays = 0;
  int64_t eager_runs = 0;  // launch program run without a graph (NONE, or size > captures)
};

class Executor {
 public:
  static Result<std::unique_ptr<Executor>> create(std::shared_ptr<const Model> model,
                                                  ExecutorOptions options = {});
  ~Executor();

  // Inputs by name (any order), all sharing one size S in [1, max_size]. Synchronous.
  Result<std::vector<Tensor>> run(const std::vector<Tensor>& inputs);

  CudaGraphMode mode() const;                  // after any downgrade
  const std::vector<int64_t>& captured_sizes() const;
  ExecutorStats stats() const;

  // Replays (or eagerly runs) the program for padded size `s` `iters` times on the inputs
  // already in the static buffers; returns the median milliseconds per run (device events).
  Result<double> time_device(int64_t s, int iters);

 private:
  struct State;
  explicit Executor(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln
