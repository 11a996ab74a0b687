#include "compiler/autotune/tuning_db.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <vector>

namespace kiln::compiler {
namespace {

// "key=value" tokens of one half of a line, in order.
Result<std::map<std::string, std::string>> tokens(std::string_view text) {
  std::map<std::string, std::string> out;
  std::istringstream in{std::string(text)};
  std::string tok;
  while (in >> tok) {
    const size_t eq = tok.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == tok.size())
      return invalid_argument(fmt::format("'{}' is not key=value", tok));
    if (!out.emplace(tok.substr(0, eq), tok.substr(eq + 1)).second)
      return invalid_argument(fmt::format("field '{}' appears twice", tok.substr(0, eq)));
  }
  return out;
}

class Fields {
 public:
  explicit Fields(std::map<std::string, std::string> f) : f_(std::move(f)) {}

  Status str(const char* name, std::string* out) {
    auto it = f_.find(name);
    if (it == f_.end()) return invalid_argument(fmt::format("field '{}' is missing", name));
    *out = it->second;
    f_.erase(it);
    return Status::ok_status();
  }
  Status i64(const char* name, int64_t* out, int64_t lo, int64_t hi) {
    std::string s;
    KILN_RETURN_IF_ERROR(str(name, &s));
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
      return invalid_argument(
          fmt::format("field '{}' is '{}'; expected an integer in [{}, {}]", name, s, lo, hi));
    *out = v;
    return Status::ok_status();
  }
  Status u32(const char* name, uint32_t* out) {
    int64_t v = 0;
    KILN_RETURN_IF_ERROR(i64(name, &v, 0, UINT32_MAX));
    *out = static_cast<uint32_t>(v);
    return Status::ok_status();
  }
  Status flag(const char* name, bool* out) {
    int64_t v = 0;
    KILN_RETURN_IF_ERROR(i64(name, &v, 0, 1));
    *out = v != 0;
    return Status::ok_status();
  }
  Status ms(const char* name, double* out) {
    std::string s;
    KILN_RETURN_IF_ERROR(str(name, &s));
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v) || v < 0)
      return invalid_argument(
          fmt::format("field '{}' is '{}'; expected a non-negative number", name, s));
    *out = v;
    return Status::ok_status();
  }
  Status done() const {
    if (f_.empty()) return Status::ok_status();
    return invalid_argument(fmt::format("unknown field '{}'", f_.begin()->first));
  }

 private:
  std::map<std::string, std::string> f_;
};

bool plain_word(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

constexpr std::string_view kKernelWord = "kernel ";

// A configuration name's spaces are written as ',' (a line's fields are space-separated).
std::string config_encode(std::string s) {
  for (char& c : s)
    if (c == ' ') c = ',';
  return s;
}
std::string config_decode(std::string s) {
  for (char& c : s)
    if (c == ',') c = ' ';
  return s;
}

// The two halves of a line around its one '|'.
Status split_halves(std::string_view line, std::string_view* key, std::string_view* value) {
  const size_t bar = line.find('|');
  if (bar == std::string_view::npos || line.find('|', bar + 1) != std::string_view::npos)
    return invalid_argument("expected 'key fields | value fields' (one '|')");
  *key = line.substr(0, bar);
  *value = line.substr(bar + 1);
  return Status::ok_status();
}

}  // namespace

std::string KernelTuningKey::to_string() const {
  return fmt::format("kernel arch={} symbol={} size={}", arch, symbol, size);
}

std::string TuningDb::format_kernel_line(const KernelTuningKey& key, const KernelTuningEntry& e) {
  return fmt::format("{} | config={} ms={:.6g} default_ms={:.6g}", key.to_string(),
                     config_encode(e.config), e.ms, e.default_ms);
}

