#include "cache/compatibility.h"

#include <charconv>
#include <optional>
#include <set>
#include <string_view>

#include "cache/manifest_io.h"

namespace kiln::cache {

namespace {

struct CudaVersion {
  int major = 0;
  int minor = 0;
};

std::string to_string(const CudaVersion& v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

// 13000 → 13.0 (cudaRuntimeGetVersion / cudaDriverGetVersion encoding: 1000·major + 10·minor).
std::optional<CudaVersion> from_encoded(int v) {
  if (v <= 0) return std::nullopt;
  return CudaVersion{v / 1000, (v % 1000) / 10};
}

// "13.0" → 13.0 (BuildFactors.nvrtc_version).
std::optional<CudaVersion> from_text(std::string_view s) {
  CudaVersion v;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v.major);
  if (ec != std::errc() || p == end || *p != '.') return std::nullopt;
  auto [q, ec2] = std::from_chars(p + 1, end, v.minor);
  if (ec2 != std::errc() || q != end || v.major <= 0) return std::nullopt;
  return v;
}

// The CUDA the cubins were made with: NVRTC produced them; the runtime version is a fallback.
std::optional<CudaVersion> built_with(const schema::BuildFactors& f) {
  if (auto v = from_text(f.nvrtc_version())) return v;
  return from_encoded(f.cuda_runtime_version());
}

std::string archs_of(const schema::Module& mod) {
  std::string out;
  for (const schema::Module::Cubin& c : mod.cubins()) out += (out.empty() ? "" : "/") + c.arch();
  return out.empty() ? "no arch" : out;
}

}  // namespace

Result<const schema::Module::Cubin*> module_cubin_for(const schema::Module& mod,
                                                      std::string_view arch) {
  const schema::Module::Cubin* variant = nullptr;
  for (const schema::Module::Cubin& c : mod.cubins()) {
    if (c.arch() == arch) return &c;
    if (c.arch().size() == arch.size() + 1 && c.arch().starts_with(arch) && c.arch().back() == 'a')
      variant = &c;
  }
  if (variant != nullptr) return variant;
  return failed_precondition("artifact built for " + archs_of(mod) + ", this GPU is " +
                             std::string(arch) + ": recompile with " + std::string(arch) +
                             " in the config's targets");
}

Status artifact_check_compatible(const schema::Manifest& m, const DeviceFacts& device) {
  const std::string key = m.key().empty() ? "artifact" : "artifact " + m.key();
  if (m.format_version() != kFormatVersion) {
    return failed_precondition(key + ": format " + std::to_string(m.format_version()) +
                               ", this kiln reads format " + std::to_string(kFormatVersion));
  }
  if (device.arch.empty()) return invalid_argument("device arch is empty, expected e.g. sm_90");
  std::set<uint32_t> used;  // modules that hold kernels; GEMM-only artifacts need no cubin
  for (const schema::Kernel& k : m.kernels()) used.insert(k.module());
  for (const uint32_t i : used) {
    if (i >= static_cast<uint32_t>(m.modules_size())) {
      return data_loss(key + ": a kernel refers to module " + std::to_string(i) + ", there are " +
                       std::to_string(m.modules_size()));
    }
    Result<const schema::Module::Cubin*> c =
        module_cubin_for(m.modules(static_cast<int>(i)), device.arch);
    if (!c.ok()) return c.status().with_context(key + " module " + std::to_string(i));
  }
  const std::optional<CudaVersion> need = built_with(m.factors());
  if (need && !used.empty()) {
    const std::optional<CudaVersion> have = from_encoded(device.driver_version);
    if (!have) {
      return failed_precondition(key + ": built with CUDA " + to_string(*need) +
                                 "; the driver version is unknown (" +
                                 std::to_string(device.driver_version) + ")");
    }
    // Cubins need a driver of at least their CUDA major version (minor versions are compatible).
    if (have->major < need->major) {
      return failed_precondition(key + ": built with CUDA " + to_string(*need) +
                                 "; this driver supports CUDA " + to_string(*have) +
                                 ": update the driver");
    }
  }
  return Status::ok_status();
}

}  // namespace kiln::cache
