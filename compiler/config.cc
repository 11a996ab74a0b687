#include "compiler/config.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <system_error>
#include <type_traits>

namespace kiln::compiler {

namespace {

constexpr int64_t kMaxSizeLimit = 1 << 20;
constexpr int64_t kMaxDimValue = (int64_t{1} << 31) - 1;
constexpr size_t kMaxDimNameBytes = 256;
constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

constexpr std::array<std::string_view, 9> kTargets = {"sm_75", "sm_80",  "sm_86",  "sm_87", "sm_89",
                                                      "sm_90", "sm_90a", "sm_100", "sm_120"};
constexpr std::array<std::pair<std::string_view, AutotuneMode>, 3> kAutotuneModes = {{
    {"auto", AutotuneMode::kAuto},
    {"on", AutotuneMode::kOn},
    {"off", AutotuneMode::kOff},
}};
constexpr std::array<std::pair<std::string_view, Precision>, 4> kPrecisions = {{
    {"fp32", Precision::kF32},
    {"tf32", Precision::kTF32},
    {"fp16", Precision::kF16},
    {"bf16", Precision::kBF16},
}};

template <typename Range>
std::string join_names(const Range& r) {
  std::string s;
  for (const auto& e : r) {
    if (!s.empty()) s += ", ";
    if constexpr (requires { e.first; }) {
      s += e.first;
    } else {
      s += e;
    }
  }
  return s;
}

// Builds messages "<source>:<line>:<column>: <key>: <message>" (1-based line and column).
class Reporter {
 public:
  explicit Reporter(std::string_view source) : source_(source) {}
  Status error(const YAML::Mark& m, std::string_view key, std::string_view msg) const {
    std::string at(source_);
    if (!m.is_null() && m.line >= 0) at += fmt::format(":{}:{}", m.line + 1, m.column + 1);
    if (key.empty()) return invalid_argument(fmt::format("{}: {}", at, msg));
    return invalid_argument(fmt::format("{}: {}: {}", at, key, msg));
  }

 private:
  std::string_view source_;
};

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar:
      return n.Tag() == "!" ? fmt::format("the quoted string '{}'", n.Scalar())
                            : fmt::format("'{}'", n.Scalar());
    default:
      return "an undefined value";
  }
}

// A map entry with the key's position, for messages.
struct Entry {
  std::string key;
  YAML::Mark key_mark;
  YAML::Node value;
};

// Reads a map, rejecting duplicate and unknown keys. `path` is the dotted key of the map.
Result<std::map<std::string, Entry>> read_map(const Reporter& r, const YAML::Node& node,
                                              const YAML::Mark& mark, const std::string& path,
                                              std::span<const std::string_view> allowed) {
  if (!node.IsMap())
    return r.error(mark, path, fmt::format("expected a map, got {}", describe(node)));
  std::map<std::string, Entry> out;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string name = path.empty() ? "" : path + ".";
    if (!it->first.IsScalar())
      return r.error(it->first.Mark(), path, "map keys must be plain strings");
    const std::string key = it->first.Scalar();
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      return r.error(
          it->first.Mark(), "",
          fmt::format("unknown key '{}{}' (allowed: {})", name, key, join_names(allowed)));
    if (out.contains(key)) return r.error(it->first.Mark(), name + key, "duplicate key");
    out.emplace(key, Entry{key, it->first.Mark(), it->second});
  }
  return out;
}

// Errors about a map entry point at its key: "kiln.yaml:4:3: compilation.mode: ...".
YAML::Mark value_mark(const Entry& e) { return e.key_mark; }

// A plain YAML scalar read as T with from_chars: an integer (int64_t) or a finite number
// (double). `what` names the expected kind in messages.
template <typename T>
Result<T> read_scalar(const Reporter& r, const YAML::Node& n, const YAML::Mark& m,
                      const std::string& key, std::string_view what) {
  if (!n.IsScalar() || n.Tag() == "!")
    return r.error(m, key, fmt::format("expected {}, got {}", what, describe(n)));
  const std::string& s = n.Scalar();
  T v = 0;
  const char* b = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range)
    return r.error(m, key, fmt::format("'{}' is out of range", s));
  bool finite = true;
  if constexpr (std::is_floating_point_v<T>) finite = std::isfinite(v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty() || !finite)
    return r.error(m, key, fmt::format("expected {}, got {}", what, describe(n)));
  return v;
}

