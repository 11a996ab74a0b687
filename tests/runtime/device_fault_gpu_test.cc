// GPU: a device fault inside the runtime's own run loses the CUDA context, and the runtime says
// so. The test model is rebuilt with a `combine` kernel that executes __trap() when it reads a
// sentinel value from input y, so the executor is created and runs cleanly on ordinary inputs,
// and the fault comes from a graph replay the runtime itself launched. The run that meets the
// fault returns context_lost naming the CUDA error; every later call — runs with clean inputs,
// executor creation, loading, the C API — returns the same status with the same first error.
//
// A fault ends CUDA for the whole process, so the fault and every check after it run in a child
// process: a GoogleTest death test in the "threadsafe" style, which re-executes this binary for
// this one test, so the child starts its own CUDA context instead of inheriting the parent's
// across fork. The child prints what failed and exits 1, or exits 0. Skips cleanly without a
// CUDA device (ExecutorGpu).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "kiln/executor.h"
#include "kiln/runtime.h"
#include "runtime/context_lost.h"
#include "tests/runtime/gpu_fixture.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using runtime::testing::ExecutorGpu;
using runtime::testing::f32_tensor;
using runtime::testing::gpu_shared;
using runtime::testing::Inputs;
using runtime::testing::make_inputs;
using runtime::testing::matches;
using runtime::testing::TestModelSpec;

constexpr float kTrapValue = 12345.0f;
constexpr const char* kLost = "CUDA context lost \u2014 restart the process";

// The test model whose `combine` kernel traps on reading kTrapValue from y.
Result<std::filesystem::path> trap_artifact(const std::filesystem::path& root,
                                            const TestModelSpec& spec) {
  std::string source = runtime::testing::test_kernel_source(spec);
  const std::string store = "  z[i] = v;\n";
  const size_t at = source.find(store);
  if (at == std::string::npos)
    return internal_error("test_kernel_source has no '" + store + "' to put the trap before");
  source.insert(at, "  if (y[c * S + s] == " + std::to_string(kTrapValue) + "f) __trap();\n");
  KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> cubin,
                        runtime::testing::test_cubin_from_source(spec, source));
  const runtime::testing::TestWeights weights = runtime::testing::test_weights(spec, 7);
  return runtime::testing::test_artifact_publish(root, spec, runtime::testing::test_manifest(spec),
                                                 weights.blob, cubin);
}

// Collects failed expectations as text (the child process reports them on stderr).
struct Checks {
  std::ostringstream failed;
  void expect(bool ok, const std::string& what) {
    if (!ok) failed << "FAILED: " << what << "\n";
  }
  // `s` is the recorded context_lost status: code, message == `record`.
  void expect_record(const Status& s, const std::string& record, const std::string& what) {
    expect(s.code() == StatusCode::kContextLost && s.message() == record,
           what + ": expected the recorded context_lost status, got " + s.to_string());
  }
};

// The child's whole life: builds and runs the trapping model, then checks every later call.
// Never returns.
[[noreturn]] void fault_then_check_every_later_call() {
  Checks c;
  [&c] {
    kiln::testing::TempDir tmp;
    const TestModelSpec spec = gpu_shared().art.spec;
    auto dir = trap_artifact(tmp.path(), spec);
    if (!dir.ok()) return c.expect(false, "trap artifact: " + dir.status().to_string());
    auto model = Model::load(*dir);
    if (!model.ok()) return c.expect(false, "load: " + model.status().to_string());
    ExecutorOptions o;
    o.mode = CudaGraphMode::kFull;
    auto ex = Executor::create(*model, o);
    if (!ex.ok()) return c.expect(false, "create: " + ex.status().to_string());

    // The trap is data-dependent: ordinary inputs run and match.
    const Inputs clean = make_inputs(4, 11);
    auto ok = (*ex)->run(clean.tensors);
    c.expect(ok.ok() && matches(*ok, clean),
             "a clean run before the fault: " +
                 (ok.ok() ? std::string("mismatch") : ok.status().to_string()));

    // The fault, inside a graph replay the executor launched (size 4 is captured).
    Inputs trap = make_inputs(4, 12);
    trap.y[0] = kTrapValue;
    trap.tensors[1] = f32_tensor("y", {spec.n, 4}, trap.y);
    auto first = (*ex)->run(trap.tensors);
    if (first.ok()) return c.expect(false, "the trapping run returned OK");
    const Status& f = first.status();
    std::fprintf(stderr, "the faulting run: %s\n", f.to_string().c_str());
    c.expect(f.code() == StatusCode::kContextLost, "the faulting run's code: " + f.to_string());
    c.expect(f.message().find(kLost) != std::string::npos &&
                 f.message().find("(first error: ") != std::string::npos &&
                 f.message().find(": cudaError") != std::string::npos,
             "the faulting run's message names the loss and the CUDA error: " + f.message());

    // Every later call: the record, whose message the faulting run's message ends with.
    const std::string record = runtime::context_lost_check().message();
    c.expect(!record.empty() && f.message().find(record) != std::string::npos,
             "the record '" + record + "' is the faulting run's first error");
    for (int round = 0; round < 2; ++round) {
      const std::string r = " (call " + std::to_string(round + 1) + " after the fault)";
      c.expect_record((*ex)->run(clean.tensors).status(), record, "run" + r);
      c.expect_record((*ex)->time_device(4, 1).status(), record, "time_device" + r);
      c.expect_record(Executor::create(*model, o).status(), record, "Executor::create" + r);
      c.expect_record(Model::load(gpu_shared().art.dir).status(), record, "Model::load" + r);
      kiln_model* cm = nullptr;
      const kiln_status st = kiln_model_load(gpu_shared().art.dir.c_str(), &cm);
      c.expect(st == KILN_CONTEXT_LOST &&
                   std::string(kiln_last_error()).find(record) != std::string::npos,
               "kiln_model_load" + r + ": " + kiln_status_name(st) + " " + kiln_last_error());
      c.expect(kiln_device_available() == 0, "kiln_device_available" + r);
    }
  }();
  const std::string failed = c.failed.str();
  std::fprintf(stderr, "%s", failed.empty() ? "context-lost checks passed\n" : failed.c_str());
  // _Exit: no destructors or atexit handlers on a dead context.
  std::_Exit(failed.empty() ? 0 : 1);
}

TEST_F(ExecutorGpu, DeviceFaultInARunLosesTheContextForEveryLaterCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fault_then_check_every_later_call(), ::testing::ExitedWithCode(0),
              "context-lost checks passed");
  // The parent's own context is untouched: its executors still run.
  auto ex = Executor::create(gpu_shared().model);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const Inputs in = make_inputs(16, 21);
  auto out = (*ex)->run(in.tensors);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(matches(*out, in));
}

}  // namespace
}  // namespace kiln
