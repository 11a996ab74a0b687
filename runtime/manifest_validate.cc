#include "runtime/manifest_validate.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "cache/cache_layout.h"
#include "cache/dtype.h"
#include "cache/file_blocks.h"
#include "cache/kernel_signature.h"
#include "cache/manifest_io.h"
#include "runtime/dim_math.h"

namespace kiln::runtime {

Status manifest_invalid(const std::string& message) {
  return invalid_argument("manifest: " + message);
}

namespace {

using schema::Manifest;

Status sizes_validate(const google::protobuf::RepeatedField<uint32_t>& sizes,
                      const std::string& field, uint32_t max_size) {
  for (int i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 1 || sizes[i] > max_size)
      return manifest_invalid(field + "[" + std::to_string(i) + "] = " + std::to_string(sizes[i]) +
                              " is outside [1, max_size " + std::to_string(max_size) + "]");
    if (i > 0 && sizes[i] <= sizes[i - 1])
      return manifest_invalid(field +
                              " must be sorted and unique: " + std::to_string(sizes[i - 1]) +
                              " is followed by " + std::to_string(sizes[i]));
  }
  return Status::ok_status();
}

Status config_validate(const Manifest& m) {
  const auto& c = m.config();
  if (c.max_size() < 1) return manifest_invalid("config.max_size is 0; it must be >= 1");
  if (c.max_size() > static_cast<uint32_t>(INT32_MAX))
    return manifest_invalid("config.max_size " + std::to_string(c.max_size()) + " exceeds 2^31-1");
  if (c.mode() == schema::CUDA_GRAPH_MODE_UNSPECIFIED || !schema::CudaGraphMode_IsValid(c.mode()))
    return manifest_invalid("config.mode is unspecified or unknown (value " +
                            std::to_string(c.mode()) + ")");
  const std::string& p = c.precision();
  if (p != "fp32" && p != "tf32" && p != "fp16" && p != "bf16")
    return manifest_invalid("config.precision '" + p + "' is not one of fp32, tf32, fp16, bf16");
  KILN_RETURN_IF_ERROR(
      sizes_validate(c.cudagraph_capture_sizes(), "config.cudagraph_capture_sizes", c.max_size()));
  return sizes_validate(c.compile_sizes(), "config.compile_sizes", c.max_size());
}

const schema::FileEntry* file_find(const Manifest& m, const std::string& path) {
  for (const auto& f : m.files())
    if (f.path() == path) return &f;
  return nullptr;
}

Status files_validate(const Manifest& m) {
  std::set<std::string> seen;
  for (int i = 0; i < m.files_size(); ++i) {
    const auto& f = m.files(i);
    const std::string label = "files[" + std::to_string(i) + "] ('" + f.path() + "')";
    if (!cache::artifact_path_safe(f.path()))
      return manifest_invalid(label + ": not a safe artifact-relative path");
    if (!seen.insert(f.path()).second) return manifest_invalid(label + ": listed twice");
    if (const std::string p = cache::file_blocks_problem(f); !p.empty())
      return manifest_invalid(label + ": " + p);
    if (f.role() == schema::FILE_ROLE_UNSPECIFIED || !schema::FileRole_IsValid(f.role()))
      return manifest_invalid(label + ": role is unspecified or unknown (value " +
                              std::to_string(f.role()) + ")");
  }
  if (m.weights_file().empty()) {
    if (m.weights_bytes() != 0)
      return manifest_invalid("weights_bytes is " + std::to_string(m.weights_bytes()) +
                              " but weights_file is empty");
    return Status::ok_status();
  }
  const schema::FileEntry* w = file_find(m, m.weights_file());
  if (w == nullptr)
    return manifest_invalid("weights_file '" + m.weights_file() + "' is not listed in files");
  if (w->role() != schema::FILE_ROLE_WEIGHTS)
    return manifest_invalid("weights_file '" + m.weights_file() +
                            "' is not listed with role WEIGHTS");
  if (w->size() != m.weights_bytes())
    return manifest_invalid("weights_file '" + m.weights_file() + "' has size " +
                            std::to_string(w->size()) + " but weights_bytes is " +
                            std::to_string(m.weights_bytes()));
  return Status::ok_status();
}

Status buffer_validate(const Manifest& m, int index) {
  const auto& b = m.buffers(index);
  const std::string label = buffer_label(m, static_cast<uint32_t>(index));
  const int64_t max = m.config().max_size();
  if (b.location() != schema::Buffer::LOCATION_ARENA &&
      b.location() != schema::Buffer::LOCATION_WEIGHTS)
    return manifest_invalid(label + ": location is unspecified or unknown (value " +
                            std::to_string(b.location()) + ")");
  if (!dtype_valid(b.dtype()))
    return manifest_invalid(label + ": dtype is unspecified or unknown (value " +
                            std::to_string(b.dtype()) + ")");
  if (b.offset() % 256 != 0)
    return manifest_invalid(label + ": offset " + std::to_string(b.offset()) +
                            " is not 256-aligned");
  for (int j = 0; j < b.dims_size(); ++j) {
    const auto& d = b.dims(j);
    const std::string dl = label + ": dim " + std::to_string(j) + " (" + dim_string(d) + ")";
    if (d.coef() < 0) return manifest_invalid(dl + " has a negative coefficient");
    auto at1 = dim_eval(d, 1);
    if (!at1 || *at1 < 0) return manifest_invalid(dl + " is negative at S=1");
    if (!dim_eval(d, max))
      return manifest_invalid(dl + " overflows at max_size " + std::to_string(max));
  }
  auto numel = dims_numel(b.dims(), max);
  auto bytes =
      numel ? checked_mul(*numel, static_cast<int64_t>(dtype_size(static_cast<DType>(b.dtype()))))
            : std::nullopt;
  if (!bytes)
    return manifest_invalid(label + ": byte size overflows at max_size " + std::to_string(max));
  const bool arena = b.location() == schema::Buffer::LOCATION_ARENA;
  const uint64_t limit = arena ? m.arena_bytes() : m.weights_bytes();
  const uint64_t end = b.offset() + static_cast<uint64_t>(*bytes);
  if (b.offset() > limit || static_cast<uint64_t>(*bytes) > limit - b.offset())
    return manifest_invalid(label + ": bytes [" + std::to_string(b.offset()) + ", " +
                            std::to_string(end) + ") at max_size " + std::to_string(max) +
                            " exceed " + (arena ? "arena_bytes " : "weights_bytes ") +
                            std::to_string(limit));
  return Status::ok_status();
}

Status io_validate(const Manifest& m,
                   const google::protobuf::RepeatedPtrField<schema::IoBinding>& ios,
                   const std::string& kind) {
  std::set<std::string> names;
  for (int i = 0; i < ios.size(); ++i) {
    const auto& io = ios[i];
    const std::string label = kind + " " + std::to_string(i) + " ('" + io.name() + "')";
    if (io.name().empty()) return manifest_invalid(label + ": empty name");
    if (!names.insert(io.name()).second) return manifest_invalid(label + ": name used twice");
    if (!dtype_valid(io.dtype()))
      return manifest_invalid(label + ": dtype is unspecified or unknown (value " +
                              std::to_string(io.dtype()) + ")");
    if (io.buffer() >= static_cast<uint32_t>(m.buffers_size()))
      return manifest_invalid(label + ": buffer index " + std::to_string(io.buffer()) +
                              " is out of range (" + std::to_string(m.buffers_size()) +
                              " buffers)");
    const auto& b = m.buffers(static_cast<int>(io.buffer()));
    const std::string bl = buffer_label(m, io.buffer());
    if (b.location() != schema::Buffer::LOCATION_ARENA)
      return manifest_invalid(label + ": bound to " + bl + " which is not an arena buffer");
    if (b.dtype() != io.dtype())
      return manifest_invalid(
          label + ": dtype " + std::string(dtype_name(static_cast<DType>(io.dtype()))) +
          " differs from " + bl + "'s " + std::string(dtype_name(static_cast<DType>(b.dtype()))));
    if (b.dims_size() != io.dims_size())
      return manifest_invalid(label + ": " + std::to_string(io.dims_size()) + " dims but " + bl +
                              " has " + std::to_string(b.dims_size()));
    int size_axis = -1;
    for (int j = 0; j < io.dims_size(); ++j) {
      const auto& d = io.dims(j);
      if (d.coef() != b.dims(j).coef() || d.offset() != b.dims(j).offset())
        return manifest_invalid(label + ": dim " + std::to_string(j) + " is " + dim_string(d) +
                                " but " + bl + "'s is " + dim_string(b.dims(j)));
      if (d.coef() == 0) continue;
      if (size_axis >= 0)
        return manifest_invalid(label + ": dims " + std::to_string(size_axis) + " and " +
                                std::to_string(j) + " both depend on S; at most one axis may");
      size_axis = j;
    }
    if (io.size_axis() != size_axis)
      return manifest_invalid(label + ": size_axis is " + std::to_string(io.size_axis()) +
                              " but the axis " + "that depends on S is " +
                              std::to_string(size_axis));
  }
  return Status::ok_status();
}

Status modules_validate(const Manifest& m) {
  std::set<uint32_t> used;  // modules with kernels; an unused module may be empty
  for (const auto& k : m.kernels()) used.insert(k.module());
  for (int i = 0; i < m.modules_size(); ++i) {
    const auto& mod = m.modules(i);
    const std::string label = "module " + std::to_string(i);
    if (mod.cubins_size() == 0 && used.count(static_cast<uint32_t>(i)) != 0)
      return manifest_invalid(label + ": no cubins, but kernels live in it");
    std::set<std::string> archs;
    for (const auto& c : mod.cubins()) {
      if (c.arch().rfind("sm_", 0) != 0 || c.arch().size() < 4)
        return manifest_invalid(label + ": cubin arch '" + c.arch() +
                                "' is not of the form sm_<NN>");
      if (!archs.insert(c.arch()).second)
        return manifest_invalid(label + ": two cubins for arch " + c.arch());
      const schema::FileEntry* f = file_find(m, c.path());
      if (f == nullptr || f->role() != schema::FILE_ROLE_CUBIN)
        return manifest_invalid(label + ": cubin '" + c.path() + "' (" + c.arch() +
                                ") is not listed in files with role CUBIN");
    }
  }
  for (int i = 0; i < m.kernels_size(); ++i) {
    const auto& k = m.kernels(i);
    const std::string label = "kernel " + std::to_string(i) + " ('" + k.symbol() + "')";
    if (k.symbol().empty() || k.symbol().find('\0') != std::string::npos)
      return manifest_invalid(label + ": empty or invalid symbol");
    if (k.module() >= static_cast<uint32_t>(m.modules_size()))
      return manifest_invalid(label + ": module index " + std::to_string(k.module()) +
                              " is out of range (" + std::to_string(m.modules_size()) +
                              " modules)");
    if (k.specialised_size() > m.config().max_size())
      return manifest_invalid(label + ": specialised_size " + std::to_string(k.specialised_size()) +
                              " exceeds max_size " + std::to_string(m.config().max_size()));
    // Every kernel carries its parameter signature (checked against the steps in
    // manifest_validate_program.cc); "_s<size>" in the symbol is its specialised_size.
    Result<cache::KernelSymbolParts> parts = cache::kernel_symbol_parse(k.symbol());
    if (!parts.ok()) return manifest_invalid(label + ": " + parts.status().message());
    if (parts->specialised != k.specialised_size())
      return manifest_invalid(
          label + ": the symbol is for size " + std::to_string(parts->specialised) +
          " (0: general) but specialised_size is " + std::to_string(k.specialised_size()));
  }
  return Status::ok_status();
}

}  // namespace

