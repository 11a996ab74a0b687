// kiln verify | inspect | device.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cache/artifact_verify.h"
#include "cache/cache_layout.h"
#include "runtime/model.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

nlohmann::json dims_json(const google::protobuf::RepeatedPtrField<schema::DimExpr>& dims) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : dims) {
    if (d.coef() == 0) {
      out.push_back(d.offset());
      continue;
    }
    std::string s = d.coef() == 1 ? "S" : fmt::format("{}*S", d.coef());
    if (d.offset() != 0) s += fmt::format("{:+}", d.offset());
    out.push_back(s);
  }
  return out;
}

Result<schema::Manifest> verified(const std::string& dir, std::filesystem::path* where) {
  KILN_ASSIGN_OR_RETURN(*where, cache::artifact_resolve(dir));
  return cache::artifact_verify(*where);
}

}  // namespace

int cmd_verify(const std::string& dir) {
  std::filesystem::path where;
  auto m = verified(dir, &where);
  if (!m.ok()) {
    fmt::print(stderr, "kiln verify: FAILED: {}\n", m.status().message());
    return kExitError;
  }
  uint64_t bytes = 0;
  for (const auto& f : m->files()) bytes += f.size();
  fmt::print("kiln verify: OK {} — manifest format {}, {} files, {} bytes hash-checked\n",
             where.string(), m->format_version(), m->files_size(), bytes);
  return kExitOk;
}

int cmd_inspect(const std::string& dir) {
  std::filesystem::path where;
  auto m = verified(dir, &where);
  if (!m.ok()) {
    fmt::print(stderr, "kiln inspect: {}\n", m.status().message());
    return kExitError;
  }
  nlohmann::json j;
  j["artifact"] = where.string();
  j["key"] = m->key();
  j["model"] = m->model_name();
  j["format_version"] = m->format_version();
  const auto& f = m->factors();
  j["built_with"] = {{"compiler", f.compiler_version()}, {"cuda_runtime", f.cuda_runtime_version()},
                     {"nvrtc", f.nvrtc_version()}, {"cublaslt", f.cublaslt_version()},
                     {"targets", std::vector<std::string>(f.targets().begin(), f.targets().end())},
                     {"model_hash", f.model_hash()}, {"config_hash", f.config_hash()}};
  const auto& c = m->config();
  j["config"] = {{"size_dim", c.size_dim()}, {"max_size", c.max_size()}, {"precision", c.precision()},
                 {"mode", schema::CudaGraphMode_Name(c.mode())},
                 {"compile_sizes", std::vector<uint32_t>(c.compile_sizes().begin(), c.compile_sizes().end())},
                 {"cudagraph_capture_sizes", std::vector<uint32_t>(c.cudagraph_capture_sizes().begin(),
                                                                   c.cudagraph_capture_sizes().end())}};
  for (const auto* list : {&m->inputs(), &m->outputs()}) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& io : *list) arr.push_back({{"name", io.name()}, {"dtype", schema::DType_Name(io.dtype())}, {"dims", dims_json(io.dims())}});
    j[list == &m->inputs() ? "inputs" : "outputs"] = arr;
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& piece : m->pieces())
    for (const auto& s : piece.steps()) {
      if (s.has_kernel()) steps.push_back({{"kernel", m->kernels(s.kernel().kernel()).symbol()}, {"nodes", s.kernel().node()}});
      else steps.push_back({{"gemm", schema::GemmEpilogue_Name(s.gemm().epilogue())}, {"nodes", s.gemm().node()}});
    }
  j["steps"] = steps;
  j["arena_bytes"] = m->arena_bytes();
  j["weights_bytes"] = m->weights_bytes();
  nlohmann::json files = nlohmann::json::array();
  for (const auto& file : m->files()) files.push_back({{"path", file.path()}, {"size", file.size()}, {"xxh3", fmt::format("{:016x}", file.xxh3())}});
  j["files"] = files;
  fmt::print("{}\n", j.dump(2));
  return kExitOk;
}

int cmd_device() {
  std::string why;
  if (!cuda_device_available(&why)) {
    fmt::print("{}\n", why);
    return kExitNoGpu;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    fmt::print("a CUDA device is present but its properties could not be read\n");
    return kExitError;
  }
  fmt::print("GPU 0: {} (sm_{}{}), {} SMs, {:.1f} GiB\n", p.name, p.major, p.minor,
             p.multiProcessorCount, p.totalGlobalMem / double(1ull << 30));
  return kExitOk;
}

}  // namespace kiln::tools
