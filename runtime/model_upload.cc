// The CUDA half of Model::load (model_state_upload): arch check, weights, cubins, kernels.
#include <string>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/file_map.h"
#include "runtime/kernel_check.h"
#include "runtime/model_state.h"

namespace kiln::runtime {
namespace {

const schema::FileEntry* file_entry(const schema::Manifest& m, const std::string& path) {
  for (const auto& f : m.files())
    if (f.path() == path) return &f;
  return nullptr;  // unreachable after manifest_validate
}

// The cubin of `mod` for `arch`: an exact match, else the arch-specific "a" variant (sm_90a).
Result<const schema::Module::Cubin*> cubin_pick(const schema::Module& mod, int index,
                                                const std::string& arch) {
  const schema::Module::Cubin* variant = nullptr;
  std::string built;
  for (const auto& c : mod.cubins()) {
    if (c.arch() == arch) return &c;
    if (c.arch() == arch + "a") variant = &c;
    built += (built.empty() ? "" : "/") + c.arch();
  }
  if (variant != nullptr) return variant;
  return failed_precondition("artifact built for " + built + ", this GPU is " + arch + " (module " +
                             std::to_string(index) + " has no cubin for " + arch + ")");
}

Status weights_upload(ModelState& st) {
  const auto& m = st.manifest;
  if (m.weights_bytes() == 0) return Status::ok_status();
  const std::filesystem::path path = st.dir / m.weights_file();
  KILN_ASSIGN_OR_RETURN(auto map, FileMap::open(path));
  const schema::FileEntry* entry = file_entry(m, m.weights_file());
  if (entry == nullptr) return internal_error("weights_file missing from files");
  KILN_RETURN_IF_ERROR(file_map_check(*map, path, m.weights_bytes(), entry->xxh3()));
  void* device = nullptr;
  KILN_CUDA_TRY(cudaMalloc(&device, map->size()), "cudaMalloc of " + std::to_string(map->size()) +
                                                      " bytes for weights '" + path.string() + "'");
  st.weights = device;
  KILN_CUDA_TRY(cudaMemcpy(st.weights, map->data(), map->size(), cudaMemcpyHostToDevice),
                "cudaMemcpy of weights '" + path.string() + "' to the device");
  return Status::ok_status();
}

Status module_load(ModelState& st, const schema::Module::Cubin& cubin) {
  const std::filesystem::path path = st.dir / cubin.path();
  KILN_ASSIGN_OR_RETURN(auto map, FileMap::open(path));
  const schema::FileEntry* entry = file_entry(st.manifest, cubin.path());
  if (entry == nullptr) return internal_error("cubin missing from files");
  KILN_RETURN_IF_ERROR(file_map_check(*map, path, entry->size(), entry->xxh3()));
  if (map->size() == 0) return data_loss("cubin '" + path.string() + "' is empty");
  cudaLibrary_t lib = nullptr;
  KILN_CUDA_TRY(cudaLibraryLoadData(&lib, map->data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                "cudaLibraryLoadData('" + path.string() + "', " + cubin.arch() + ")");
  st.libraries.push_back(lib);
  return Status::ok_status();
}

}  // namespace

Status model_state_upload(ModelState& st) {
  const auto& m = st.manifest;
  int device = 0;
  KILN_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
  st.device = device;  // from here on the destructor releases what was made on this device
  KILN_ASSIGN_OR_RETURN(std::string arch, device_arch(device));
  std::vector<bool> used(static_cast<size_t>(m.modules_size()), false);
  for (const auto& k : m.kernels()) used[k.module()] = true;
  std::vector<const schema::Module::Cubin*> cubins;  // null: a module no kernel uses
  for (int i = 0; i < m.modules_size(); ++i) {
    cubins.push_back(nullptr);
    if (!used[static_cast<size_t>(i)]) continue;
    KILN_ASSIGN_OR_RETURN(cubins.back(), cubin_pick(m.modules(i), i, arch));
  }
  KILN_RETURN_IF_ERROR(weights_upload(st));
  for (const auto* c : cubins) {
    if (c == nullptr) {
      st.libraries.push_back(nullptr);
      continue;
    }
    KILN_RETURN_IF_ERROR(module_load(st, *c));
  }
  for (int i = 0; i < m.kernels_size(); ++i) {
    const auto& k = m.kernels(i);
    cudaKernel_t kernel = nullptr;
    const auto& cubin = *cubins[k.module()];
    KILN_CUDA_TRY(cudaLibraryGetKernel(&kernel, st.libraries[k.module()], k.symbol().c_str()),
                  "kernel '" + k.symbol() + "' in '" + cubin.path() + "' (module " +
                      std::to_string(k.module()) + ")");
    st.kernels.push_back(kernel);
  }
  KILN_RETURN_IF_ERROR(kernels_prepare(st));
  KILN_CUBLAS_TRY(cublasLtCreate(&st.lt), "cublasLtCreate");
  return Status::ok_status();
}

}  // namespace kiln::runtime