std::string buffer_label(const Manifest& m, uint32_t index) {
  std::string label = "buffer " + std::to_string(index);
  if (index < static_cast<uint32_t>(m.buffers_size()))
    label += " ('" + m.buffers(static_cast<int>(index)).name() + "')";
  return label;
}

std::vector<int64_t> manifest_check_sizes(const Manifest& m) {
  std::vector<int64_t> sizes = {1, static_cast<int64_t>(m.config().max_size())};
  for (uint32_t s : m.config().cudagraph_capture_sizes()) sizes.push_back(s);
  for (uint32_t s : m.config().compile_sizes()) sizes.push_back(s);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

Status manifest_validate(const Manifest& m) {
  if (m.format_version() != cache::kFormatVersion)
    return manifest_invalid("format_version " + std::to_string(m.format_version()) +
                            ", this runtime reads " + std::to_string(cache::kFormatVersion));
  KILN_RETURN_IF_ERROR(config_validate(m));
  KILN_RETURN_IF_ERROR(files_validate(m));
  for (int i = 0; i < m.buffers_size(); ++i) KILN_RETURN_IF_ERROR(buffer_validate(m, i));
  KILN_RETURN_IF_ERROR(io_validate(m, m.inputs(), "input"));
  if (m.outputs_size() == 0) return manifest_invalid("no outputs");
  KILN_RETURN_IF_ERROR(io_validate(m, m.outputs(), "output"));
  KILN_RETURN_IF_ERROR(modules_validate(m));
  KILN_RETURN_IF_ERROR(generation_validate(m));
  return program_validate(m);
}

}  // namespace kiln::runtime