Result<int64_t> read_int(const Reporter& r, const YAML::Node& n, const YAML::Mark& m,
                         const std::string& key) {
  return read_scalar<int64_t>(r, n, m, key, "an integer");
}

Result<double> read_number(const Reporter& r, const YAML::Node& n, const YAML::Mark& m,
                           const std::string& key) {
  return read_scalar<double>(r, n, m, key, "a number");
}

Result<std::string> read_string(const Reporter& r, const YAML::Node& n, const YAML::Mark& m,
                                const std::string& key) {
  if (!n.IsScalar()) return r.error(m, key, fmt::format("expected a string, got {}", describe(n)));
  if (n.Scalar().empty()) return r.error(m, key, "must not be empty");
  return n.Scalar();
}

template <typename T, size_t N>
Result<T> read_enum(const Reporter& r, const Entry& e, const std::string& key,
                    const std::array<std::pair<std::string_view, T>, N>& names) {
  KILN_ASSIGN_OR_RETURN(std::string s, read_string(r, e.value, value_mark(e), key));
  for (const auto& [name, v] : names)
    if (name == s) return v;
  return r.error(value_mark(e), key, fmt::format("'{}' is not one of {}", s, join_names(names)));
}

// The graph mode by its kiln::CudaGraphMode name ("FULL", ...).
Result<CudaGraphMode> read_graph_mode(const Reporter& r, const Entry& e, const std::string& key) {
  KILN_ASSIGN_OR_RETURN(std::string s, read_string(r, e.value, value_mark(e), key));
  if (std::optional<CudaGraphMode> m = cuda_graph_mode_from_name(s)) return *m;
  std::vector<std::string_view> names;
  for (CudaGraphMode m : kCudaGraphModes) names.push_back(cuda_graph_mode_name(m));
  return r.error(value_mark(e), key, fmt::format("'{}' is not one of {}", s, join_names(names)));
}

// A strictly increasing list of sizes, each in [1, max_size].
Result<std::vector<int64_t>> read_sizes(const Reporter& r, const Entry& e, const std::string& key,
                                        int64_t max_size) {
  if (!e.value.IsSequence())
    return r.error(value_mark(e), key,
                   fmt::format("expected a list of integers, got {}", describe(e.value)));
  std::vector<int64_t> out;
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::string item_key = fmt::format("{}[{}]", key, i);
    KILN_ASSIGN_OR_RETURN(int64_t v, read_int(r, item, item.Mark(), item_key));
    if (v < 1 || v > max_size)
      return r.error(item.Mark(), item_key,
                     fmt::format("size {} is outside [1, max_size = {}]", v, max_size));
    if (!out.empty() && v <= out.back())
      return r.error(
          item.Mark(), item_key,
          fmt::format("{} {} the previous entry {}; sizes must be strictly increasing", v,
                      v == out.back() ? "duplicates" : "is smaller than", out.back()));
    out.push_back(v);
  }
  return out;
}

constexpr std::array<std::string_view, 8> kTopKeys = {
    "size_dim", "dims", "max_size", "precision", "targets", "compilation", "autotune", "kv_cache"};
constexpr std::array<std::string_view, 2> kAutotuneKeys = {"enabled", "budget_s"};
constexpr int64_t kMaxBudgetSeconds = 24 * 3600;

