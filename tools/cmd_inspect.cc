// kiln verify | inspect | device.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "cache/artifact_signature.h"
#include "cache/cache_scan.h"
#include "cache/compatibility.h"
#include "cache/manifest_io.h"
#include "kiln/model.h"
#include "runtime/size_gate.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

using nlohmann::json;

json dims_json(const google::protobuf::RepeatedPtrField<schema::DimExpr>& dims) {
  json out = json::array();
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

template <typename T>
std::vector<T> vec(const google::protobuf::RepeatedField<T>& r) {
  return {r.begin(), r.end()};
}
std::vector<std::string> vec(const google::protobuf::RepeatedPtrField<std::string>& r) {
  return {r.begin(), r.end()};
}

// The facts of GPU 0, or nullopt with the reason in `why`.
std::optional<cache::DeviceFacts> device_facts(std::string* why) {
  if (!cuda_device_available(why)) return std::nullopt;
  cudaDeviceProp p{};
  int driver = 0;
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess ||
      cudaDriverGetVersion(&driver) != cudaSuccess) {
    *why = "a CUDA device is present but its properties could not be read";
    return std::nullopt;
  }
  return cache::DeviceFacts{fmt::format("sm_{}{}", p.major, p.minor), driver};
}

struct PieceLaunches {
  int kernels = 0, gemms = 0;
};
PieceLaunches piece_launches(const schema::Piece& piece) {
  PieceLaunches l;
  for (const auto& s : piece.steps()) (s.has_kernel() ? l.kernels : l.gemms) += 1;
  return l;
}

