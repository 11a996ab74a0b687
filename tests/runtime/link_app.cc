// A tiny application linked against kiln_runtime_dep alone: proves the runtime's public headers
// and library are enough (no compiler, ONNX, full protobuf, yaml-cpp or NVRTC), and that the
// binary starts on a machine without a GPU. Usage: link_app [artifact-or-cache-dir]
#include <cstdio>
#include <string>

#include "kiln/executor.h"
#include "kiln/model.h"

int main(int argc, char** argv) {
  std::string why;
  const bool device = kiln::cuda_device_available(&why);
  std::printf("cuda device: %s\n", device ? "available" : why.c_str());
  if (argc < 2) return 0;
  auto model = kiln::Model::load(argv[1]);
  if (!model.ok()) {
    std::printf("load: %s\n", model.status().to_string().c_str());
    return 0;  // an error value, not a crash, is what this app checks
  }
  std::printf("loaded '%s': %zu inputs, %zu outputs, max_size %lld\n", (*model)->name().c_str(),
              (*model)->inputs().size(), (*model)->outputs().size(),
              static_cast<long long>((*model)->max_size()));
  auto executor = kiln::Executor::create(*model);
  std::printf("executor: %s\n", executor.ok() ? "created" : executor.status().to_string().c_str());
  return 0;
}