Status read_autotune(const Reporter& r, const Entry& e, CompileConfig& c) {
  KILN_ASSIGN_OR_RETURN(auto at, read_map(r, e.value, e.key_mark, "autotune", kAutotuneKeys));
  if (auto m = at.find("enabled"); m != at.end()) {
    KILN_ASSIGN_OR_RETURN(c.autotune, read_enum(r, m->second, "autotune.enabled", kAutotuneModes));
  }
  if (auto b = at.find("budget_s"); b != at.end()) {
    KILN_ASSIGN_OR_RETURN(c.autotune_budget_s,
                          read_int(r, b->second.value, value_mark(b->second), "autotune.budget_s"));
    if (c.autotune_budget_s < 0 || c.autotune_budget_s > kMaxBudgetSeconds)
      return r.error(value_mark(b->second), "autotune.budget_s",
                     fmt::format("{} is outside [0, {}]", c.autotune_budget_s, kMaxBudgetSeconds));
  }
  return Status::ok_status();
}
constexpr std::array<std::string_view, 7> kKvCacheKeys = {
    "block_size",  "max_blocks", "memory_fraction", "max_sequences",
    "max_seq_len", "dtype",      "decode_append"};
// kv_cache.decode_append: where the decode route's append runs (KvCacheConfig::decode_append).
constexpr std::array<std::pair<std::string_view, DecodeAppend>, 3> kDecodeAppends = {{
    {"separate", DecodeAppend::kSeparate},
    {"in_attention", DecodeAppend::kInAttention},
    {"auto", DecodeAppend::kAuto},
}};
constexpr std::array<std::pair<std::string_view, DType>, 3> kKvCacheDTypes = {{
    {"fp32", DType::kF32},
    {"fp16", DType::kF16},
    {"bf16", DType::kBF16},
}};
constexpr int64_t kMaxBlockSize = 256;

// `kv_cache:` (after `precision`, whose storage type is the default dtype).
Status read_kv_cache(const Reporter& r, const Entry& e, CompileConfig& c) {
  KILN_ASSIGN_OR_RETURN(auto kv, read_map(r, e.value, e.key_mark, "kv_cache", kKvCacheKeys));
  KvCacheConfig k;
  k.dtype = precision_storage_dtype(c.precision);
  for (std::string_view required : {"max_sequences", "max_seq_len"})
    if (!kv.contains(std::string(required)))
      return r.error(e.key_mark, "kv_cache",
                     fmt::format("missing required key 'kv_cache.{}'", required));
  const bool has_blocks = kv.contains("max_blocks");
  const bool has_fraction = kv.contains("memory_fraction");
  if (has_blocks == has_fraction)
    return r.error(has_fraction ? kv.at("memory_fraction").key_mark : e.key_mark, "kv_cache",
                   has_fraction ? "give one of max_blocks and memory_fraction, not both"
                                : "missing 'max_blocks' or 'memory_fraction' (give one)");
  // An integer in [lo, hi] at kv_cache.<name>.
  auto bounded = [&](const char* name, int64_t lo, int64_t hi) -> Result<int64_t> {
    const Entry& x = kv.at(name);
    const std::string key = fmt::format("kv_cache.{}", name);
    KILN_ASSIGN_OR_RETURN(int64_t v, read_int(r, x.value, value_mark(x), key));
    if (v < lo || v > hi)
      return r.error(value_mark(x), key, fmt::format("{} is outside [{}, {}]", v, lo, hi));
    return v;
  };
  if (kv.contains("block_size")) {
    KILN_ASSIGN_OR_RETURN(k.block_size, bounded("block_size", 1, kMaxBlockSize));
    if ((k.block_size & (k.block_size - 1)) != 0)
      return r.error(value_mark(kv.at("block_size")), "kv_cache.block_size",
                     fmt::format("{} is not a power of two", k.block_size));
  }
  KILN_ASSIGN_OR_RETURN(k.max_sequences, bounded("max_sequences", 1, kMaxSizeLimit));
  KILN_ASSIGN_OR_RETURN(k.max_seq_len, bounded("max_seq_len", 1, kMaxDimValue));
  if (has_blocks) {
    // One sequence of max_seq_len tokens must fit.
    const int64_t one_seq = (k.max_seq_len + k.block_size - 1) / k.block_size;
    KILN_ASSIGN_OR_RETURN(k.max_blocks,
                          read_int(r, kv.at("max_blocks").value, value_mark(kv.at("max_blocks")),
                                   "kv_cache.max_blocks"));
    if (k.max_blocks < one_seq || k.max_blocks > kMaxDimValue)
      return r.error(
          value_mark(kv.at("max_blocks")), "kv_cache.max_blocks",
          fmt::format("{} is outside [{}, {}]; the lower bound holds one sequence of max_seq_len "
                      "{} in blocks of {}",
                      k.max_blocks, one_seq, kMaxDimValue, k.max_seq_len, k.block_size));
  } else {
    const Entry& f = kv.at("memory_fraction");
    KILN_ASSIGN_OR_RETURN(k.memory_fraction,
                          read_number(r, f.value, value_mark(f), "kv_cache.memory_fraction"));
    if (!(k.memory_fraction > 0.0 && k.memory_fraction <= 1.0))
      return r.error(value_mark(f), "kv_cache.memory_fraction",
                     fmt::format("{} is outside (0, 1]", f.value.Scalar()));
  }
  if (auto d = kv.find("dtype"); d != kv.end()) {
    KILN_ASSIGN_OR_RETURN(k.dtype, read_enum(r, d->second, "kv_cache.dtype", kKvCacheDTypes));
  }
  if (auto a = kv.find("decode_append"); a != kv.end()) {
    KILN_ASSIGN_OR_RETURN(k.decode_append,
                          read_enum(r, a->second, "kv_cache.decode_append", kDecodeAppends));
  }
  c.kv_cache = k;
  return Status::ok_status();
}