Status TuningDb::parse_kernel_line(std::string_view line, KernelTuningKey* key,
                                   KernelTuningEntry* entry) {
  if (!line.starts_with(kKernelWord)) return invalid_argument("a kernel line starts with 'kernel'");
  std::string_view kh, vh;
  KILN_RETURN_IF_ERROR(split_halves(line.substr(kKernelWord.size()), &kh, &vh));
  KILN_ASSIGN_OR_RETURN(auto kf, tokens(kh));
  KILN_ASSIGN_OR_RETURN(auto vf, tokens(vh));
  Fields k(std::move(kf));
  KernelTuningKey out;
  KILN_RETURN_IF_ERROR(k.str("arch", &out.arch));
  KILN_RETURN_IF_ERROR(k.str("symbol", &out.symbol));
  KILN_RETURN_IF_ERROR(k.i64("size", &out.size, 1, INT32_MAX));
  KILN_RETURN_IF_ERROR(k.done());
  for (const std::string* w : {&out.arch, &out.symbol})
    if (!plain_word(*w))
      return invalid_argument(fmt::format("'{}' is not a plain word (letters, digits, '_')", *w));
  Fields v(std::move(vf));
  KernelTuningEntry e;
  KILN_RETURN_IF_ERROR(v.str("config", &e.config));
  e.config = config_decode(std::move(e.config));
  KILN_RETURN_IF_ERROR(v.ms("ms", &e.ms));
  KILN_RETURN_IF_ERROR(v.ms("default_ms", &e.default_ms));
  KILN_RETURN_IF_ERROR(v.done());
  *key = std::move(out);
  *entry = std::move(e);
  return Status::ok_status();
}

std::string TuningKey::to_string() const {
  return fmt::format(
      "arch={} cublaslt={} compute={} epilogue={} trans_a={} trans_b={} has_c={} m={} n={} k={} "
      "batch={} stride_a={} stride_b={} stride_d={}",
      arch, cublaslt_version, compute, epilogue, trans_a ? 1 : 0, trans_b ? 1 : 0, has_c ? 1 : 0, m,
      n, k, batch, stride_a, stride_b, stride_d);
}

std::string TuningDb::format_line(const TuningKey& key, const TuningEntry& e) {
  const schema::GemmAlgo& a = e.algo;
  return fmt::format(
      "{} | algo_id={} tile={} stages={} split_k={} reduction_scheme={} cta_swizzle={} "
      "custom_option={} cluster_shape={} inner_shape={} workspace_bytes={} ms={:.6g} "
      "heuristic_ms={:.6g}",
      key.to_string(), a.algo_id(), a.tile(), a.stages(), a.split_k(), a.reduction_scheme(),
      a.cta_swizzle(), a.custom_option(), a.cluster_shape(), a.inner_shape(), a.workspace_bytes(),
      e.ms, e.heuristic_ms);
}

Status TuningDb::parse_line(std::string_view line, TuningKey* key, TuningEntry* entry) {
  std::string_view kh, ah;
  KILN_RETURN_IF_ERROR(split_halves(line, &kh, &ah));
  KILN_ASSIGN_OR_RETURN(auto kf, tokens(kh));
  KILN_ASSIGN_OR_RETURN(auto af, tokens(ah));
  constexpr int64_t kBig = int64_t{1} << 40;
  Fields k(std::move(kf));
  TuningKey out;
  KILN_RETURN_IF_ERROR(k.str("arch", &out.arch));
  KILN_RETURN_IF_ERROR(k.i64("cublaslt", &out.cublaslt_version, 0, kBig));
  KILN_RETURN_IF_ERROR(k.str("compute", &out.compute));
  KILN_RETURN_IF_ERROR(k.str("epilogue", &out.epilogue));
  KILN_RETURN_IF_ERROR(k.flag("trans_a", &out.trans_a));
  KILN_RETURN_IF_ERROR(k.flag("trans_b", &out.trans_b));
  KILN_RETURN_IF_ERROR(k.flag("has_c", &out.has_c));
  KILN_RETURN_IF_ERROR(k.i64("m", &out.m, 1, kBig));
  KILN_RETURN_IF_ERROR(k.i64("n", &out.n, 1, kBig));
  KILN_RETURN_IF_ERROR(k.i64("k", &out.k, 1, kBig));
  KILN_RETURN_IF_ERROR(k.i64("batch", &out.batch, 1, kBig));
  KILN_RETURN_IF_ERROR(k.i64("stride_a", &out.stride_a, 0, kBig));
  KILN_RETURN_IF_ERROR(k.i64("stride_b", &out.stride_b, 0, kBig));
  KILN_RETURN_IF_ERROR(k.i64("stride_d", &out.stride_d, 0, kBig));
  KILN_RETURN_IF_ERROR(k.done());
  for (const std::string* w : {&out.arch, &out.compute, &out.epilogue})
    if (!plain_word(*w))
      return invalid_argument(fmt::format("'{}' is not a plain word (letters, digits, '_')", *w));

  Fields a(std::move(af));
  TuningEntry e;
  int64_t id = 0, ws = 0;
  uint32_t v = 0;
  KILN_RETURN_IF_ERROR(a.i64("algo_id", &id, 0, INT32_MAX));
  e.algo.set_algo_id(static_cast<int32_t>(id));
  const std::pair<const char*, void (schema::GemmAlgo::*)(uint32_t)> u32s[] = {
      {"tile", &schema::GemmAlgo::set_tile},
      {"stages", &schema::GemmAlgo::set_stages},
      {"split_k", &schema::GemmAlgo::set_split_k},
      {"reduction_scheme", &schema::GemmAlgo::set_reduction_scheme},
      {"cta_swizzle", &schema::GemmAlgo::set_cta_swizzle},
      {"custom_option", &schema::GemmAlgo::set_custom_option},
      {"cluster_shape", &schema::GemmAlgo::set_cluster_shape},
      {"inner_shape", &schema::GemmAlgo::set_inner_shape}};
  for (const auto& [name, set] : u32s) {
    KILN_RETURN_IF_ERROR(a.u32(name, &v));
    (e.algo.*set)(v);
  }
  KILN_RETURN_IF_ERROR(a.i64("workspace_bytes", &ws, 0, kBig));
  e.algo.set_workspace_bytes(static_cast<uint64_t>(ws));
  KILN_RETURN_IF_ERROR(a.ms("ms", &e.ms));
  KILN_RETURN_IF_ERROR(a.ms("heuristic_ms", &e.heuristic_ms));
  KILN_RETURN_IF_ERROR(a.done());
  *key = std::move(out);
  *entry = std::move(e);
  return Status::ok_status();
}

