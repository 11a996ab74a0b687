#include "compiler/backend/nvrtc_compile.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <fstream>

#include "cache/file_hash.h"

namespace kiln::compiler {
namespace {

// Saves the source where a user can open it; returns the path (or why it could not be saved).
std::string save_failed_source(const NvrtcModule& module) {
  std::error_code ec;
  auto dir = std::filesystem::temp_directory_path(ec);
  if (ec) return "(not saved: no temp directory)";
  auto path = dir / fmt::format("kiln-{}-{:016x}.cu", module.name,
                                cache::hash64(module.source.data(), module.source.size()));
  std::ofstream out(path);
  out << module.source;
  if (!out) return "(not saved: cannot write " + path.string() + ")";
  return path.string();
}

class Program {
 public:
  ~Program() {
    if (prog_) nvrtcDestroyProgram(&prog_);
  }
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);
  return log;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return fmt::format("{}.{}", major, minor);
}

Result<std::vector<uint8_t>> nvrtc_compile(const NvrtcModule& module, const std::string& arch) {
  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, text] : module.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  Program prog;
  nvrtcResult rc = nvrtcCreateProgram(
      prog.out(), module.source.c_str(), (module.name + ".cu").c_str(),
      static_cast<int>(header_texts.size()), header_texts.data(), header_names.data());
  if (rc != NVRTC_SUCCESS)
    return internal_error(
        fmt::format("nvrtcCreateProgram for {}: {}", module.name, nvrtcGetErrorString(rc)));

  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "--std=c++17"};
  rc = nvrtcCompileProgram(prog.get(), static_cast<int>(std::size(opts)), opts);
  if (rc != NVRTC_SUCCESS) {
    return internal_error(fmt::format(
        "NVRTC failed to compile {} for {}: {}\n{}\nsource saved to {}", module.name, arch,
        nvrtcGetErrorString(rc), program_log(prog.get()), save_failed_source(module)));
  }
  size_t size = 0;
  rc = nvrtcGetCUBINSize(prog.get(), &size);
  if (rc != NVRTC_SUCCESS || size == 0)
    return internal_error(fmt::format("NVRTC produced no cubin for {} ({}): {}", module.name, arch,
                                      nvrtcGetErrorString(rc)));
  std::vector<uint8_t> cubin(size);
  rc = nvrtcGetCUBIN(prog.get(), reinterpret_cast<char*>(cubin.data()));
  if (rc != NVRTC_SUCCESS)
    return internal_error(
        fmt::format("nvrtcGetCUBIN for {} ({}): {}", module.name, arch, nvrtcGetErrorString(rc)));
  return cubin;
}

}  // namespace kiln::compiler