constexpr std::array<std::string_view, 6> kCompilationKeys = {
    "mode",          "compile_sizes",     "cudagraph_capture_sizes",
    "splitting_ops", "skinny_gemm_max_m", "level"};

// Op names `splitting_ops` accepts: "attention" is every attention form (kiln.Attention after
// fusion); other names are internal ops the graph may be cut at.
constexpr std::array<std::string_view, 4> kSplittingOps = {"attention", "Softmax", "MatMul",
                                                           "LayerNormalization"};

Status read_splitting_ops(const Reporter& r, const Entry& e, CompileConfig& c) {
  const std::string key = "compilation.splitting_ops";
  if (!e.value.IsSequence())
    return r.error(value_mark(e), key,
                   fmt::format("expected a list of op names, got {}", describe(e.value)));
  c.splitting_ops.clear();
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::string k = fmt::format("{}[{}]", key, i);
    KILN_ASSIGN_OR_RETURN(std::string op, read_string(r, item, item.Mark(), k));
    if (std::find(kSplittingOps.begin(), kSplittingOps.end(), op) == kSplittingOps.end())
      return r.error(item.Mark(), k,
                     fmt::format("'{}' is not one of {}", op, join_names(kSplittingOps)));
    if (std::find(c.splitting_ops.begin(), c.splitting_ops.end(), op) != c.splitting_ops.end())
      return r.error(item.Mark(), k, fmt::format("'{}' is listed twice", op));
    c.splitting_ops.push_back(op);
  }
  return Status::ok_status();
}

Status read_targets(const Reporter& r, const Entry& e, CompileConfig& c) {
  if (!e.value.IsSequence())
    return r.error(value_mark(e), "targets",
                   fmt::format("expected a list of architectures, got {}", describe(e.value)));
  std::set<size_t> seen;  // indexes into kTargets: canonical order
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::string key = fmt::format("targets[{}]", i);
    KILN_ASSIGN_OR_RETURN(std::string t, read_string(r, item, item.Mark(), key));
    auto it = std::find(kTargets.begin(), kTargets.end(), t);
    if (it == kTargets.end())
      return r.error(item.Mark(), key,
                     fmt::format("'{}' is not one of {}", t, join_names(kTargets)));
    if (!seen.insert(static_cast<size_t>(it - kTargets.begin())).second)
      return r.error(item.Mark(), key, fmt::format("'{}' is listed twice", t));
  }
  if (seen.empty()) return r.error(value_mark(e), "targets", "must list at least one architecture");
  c.targets.clear();
  for (size_t i : seen) c.targets.emplace_back(kTargets[i]);
  return Status::ok_status();
}