Result<TuningDb> TuningDb::load(const std::filesystem::path& path) {
  TuningDb db;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return db;
  std::ifstream in(path);
  if (!in) return io_error(fmt::format("tuning db {}: cannot be read", path.string()));
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Status st;
    if (std::string_view(line).substr(first).starts_with(kKernelWord)) {
      KernelTuningKey key;
      KernelTuningEntry entry;
      st = parse_kernel_line(std::string_view(line).substr(first), &key, &entry);
      if (st.ok()) db.put(key, entry);
    } else {
      TuningKey key;
      TuningEntry entry;
      st = parse_line(line, &key, &entry);
      if (st.ok()) db.put(key, entry);
    }
    if (!st.ok())
      return invalid_argument(
          fmt::format("tuning db {}:{}: {}", path.string(), line_no, st.message()));
  }
  if (in.bad()) return io_error(fmt::format("tuning db {}: read error", path.string()));
  return db;
}

Status TuningDb::save(const std::filesystem::path& path) const {
  const std::filesystem::path tmp =
      path.string() + fmt::format(".tmp{}", static_cast<long long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return io_error(fmt::format("tuning db: cannot write {}", tmp.string()));
    out << "# kiln tuning database: key fields | decision fields (see "
           "compiler/autotune/tuning_db.h)\n";
    for (const auto& [k, v] : entries_) out << format_line(v.first, v.second) << "\n";
    for (const auto& [k, v] : kernel_entries_)
      out << format_kernel_line(v.first, v.second) << "\n";
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return io_error(fmt::format("tuning db: writing {} failed", tmp.string()));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return io_error(fmt::format("tuning db: cannot rename {} to {}: {}", tmp.string(),
                                path.string(), ec.message()));
  }
  return Status::ok_status();
}

const TuningEntry* TuningDb::find(const TuningKey& key) const {
  auto it = entries_.find(key.to_string());
  return it == entries_.end() ? nullptr : &it->second.second;
}

void TuningDb::put(const TuningKey& key, const TuningEntry& entry) {
  entries_[key.to_string()] = {key, entry};
}

const KernelTuningEntry* TuningDb::find(const KernelTuningKey& key) const {
  auto it = kernel_entries_.find(key.to_string());
  return it == kernel_entries_.end() ? nullptr : &it->second.second;
}

void TuningDb::put(const KernelTuningKey& key, const KernelTuningEntry& entry) {
  kernel_entries_[key.to_string()] = {key, entry};
}

}  // namespace kiln::compiler
