// The CUDA half of Model::load (model_state_upload): compatibility, weights, cubins, kernels,
// cuBLASLt (on its own thread beside the weights and cubins) — each phase timed into
// state.report.
#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cache/compatibility.h"
#include "runtime/cuda_check.h"
#include "runtime/file_map.h"
#include "runtime/gemm_plan.h"
#include "runtime/kernel_check.h"
#include "runtime/model_state.h"
#include "runtime/weights_upload.h"

namespace kiln::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

const schema::FileEntry* file_entry(const schema::Manifest& m, const std::string& path) {
  for (const auto& f : m.files())
    if (f.path() == path) return &f;
  return nullptr;  // unreachable after manifest_validate
}

// Creates the CUDA context (cudaFree(nullptr) is the documented way to force it, so its cost is
// counted here and not in the first allocation) and checks the artifact against this device.
Status device_init(ModelState& st) {
  int device = 0;
  KILN_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
  KILN_CUDA_TRY(cudaFree(nullptr), "creating the CUDA context on device " + std::to_string(device));
  st.device = device;  // from here on the destructor releases what was made on this device
  cache::DeviceFacts facts;
  KILN_ASSIGN_OR_RETURN(facts.arch, device_arch(device));
  KILN_CUDA_TRY(cudaDriverGetVersion(&facts.driver_version), "cudaDriverGetVersion");
  return cache::artifact_check_compatible(st.manifest, facts);
}

// The weights file, mapped and checked, with its device buffer already allocated (st.weights):
// the GEMM planning reads the buffer's address (for alignments) while the bytes upload.
struct WeightsSource {
  std::unique_ptr<FileMap> map;  // null: no weights
  const schema::FileEntry* entry = nullptr;
  std::filesystem::path path;
};

Result<WeightsSource> weights_prepare(ModelState& st, const LoadOptions& options) {
  const auto& m = st.manifest;
  st.report.weights_bytes = m.weights_bytes();
  WeightsSource w;
  w.entry = m.weights_bytes() == 0 ? nullptr : file_entry(m, m.weights_file());
  st.report.weights_strategy = weights_upload_choose(
      options.weights, w.entry ? *w.entry : schema::FileEntry(), options.verify);
  if (m.weights_bytes() == 0) return w;
  w.path = st.dir / m.weights_file();
  if (w.entry == nullptr) return internal_error("weights_file missing from files");
  KILN_ASSIGN_OR_RETURN(w.map, FileMap::open(st.dir, m.weights_file()));
  w.map->will_read_sequentially();
  KILN_RETURN_IF_ERROR(file_map_check(*w.map, w.path, m.weights_bytes(), w.entry->xxh3(), false));
  void* device = nullptr;
  KILN_CUDA_TRY(cudaMalloc(&device, w.map->size()),
                "cudaMalloc of " + std::to_string(w.map->size()) + " bytes for weights '" +
                    w.path.string() + "'");
  st.weights = device;
  return w;
}

Status weights_load(ModelState& st, const WeightsSource& w, const LoadOptions& options) {
  if (w.map == nullptr) return Status::ok_status();
  return weights_upload(*w.map, st.weights, st.report.weights_strategy, options.verify, *w.entry,
                        w.path.string(), options.upload_progress);
}

// The cuBLASLt handle and every GEMM's algorithm at every planned size (gemm_algos_prepare), on
// a thread of its own while the weights upload and the cubins load: cuBLASLt's first heuristic
// call in a process sets cuBLASLt up (about 100 ms on an H200), as long as a 1.7 GB upload. It
// touches only st.lt, st.workspace_bytes, st.gemm_algos and st.report.cublaslt_ms, and reads the
// manifest and st.weights (set before it starts); the destructor waits for it.
class GemmPlanning {
 public:
  explicit GemmPlanning(ModelState& st) : thread_([this, &st] { status_ = run(st); }) {}
  ~GemmPlanning() {
    if (thread_.joinable()) thread_.join();
  }
  GemmPlanning(const GemmPlanning&) = delete;
  GemmPlanning& operator=(const GemmPlanning&) = delete;
  Status wait() {
    thread_.join();
    return status_;
  }