// Why `name` cannot be a dim name (an ONNX dim_param), or empty when it can: not empty, at most
// kMaxDimNameBytes, no control characters. The normalised config (the cache key) writes it back
// as a YAML key, which YAML caps at 1024 characters.
std::string dim_name_problem(std::string_view name) {
  if (name.empty()) return "dim names must not be empty";
  if (name.size() > kMaxDimNameBytes)
    return fmt::format("a dim name of {} bytes is longer than {}", name.size(), kMaxDimNameBytes);
  for (size_t i = 0; i < name.size(); ++i) {
    const auto ch = static_cast<unsigned char>(name[i]);
    if (ch < 0x20 || ch == 0x7f)
      return fmt::format("a dim name has the control character 0x{:02x} at byte {}", ch, i);
  }
  return "";
}

Status read_dims(const Reporter& r, const Entry& e, CompileConfig& c) {
  KILN_ASSIGN_OR_RETURN(auto entries, read_map(r, e.value, e.key_mark, "dims", {}));
  for (const auto& [name, d] : entries) {
    if (std::string why = dim_name_problem(name); !why.empty())
      return r.error(d.key_mark, "dims", why);
    const std::string key = "dims." + name;
    if (name == c.size_dim)
      return r.error(
          d.key_mark, key,
          fmt::format("'{}' is the size_dim; it cannot also be bound to a constant", name));
    KILN_ASSIGN_OR_RETURN(int64_t v, read_int(r, d.value, value_mark(d), key));
    if (v < 1 || v > kMaxDimValue)
      return r.error(value_mark(d), key, fmt::format("{} is outside [1, {}]", v, kMaxDimValue));
    c.dims[name] = v;
  }
  return Status::ok_status();
}

std::vector<int64_t> default_capture_sizes(int64_t max_size) {
  std::vector<int64_t> s;
  for (int64_t p = 1; p < max_size; p *= 2) s.push_back(p);
  s.push_back(max_size);
  return s;
}

Result<CompileConfig> parse_document(const Reporter& r, const YAML::Node& root) {
  if (!root.IsMap())
    return r.error(root.Mark(), "",
                   fmt::format("the config must be a map with keys {}, got {}",
                               join_names(kTopKeys), describe(root)));
  KILN_ASSIGN_OR_RETURN(auto top, read_map(r, root, root.Mark(), "", kTopKeys));
  CompileConfig c;
  for (std::string_view required : {"size_dim", "max_size"})
    if (!top.contains(std::string(required)))
      return r.error(root.Mark(), "", fmt::format("missing required key '{}'", required));

  const Entry& sd = top.at("size_dim");
  KILN_ASSIGN_OR_RETURN(c.size_dim, read_string(r, sd.value, value_mark(sd), "size_dim"));
  if (std::string why = dim_name_problem(c.size_dim); !why.empty())
    return r.error(value_mark(sd), "size_dim", why);
  const Entry& ms = top.at("max_size");
  KILN_ASSIGN_OR_RETURN(c.max_size, read_int(r, ms.value, value_mark(ms), "max_size"));
  if (c.max_size < 1 || c.max_size > kMaxSizeLimit)
    return r.error(value_mark(ms), "max_size",
                   fmt::format("{} is outside [1, {}]", c.max_size, kMaxSizeLimit));
  if (auto it = top.find("dims"); it != top.end())
    KILN_RETURN_IF_ERROR(read_dims(r, it->second, c));
  if (auto it = top.find("precision"); it != top.end()) {
    KILN_ASSIGN_OR_RETURN(c.precision, read_enum(r, it->second, "precision", kPrecisions));
  }
  if (auto it = top.find("targets"); it != top.end())
    KILN_RETURN_IF_ERROR(read_targets(r, it->second, c));
  if (auto it = top.find("autotune"); it != top.end())
    KILN_RETURN_IF_ERROR(read_autotune(r, it->second, c));
  if (auto it = top.find("kv_cache"); it != top.end())
    KILN_RETURN_IF_ERROR(read_kv_cache(r, it->second, c));

  c.capture_sizes = default_capture_sizes(c.max_size);
  if (auto it = top.find("compilation"); it != top.end()) {
    const Entry& ce = it->second;
    KILN_ASSIGN_OR_RETURN(auto comp,
                          read_map(r, ce.value, ce.key_mark, "compilation", kCompilationKeys));
    if (auto m = comp.find("mode"); m != comp.end()) {
      KILN_ASSIGN_OR_RETURN(c.mode, read_graph_mode(r, m->second, "compilation.mode"));
    }
    if (auto s = comp.find("compile_sizes"); s != comp.end()) {
      KILN_ASSIGN_OR_RETURN(c.compile_sizes,
                            read_sizes(r, s->second, "compilation.compile_sizes", c.max_size));
    }
    if (auto s = comp.find("splitting_ops"); s != comp.end())
      KILN_RETURN_IF_ERROR(read_splitting_ops(r, s->second, c));
    if (auto s = comp.find("skinny_gemm_max_m"); s != comp.end()) {
      const std::string key = "compilation.skinny_gemm_max_m";
      if (s->second.value.IsScalar() && s->second.value.Scalar() == "auto") {
        c.skinny_gemm_max_m = kSkinnyGemmMaxMAuto;
      } else {
        KILN_ASSIGN_OR_RETURN(c.skinny_gemm_max_m,
                              read_int(r, s->second.value, value_mark(s->second), key));
        if (c.skinny_gemm_max_m < 0 || c.skinny_gemm_max_m > kSkinnyGemmMaxM)
          return r.error(
              value_mark(s->second), key,
              fmt::format("{} is outside [0, {}] (or auto)", c.skinny_gemm_max_m, kSkinnyGemmMaxM));
      }
    }
    if (auto s = comp.find("level"); s != comp.end()) {
      const std::string key = "compilation.level";
      KILN_ASSIGN_OR_RETURN(const int64_t level,
                            read_int(r, s->second.value, value_mark(s->second), key));
      if (level < 0 || level > kMaxCompilationLevel)
        return r.error(value_mark(s->second), key,
                       fmt::format("{} is outside [0, {}]", level, kMaxCompilationLevel));
      c.level = static_cast<int>(level);
    }
    if (auto s = comp.find("cudagraph_capture_sizes"); s != comp.end()) {
      const std::string key = "compilation.cudagraph_capture_sizes";
      KILN_ASSIGN_OR_RETURN(c.capture_sizes, read_sizes(r, s->second, key, c.max_size));
      if (c.capture_sizes.empty() && c.mode != CudaGraphMode::kNone)
        return r.error(
            value_mark(s->second), key,
            fmt::format("must not be empty when mode is {}", cuda_graph_mode_name(c.mode)));
    }
  }
  return c;
}

