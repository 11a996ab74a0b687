#include "compiler/backend/nvrtc_compile.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

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

// The cubins this process compiled, by a hash of everything that goes into them. Bounded: at
// most kMemoryBytes of cubin, the oldest forgotten first.
class CubinMemory {
 public:
  static constexpr size_t kMemoryBytes = size_t{256} << 20;

  std::shared_ptr<const std::vector<uint8_t>> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cubins_.find(key);
    return it == cubins_.end() ? nullptr : it->second;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    cubins_.clear();
    order_.clear();
    bytes_ = 0;
  }

  void add(const std::string& key, std::vector<uint8_t> cubin) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cubin.size() > kMemoryBytes || cubins_.count(key) != 0) return;
    bytes_ += cubin.size();
    cubins_.emplace(key, std::make_shared<const std::vector<uint8_t>>(std::move(cubin)));
    order_.push_back(key);
    while (bytes_ > kMemoryBytes) {
      auto oldest = cubins_.find(order_.front());
      bytes_ -= oldest->second->size();
      cubins_.erase(oldest);
      order_.pop_front();
    }
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> cubins_;
  std::deque<std::string> order_;  // insertion order, for forgetting
  size_t bytes_ = 0;
};

CubinMemory& cubin_memory() {
  static CubinMemory* memory = new CubinMemory();  // never destroyed: no exit-order hazards
  return *memory;
}

// Everything a cubin depends on: NVRTC's version, the options, the source and every header.
std::string memory_key(const NvrtcModule& module, const std::vector<std::string>& options) {
  std::string all = nvrtc_version();
  for (const std::string& o : options) all += '\0' + o;
  all += '\0' + module.source;
  for (const auto& [name, text] : module.headers) all += '\0' + name + '\0' + text;
  return cache::hash128_hex(all);
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return fmt::format("{}.{}", major, minor);
}

Result<std::vector<uint8_t>> nvrtc_compile(const NvrtcModule& module, const std::string& arch,
                                           bool* remembered) {
  const std::vector<std::string> options = {"--gpu-architecture=" + arch, "--std=c++17"};
  const std::string key = memory_key(module, options);
  const std::shared_ptr<const std::vector<uint8_t>> known = cubin_memory().find(key);
  if (remembered != nullptr) *remembered = known != nullptr;
  if (known) return *known;
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

  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  rc = nvrtcCompileProgram(prog.get(), static_cast<int>(opts.size()), opts.data());
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
  cubin_memory().add(key, cubin);
  return cubin;
}

std::vector<Result<std::vector<uint8_t>>> nvrtc_compile_each(
    const std::vector<NvrtcModule>& modules, const std::string& arch, NvrtcCounts* counts,
    size_t threads) {
  std::vector<Result<std::vector<uint8_t>>> out(modules.size(), internal_error("not compiled"));
  std::atomic<int64_t> remembered{0};
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < modules.size(); i = next++) {
      bool known = false;
      out[i] = nvrtc_compile(modules[i], arch, &known);
      if (known) ++remembered;
    }
  };
  if (threads == 0) threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(threads, modules.size()); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (counts != nullptr)
    *counts = {static_cast<int64_t>(modules.size()) - remembered.load(), remembered.load()};
  return out;
}

void nvrtc_forget() { cubin_memory().clear(); }

}  // namespace kiln::compiler