 private:
  static Status run(ModelState& st) {
    const auto t0 = Clock::now();
    KILN_CUDA_TRY(cudaSetDevice(st.device), "cudaSetDevice for the GEMM planning");
    KILN_CUBLAS_TRY(cublasLtCreate(&st.lt), "cublasLtCreate");
    st.workspace_bytes = gemm_workspace_bytes(st.manifest);
    KILN_RETURN_IF_ERROR(gemm_algos_prepare(st));
    st.report.cublaslt_ms = ms_since(t0);
    return Status::ok_status();
  }
  Status status_;  // before thread_: set by the thread, which starts last
  std::thread thread_;
};

Status module_load(ModelState& st, const schema::Module::Cubin& cubin, bool verify) {
  const std::filesystem::path path = st.dir / cubin.path();
  KILN_ASSIGN_OR_RETURN(auto map, FileMap::open(st.dir, cubin.path()));
  const schema::FileEntry* entry = file_entry(st.manifest, cubin.path());
  if (entry == nullptr) return internal_error("cubin missing from files");
  KILN_RETURN_IF_ERROR(file_map_check(*map, path, entry->size(), entry->xxh3(), verify));
  if (map->size() == 0) return data_loss("cubin '" + path.string() + "' is empty");
  cudaLibrary_t lib = nullptr;
  KILN_CUDA_TRY(cudaLibraryLoadData(&lib, map->data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                "cudaLibraryLoadData('" + path.string() + "', " + cubin.arch() + ")");
  st.libraries.push_back(lib);
  return Status::ok_status();
}

Status cubins_load(ModelState& st, const std::string& arch, bool verify) {
  const auto& m = st.manifest;
  std::vector<bool> used(static_cast<size_t>(m.modules_size()), false);
  for (const auto& k : m.kernels()) used[k.module()] = true;
  std::vector<const schema::Module::Cubin*> cubins;  // null: a module no kernel uses
  for (int i = 0; i < m.modules_size(); ++i) {
    cubins.push_back(nullptr);
    if (!used[static_cast<size_t>(i)]) {
      st.libraries.push_back(nullptr);
      continue;
    }
    Result<const schema::Module::Cubin*> c = cache::module_cubin_for(m.modules(i), arch);
    if (!c.ok()) return c.status().with_context("module " + std::to_string(i));
    cubins.back() = *c;
    KILN_RETURN_IF_ERROR(module_load(st, **c, verify));
  }
  for (int i = 0; i < m.kernels_size(); ++i) {
    const auto& k = m.kernels(i);
    cudaKernel_t kernel = nullptr;
    KILN_CUDA_TRY(cudaLibraryGetKernel(&kernel, st.libraries[k.module()], k.symbol().c_str()),
                  "kernel '" + k.symbol() + "' in '" + cubins[k.module()]->path() + "' (module " +
                      std::to_string(k.module()) + ")");
    st.kernels.push_back(kernel);
  }
  return kernels_prepare(st);
}

// Programmatic dependent launch: asked for, not turned off by KILN_PDL=0, supported by the
// artifact's kernels, and a GPU of compute capability 9.0 or later ("sm_90" and up).
bool programmatic_launch_wanted(const schema::Manifest& m, const std::string& arch,
                                const LoadOptions& options) {
  const char* env = std::getenv("KILN_PDL");
  if (!options.programmatic_launch || (env != nullptr && std::string_view(env) == "0"))
    return false;
  if (!m.kernels_wait_for_dependencies() || !arch.starts_with("sm_")) return false;
  return std::atoi(arch.c_str() + 3) >= 90;
}

}  // namespace

Status model_state_upload(ModelState& st, const LoadOptions& options) {
  LoadReport& report = st.report;
  report.verified = options.verify;
  auto t0 = Clock::now();
  KILN_RETURN_IF_ERROR(device_init(st));
  KILN_ASSIGN_OR_RETURN(std::string arch, device_arch(st.device));
  st.programmatic_launch = programmatic_launch_wanted(st.manifest, arch, options);
  report.programmatic_launch = st.programmatic_launch;
  report.device_init_ms = ms_since(t0);

  t0 = Clock::now();
  KILN_ASSIGN_OR_RETURN(WeightsSource weights, weights_prepare(st, options));
  GemmPlanning planning(st);  // beside the upload and the cubins (returning early waits for it)
  KILN_RETURN_IF_ERROR(weights_load(st, weights, options));
  report.weights_ms = ms_since(t0);

  t0 = Clock::now();
  KILN_RETURN_IF_ERROR(cubins_load(st, arch, options.verify));
  report.cubin_ms = ms_since(t0);
  KILN_RETURN_IF_ERROR(planning.wait());
  return Status::ok_status();
}

}  // namespace kiln::runtime