// A YAML double-quoted string: unambiguous for any name.
std::string yaml_quoted(std::string_view s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch == 0x7f) {
      out += fmt::format("\\x{:02x}", ch);
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

}  // namespace

std::string_view autotune_mode_name(AutotuneMode m) {
  for (const auto& [name, v] : kAutotuneModes)
    if (v == m) return name;
  return "unknown";
}

std::string_view precision_name(Precision p) {
  for (const auto& [name, v] : kPrecisions)
    if (v == p) return name;
  return "unknown";
}

DType precision_storage_dtype(Precision p) {
  switch (p) {
    case Precision::kF16:
      return DType::kF16;
    case Precision::kBF16:
      return DType::kBF16;
    case Precision::kF32:
    case Precision::kTF32:
      break;
  }
  return DType::kF32;
}

namespace {

// Events of a YAML document, ignored: counting documents without building them.
class IgnoreEvents : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Whether `text` holds a second YAML document. At most two are read: yaml-cpp 0.7's LoadAll
// finds empty documents without end in some malformed inputs (fuzz/regressions/config).
bool has_second_document(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  IgnoreEvents ignore;
  return parser.HandleNextDocument(ignore) && parser.HandleNextDocument(ignore);
}

}  // namespace

Result<CompileConfig> config_parse(std::string_view yaml_text, std::string_view source) {
  const Reporter r(source);
  try {
    const std::string text(yaml_text);
    const YAML::Node doc = YAML::Load(text);  // the first document only
    if (doc.IsNull())
      return r.error(YAML::Mark::null_mark(), "",
                     fmt::format("the config is empty; required keys: size_dim, max_size"));
    if (has_second_document(text))
      return r.error(YAML::Mark::null_mark(), "", "expected one YAML document, found several");
    return parse_document(r, doc);
  } catch (const YAML::Exception& e) {
    return r.error(e.mark, "", fmt::format("YAML syntax error: {}", e.msg));
  } catch (const std::exception& e) {
    return internal_error(fmt::format("{}: reading the config failed: {}", source, e.what()));
  }
}

