// run_model.cc — the C++ API end to end: load a kiln artifact, run one request, print the
// outputs and optionally save them as .npy files. The same command line and input values as
// run_model.c, so the two print the same numbers.
//
// Build against an installed kiln (tools/examples/README.md):
//   c++ -std=c++20 run_model.cc $(pkg-config --cflags --libs kiln-runtime) -o run_model_cpp
// Usage:
//   run_model_cpp CACHE_DIR [NAME=FILE.npy ...] [--size S] [--out DIR]
// Exit codes as the kiln CLI's: 0 success, 1 error, 3 no usable CUDA GPU.
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include "example_tensor.h"
#include "kiln/executor.h"
#include "kiln/model.h"
#include "npy.h"

namespace {

struct Request {
  std::string dir, out_dir;
  int64_t size = 1;
  std::map<std::string, std::string> files;  // input name → .npy path
};

bool parse_args(int argc, char** argv, Request& r) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) {
      r.size = std::stoll(argv[++i]);
    } else if (a == "--out" && i + 1 < argc) {
      r.out_dir = argv[++i];
    } else if (auto eq = a.find('='); eq != std::string::npos) {
      r.files[a.substr(0, eq)] = a.substr(eq + 1);
    } else if (r.dir.empty() && a[0] != '-') {
      r.dir = a;
    } else {
      return false;
    }
  }
  return !r.dir.empty();
}

// npy_array and kiln::Tensor hold the same thing; kiln_dtype and kiln::DType share values.
kiln::Tensor tensor_of(const std::string& name, const npy_array& a) {
  kiln::Tensor t = kiln::Tensor::zeros(name, static_cast<kiln::DType>(a.dtype),
                                       std::vector<int64_t>(a.shape, a.shape + a.rank));
  std::memcpy(t.data.data(), a.data, t.data.size());
  return t;
}

npy_array array_of(const kiln::Tensor& t) {
  npy_array a{};
  a.dtype = static_cast<int32_t>(t.dtype);
  a.rank = static_cast<int32_t>(t.shape.size());
  std::copy(t.shape.begin(), t.shape.end(), a.shape);
  a.data = const_cast<uint8_t*>(t.data.data());
  a.bytes = t.data.size();
  return a;
}

// Every model input, read from its file or filled at r.size (as run_model.c does).
kiln::Result<std::vector<kiln::Tensor>> inputs_make(const kiln::Model& model, const Request& r) {
  std::vector<kiln::Tensor> inputs;
  for (const kiln::TensorInfo& info : model.inputs()) {
    npy_array a{};
    char err[512];
    if (auto f = r.files.find(info.name); f != r.files.end()) {
      if (npy_read(f->second.c_str(), &a, err, sizeof err) != 0)
        return kiln::invalid_argument("input '" + info.name + "': " + err);
    } else {
      const std::vector<int64_t> shape = info.shape_at(r.size);
      a.dtype = static_cast<int32_t>(info.dtype);
      a.rank = static_cast<int32_t>(shape.size());
      std::copy(shape.begin(), shape.end(), a.shape);
      if (example_fill(&a) != 0)
        return kiln::invalid_argument("input '" + info.name + "': cannot fill its dtype");
    }
    inputs.push_back(tensor_of(info.name, a));
    npy_free(&a);
  }
  for (const auto& [name, path] : r.files) {
    bool known = false;
    for (const kiln::TensorInfo& info : model.inputs()) known |= info.name == name;
    if (!known) return kiln::invalid_argument("the model has no input '" + name + "'");
  }
  return inputs;
}

int run(const Request& r) {
  auto model = kiln::Model::load(r.dir);
  if (!model.ok()) return std::cerr << "run_model_cpp: " << model.status().to_string() << "\n", 1;
  auto inputs = inputs_make(**model, r);
  if (!inputs.ok()) return std::cerr << "run_model_cpp: " << inputs.status().to_string() << "\n", 1;
  auto executor = kiln::Executor::create(*model);  // captures the artifact's graph mode now
  if (!executor.ok())
    return std::cerr << "run_model_cpp: " << executor.status().to_string() << "\n", 1;
  auto outputs = (*executor)->run(*inputs);
  if (!outputs.ok())
    return std::cerr << "run_model_cpp: " << outputs.status().to_string() << "\n", 1;
  std::cout << "ran " << r.dir << " in mode " << kiln::cuda_graph_mode_name((*executor)->mode())
            << "\n";
  if (!r.out_dir.empty()) std::filesystem::create_directories(r.out_dir);
  for (const kiln::Tensor& t : *outputs) {
    const npy_array a = array_of(t);
    std::cout << t.name << " [";
    for (size_t d = 0; d < t.shape.size(); ++d) std::cout << (d ? ", " : "") << t.shape[d];
    std::cout << "]\n  first values:" << std::flush;
    example_print_head(&a, 6);
    std::printf("\n  sum: %.6f\n", example_sum(&a));
    if (r.out_dir.empty()) continue;
    std::string file = t.name + ".npy";
    example_safe_name(file.data());
    const std::string path = r.out_dir + "/" + file;
    if (npy_write(path.c_str(), a.dtype, a.rank, a.shape, a.data, a.bytes) != 0)
      return std::cerr << "run_model_cpp: cannot write " << path << "\n", 1;
    std::cout << "  saved: " << path << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Request r;
  if (!parse_args(argc, argv, r)) {
    std::cerr << "usage: run_model_cpp CACHE_DIR [NAME=FILE.npy ...] [--size S] [--out DIR]\n";
    return 2;
  }
  std::string why;
  if (!kiln::cuda_device_available(&why)) {
    std::cout << "run_model_cpp: " << why << "\nThe artifact needs a CUDA GPU to run.\n";
    return 3;
  }
  return run(r);
}