// The padded sizes a run can have: the capture sizes and the compile sizes, ascending.
std::vector<int64_t> run_sizes(const schema::Manifest& m) {
  std::vector<int64_t> out(m.config().cudagraph_capture_sizes().begin(),
                           m.config().cudagraph_capture_sizes().end());
  out.insert(out.end(), m.config().compile_sizes().begin(), m.config().compile_sizes().end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Launches one run at padded size p makes, counted as the runtime gates them
// (runtime/size_gate.h): kernel steps that run there on the chosen route, GEMM steps that
// cuBLASLt computes there (not their skinny kernel's sizes).
int launches_at(const schema::Manifest& m, int64_t p, bool decode_route) {
  int n = 0;
  for (const auto& piece : m.pieces())
    for (int i = 0; i < piece.steps_size(); ++i) {
      const schema::Step& s = piece.steps(i);
      if (s.has_kernel())
        n += runtime::kernel_step_runs_at(piece.steps(), i, p) &&
             runtime::kernel_step_on_route(s.kernel(), decode_route, p);
      else if (s.has_gemm())
        n += !runtime::gemm_step_is_skinny_at(s.gemm(), p);
    }
  return n;
}

// Whether some step runs on one route only (generation programs: the decode route).
bool has_routes(const schema::Manifest& m) {
  for (const auto& piece : m.pieces())
    for (const auto& s : piece.steps())
      if (s.has_kernel() && (s.kernel().skip_on_decode() || s.kernel().decode_only())) return true;
  return false;
}

json entry_json(const cache::ScannedEntry& e) {
  json j;
  j["key"] = e.key;
  j["dir"] = e.dir.string();
  j["intact"] = e.status.ok();
  if (!e.status.ok()) j["error"] = e.status.message();
  if (!e.manifest) return j;
  const schema::Manifest& m = *e.manifest;
  const auto& c = m.config();
  const auto& f = m.factors();
  j["model"] = m.model_name();
  j["targets"] = vec(f.targets());
  j["capture_sizes"] = vec(c.cudagraph_capture_sizes());
  j["compile_sizes"] = vec(c.compile_sizes());
  json kernels = json::array();
  for (const auto& k : m.kernels())
    kernels.push_back({{"symbol", k.symbol()},
                       {"module", k.module()},
                       {"specialised_size", k.specialised_size()}});
  j["kernels"] = kernels;
  json files = json::array();
  for (const auto& file : m.files()) {
    files.push_back({{"path", file.path()},
                     {"size", file.size()},
                     {"xxh3", fmt::format("{:016x}", file.xxh3())},
                     {"role", schema::FileRole_Name(file.role())}});
  }
  j["files"] = files;
  j["weights_bytes"] = m.weights_bytes();
  j["arena_bytes"] = m.arena_bytes();
  j["format_version"] = m.format_version();
  j["factors"] = {{"compiler_version", f.compiler_version()},
                  {"format_version", f.format_version()},
                  {"cuda_runtime_version", f.cuda_runtime_version()},
                  {"nvrtc_version", f.nvrtc_version()},
                  {"cublaslt_version", f.cublaslt_version()},
                  {"targets", vec(f.targets())},
                  {"model_hash", f.model_hash()},
                  {"config_hash", f.config_hash()}};
  j["config"] = {{"size_dim", c.size_dim()},
                 {"max_size", c.max_size()},
                 {"precision", c.precision()},
                 {"targets", vec(c.targets())},
                 {"mode", schema::CudaGraphMode_Name(c.mode())},
                 {"compile_sizes", vec(c.compile_sizes())},
                 {"level", c.has_compilation_level() ? c.compilation_level() : 3},
                 {"cudagraph_capture_sizes", vec(c.cudagraph_capture_sizes())}};
  for (const auto* list : {&m.inputs(), &m.outputs()}) {
    json arr = json::array();
    for (const auto& io : *list)
      arr.push_back({{"name", io.name()},
                     {"dtype", schema::DType_Name(io.dtype())},
                     {"dims", dims_json(io.dims())}});
    j[list == &m.inputs() ? "inputs" : "outputs"] = arr;
  }
  json steps = json::array();
  for (const auto& piece : m.pieces())
    for (const auto& s : piece.steps()) {
      if (s.has_kernel() && s.kernel().kernel() < static_cast<uint32_t>(m.kernels_size())) {
        json step = {{"kernel", m.kernels(static_cast<int>(s.kernel().kernel())).symbol()},
                     {"nodes", s.kernel().node()}};
        json tuned = json::array();
        for (const auto& t : s.kernel().tuned())
          tuned.push_back({{"size", t.size()},
                           {"config", t.config()},
                           {"source", t.source()},
                           {"block", t.block()},
                           {"ms", t.ms()},
                           {"default_ms", t.default_ms()}});
        if (!tuned.empty()) step["tuned"] = tuned;
        steps.push_back(step);
      }
      else if (s.has_gemm())
        steps.push_back(
            {{"gemm", schema::GemmEpilogue_Name(s.gemm().epilogue())}, {"nodes", s.gemm().node()}});
    }
  j["steps"] = steps;
  json pieces = json::array();
  for (int p = 0; p < m.pieces_size(); ++p) {
    const PieceLaunches l = piece_launches(m.pieces(p));
    pieces.push_back({{"index", p},
                      {"kind", m.pieces(p).is_attention() ? "attention" : "compute"},
                      {"launches", l.kernels + l.gemms},
                      {"kernel_launches", l.kernels},
                      {"gemm_launches", l.gemms}});
  }
  j["pieces"] = pieces;
  json by_size = json::array();
  for (int64_t p : run_sizes(m)) {
    json row = {{"size", p}, {"launches", launches_at(m, p, false)}};
    if (has_routes(m)) row["decode_route_launches"] = launches_at(m, p, true);
    by_size.push_back(row);
  }
  j["launches_by_size"] = by_size;
  return j;
}

// "  piece 0 compute    6 launches (2 kernels, 4 GEMMs): ln_1, attn.c_attn+..., ..."
void print_pieces(const schema::Manifest& m) {
  int total = 0;
  for (int p = 0; p < m.pieces_size(); ++p) {
    const auto& piece = m.pieces(p);
    const PieceLaunches l = piece_launches(piece);
    total += l.kernels + l.gemms;
    std::vector<std::string> nodes;
    for (const auto& s : piece.steps())
      nodes.push_back(s.has_kernel() ? s.kernel().node() : s.gemm().node());
    std::string list = fmt::format("{}", fmt::join(nodes, ", "));
    if (list.size() > 100) list = list.substr(0, 97) + "...";
    fmt::print("  piece {:>3} {:<9} {:>3} launches ({} kernels, {} GEMMs): {}\n", p,
               piece.is_attention() ? "attention" : "compute", l.kernels + l.gemms, l.kernels,
               l.gemms, list);
  }
  fmt::print("  total: {} launch steps in {} pieces\n", total, m.pieces_size());
  // Gated steps run at some sizes only (a skinny kernel or cuBLASLt; a norm its skinny kernel
  // applies): what one run makes at each size.
  std::vector<std::string> counts, decode;
  for (int64_t p : run_sizes(m)) {
    counts.push_back(fmt::format("{}: {}", p, launches_at(m, p, false)));
    decode.push_back(fmt::format("{}: {}", p, launches_at(m, p, true)));
  }
  if (counts.empty()) return;
  fmt::print("  launches per run, by padded size: {}\n", fmt::join(counts, ", "));
  if (has_routes(m)) fmt::print("  on the decode route: {}\n", fmt::join(decode, ", "));
}

// "  tuned size 64: ln_1: 'threads=64 rows=4' 0.0102 ms, default 0.0113 ms (autotune)"; the
// first launch of each kernel, as launches of one kernel share a decision.
void print_tuned(const schema::Manifest& m) {
  std::vector<std::string> lines;
  std::vector<std::pair<uint32_t, uint32_t>> seen;  // (default kernel, size)
  int improved = 0;
  for (const auto& piece : m.pieces())
    for (const auto& s : piece.steps()) {
      if (!s.has_kernel()) continue;
      for (const auto& t : s.kernel().tuned()) {
        const std::pair<uint32_t, uint32_t> key{s.kernel().kernel(), t.size()};
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
        seen.push_back(key);
        const bool is_default = s.kernel().specialised().count(t.size()) != 0 &&
                                s.kernel().specialised().at(t.size()) == t.kernel();
        improved += is_default ? 0 : 1;
        std::string node = s.kernel().node();  // fused steps list every node: keep the first
        if (node.size() > 60) node = node.substr(0, 57) + "...";
        lines.push_back(fmt::format("    size {}: {}: '{}'{} {:.4f} ms, default {:.4f} ms ({})",
                                    t.size(), node, t.config(),
                                    is_default ? " (default)" : "", t.ms(), t.default_ms(),
                                    t.source()));
      }
    }
  if (lines.empty()) return;
  fmt::print("  tuned launch configurations: {} decisions, {} not the default\n", lines.size(),
             improved);
  for (const auto& l : lines) fmt::print("{}\n", l);
}

std::string join_sizes(const google::protobuf::RepeatedField<uint32_t>& r) {
  return r.empty() ? "-" : fmt::format("{}", fmt::join(r, ","));
}

void print_table(const std::string& dir, const std::vector<cache::ScannedEntry>& entries) {
  fmt::print("{} (format {}): {} entr{}\n", dir, cache::kFormatVersion, entries.size(),
             entries.size() == 1 ? "y" : "ies");
  fmt::print("{:<32}  {:<16}  {:<12}  {:<10}  {:<18}  {:>7}  {:>12}  {}\n", "KEY", "MODEL",
             "TARGETS", "COMPILE", "CAPTURE", "KERNELS", "WEIGHTS", "STATUS");
  for (const auto& e : entries) {
    const std::string status = e.status.ok() ? "ok" : "CORRUPT: " + e.status.message();
    if (!e.manifest) {
      fmt::print("{:<32}  {}\n", e.key, status);
      continue;
    }
    const auto& m = *e.manifest;
    fmt::print("{:<32}  {:<16}  {:<12}  {:<10}  {:<18}  {:>7}  {:>12}  {}\n", e.key, m.model_name(),
               fmt::format("{}", fmt::join(m.factors().targets(), ",")),
               join_sizes(m.config().compile_sizes()),
               join_sizes(m.config().cudagraph_capture_sizes()), m.kernels_size(),
               m.weights_bytes(), status);
  }
  for (const auto& e : entries) {
    if (!e.manifest) continue;
    const auto& c = e.manifest->config();
    fmt::print("\n{} ({}, {}, level {}):\n", e.key, e.manifest->model_name(), c.precision(),
               c.has_compilation_level() ? c.compilation_level() : 3);
    print_pieces(*e.manifest);
    print_tuned(*e.manifest);
  }
}

}  // namespace

int cmd_verify(const std::string& dir, bool as_json, const std::vector<std::string>& trust) {
  const auto start = std::chrono::steady_clock::now();
  auto trusted = trusted_keys_read(trust);
  if (!trusted.ok()) {
    fmt::print(stderr, "kiln verify: {}\n", trusted.status().message());
    return kExitError;
  }
  auto entries = cache::cache_entries(dir, cache::ScanDepth::kVerify);
  if (!entries.ok()) {
    fmt::print(stderr, "kiln verify: FAILED: {}\n", entries.status().message());
    return kExitError;
  }
  std::string why;
  const std::optional<cache::DeviceFacts> device = device_facts(&why);
  int failed = 0;
  uint64_t total = 0;
  json rows = json::array();
  for (const cache::ScannedEntry& e : *entries) {
    Status st = e.status;
    std::string signer;
    if (st.ok() && !trusted->empty()) {
      Result<cache::PublicKey> by = cache::artifact_signature_check(e.dir, *e.manifest, *trusted);
      st = by.status();
      if (by.ok()) signer = cache::public_key_hex(*by);
    }
    if (st.ok() && device) st = cache::artifact_check_compatible(*e.manifest, *device);
    if (!st.ok()) {
      ++failed;
      rows.push_back({{"dir", e.dir.string()}, {"ok", false}, {"error", st.message()}});
      fmt::print(stderr, "kiln verify: FAILED {}: {}\n", e.dir.string(), st.message());
      continue;
    }
    uint64_t bytes = 0;
    for (const auto& f : e.manifest->files()) bytes += f.size();
    total += bytes;
    rows.push_back({{"dir", e.dir.string()},
                    {"ok", true},
                    {"format_version", e.manifest->format_version()},
                    {"files", e.manifest->files_size()},
                    {"bytes", bytes}});
    if (!signer.empty()) rows.back()["signed_by"] = signer;
    if (!as_json)
      fmt::print("kiln verify: OK {} — manifest format {}, {} files, {} bytes hash-checked{}{}\n",
                 e.dir.string(), e.manifest->format_version(), e.manifest->files_size(), bytes,
                 signer.empty() ? "" : ", signed by trusted key " + signer,
                 device ? fmt::format(", loadable on this GPU ({})", device->arch) : "");
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (as_json) {
    const json out = {{"entries", rows},
                      {"intact", static_cast<int64_t>(entries->size()) - failed},
                      {"failed", failed},
                      {"bytes", total},
                      {"seconds", secs},
                      {"trusted_keys", trusted->size()},
                      {"device_checked", device.has_value()},
                      {"device_arch", device ? device->arch : ""}};
    fmt::print("{}\n", out.dump(2));
    return failed == 0 ? kExitOk : kExitError;
  }
  fmt::print("kiln verify: {} of {} entr{} intact{}{} ({:.1f} MB in {:.3f} s){}\n",
             entries->size() - failed, entries->size(), entries->size() == 1 ? "y" : "ies",
             trusted->empty() ? "" : " and signed by a trusted key",
             device ? " and loadable here" : "", total / 1e6, secs,
             device ? "" : "; no GPU here, so arch and driver were not checked");
  return failed == 0 ? kExitOk : kExitError;
}

int cmd_inspect(const std::string& dir, bool as_json) {
  auto entries = cache::cache_entries(dir, cache::ScanDepth::kVerify);
  if (!entries.ok()) {
    fmt::print(stderr, "kiln inspect: {}\n", entries.status().message());
    return kExitError;
  }
  bool intact = true;
  for (const auto& e : *entries) intact = intact && e.status.ok();
  if (as_json) {
    json arr = json::array();
    for (const auto& e : *entries) arr.push_back(entry_json(e));
    json j = {{"cache", dir}, {"format_version", cache::kFormatVersion}, {"entries", arr}};
    fmt::print("{}\n", j.dump(2));
  } else {
    print_table(dir, *entries);
  }
  return intact ? kExitOk : kExitError;
}

int cmd_device(bool as_json) {
  std::string why;
  if (!cuda_device_available(&why)) {
    if (as_json)
      fmt::print("{}\n", json{{"available", false}, {"reason", why}}.dump(2));
    else
      fmt::print("{}\n", why);
    return kExitNoGpu;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    fmt::print(stderr,
               "kiln device: a CUDA device is present but its properties could not be "
               "read\n");
    return kExitError;
  }
  if (as_json) {
    const json out = {{"available", true},
                      {"name", p.name},
                      {"arch", fmt::format("sm_{}{}", p.major, p.minor)},
                      {"sms", p.multiProcessorCount},
                      {"memory_bytes", p.totalGlobalMem}};
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("GPU 0: {} (sm_{}{}), {} SMs, {:.1f} GiB\n", p.name, p.major, p.minor,
             p.multiProcessorCount, p.totalGlobalMem / double(1ull << 30));
  return kExitOk;
}

}  // namespace kiln::tools