Result<CompileConfig> config_load(const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return not_found(fmt::format("config file '{}' not found", path.string()));
  if (!std::filesystem::is_regular_file(st))
    return invalid_argument(fmt::format("config '{}' is not a regular file", path.string()));
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return io_error(fmt::format("cannot stat config '{}': {}", path.string(), ec.message()));
  if (size > kMaxConfigBytes)
    return invalid_argument(fmt::format("config '{}' is {} bytes; the limit is {}", path.string(),
                                        size, kMaxConfigBytes));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) return io_error(fmt::format("cannot read config '{}'", path.string()));
  return config_parse(text.str(), path.string());
}

CompileConfig config_at_level(CompileConfig c) {
  if (c.level < 3) {
    c.compile_sizes.clear();
    c.autotune = AutotuneMode::kOff;
  }
  if (c.level < 2) c.splitting_ops.clear();
  if (c.level < 2 && c.kv_cache) c.splitting_ops = {"attention"};
  if (c.level < 1) c.skinny_gemm_max_m = 0;
  return c;
}

SkinnyLimits skinny_limits(const CompileConfig& c, bool tuner_times) {
  if (c.skinny_gemm_max_m != kSkinnyGemmMaxMAuto) return {c.skinny_gemm_max_m, c.skinny_gemm_max_m};
  return {kSkinnyAutoUntimedMaxM, tuner_times ? kSkinnyGemmMaxM : kSkinnyAutoUntimedMaxM};
}

std::string config_normalised(const CompileConfig& c) {
  std::vector<std::string> dims;
  for (const auto& [k, v] : c.dims) dims.push_back(fmt::format("{}: {}", yaml_quoted(k), v));
  std::vector<std::string> targets;
  for (const auto& t : c.targets) targets.push_back(yaml_quoted(t));
  std::string kv;
  if (c.kv_cache) {
    const KvCacheConfig& k = *c.kv_cache;
    std::string_view dtype = "unknown";
    for (const auto& [name, v] : kKvCacheDTypes)
      if (v == k.dtype) dtype = name;
    std::string_view append = "unknown";
    for (const auto& [name, v] : kDecodeAppends)
      if (v == k.decode_append) append = name;
    kv = fmt::format(
        "kv_cache:\n"
        "  block_size: {}\n"
        "  {}\n"
        "  max_sequences: {}\n"
        "  max_seq_len: {}\n"
        "  dtype: {}\n"
        "  decode_append: {}\n",
        k.block_size,
        k.max_blocks > 0 ? fmt::format("max_blocks: {}", k.max_blocks)
                         : fmt::format("memory_fraction: {}", k.memory_fraction),
        k.max_sequences, k.max_seq_len, dtype, append);
  }
  return fmt::format(
      "size_dim: {}\n"
      "dims: {{{}}}\n"
      "max_size: {}\n"
      "precision: {}\n"
      "targets: [{}]\n"
      "compilation:\n"
      "  mode: {}\n"
      "  compile_sizes: [{}]\n"
      "  cudagraph_capture_sizes: [{}]\n"
      "  splitting_ops: [{}]\n"
      "  skinny_gemm_max_m: {}\n"
      "  level: {}\n"
      "autotune:\n"
      "  enabled: {}\n"
      "{}",
      yaml_quoted(c.size_dim), fmt::join(dims, ", "), c.max_size, precision_name(c.precision),
      fmt::join(targets, ", "), cuda_graph_mode_name(c.mode), fmt::join(c.compile_sizes, ", "),
      fmt::join(c.capture_sizes, ", "), fmt::join(c.splitting_ops, ", "),
      c.skinny_gemm_max_m == kSkinnyGemmMaxMAuto ? std::string("auto")
                                                 : std::to_string(c.skinny_gemm_max_m),
      c.level, autotune_mode_name(c.autotune), kv);
}

}  // namespace kiln::compiler
