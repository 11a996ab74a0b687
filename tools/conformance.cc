#include "tools/conformance.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/onnx_model_parse.h"
#include "tools/tensor_io.h"

namespace kiln::tools {
namespace {

namespace fs = std::filesystem;

Result<std::string> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// test_data_set_<N> folders, by N.
std::vector<std::pair<int, fs::path>> data_set_dirs(const fs::path& dir) {
  std::vector<std::pair<int, fs::path>> out;
  const std::string prefix = "test_data_set_";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind(prefix, 0) != 0) continue;
    const std::string digits = n.substr(prefix.size());
    if (digits.empty() || digits.size() > 6 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.emplace_back(std::stoi(digits), e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A stored tensor as float64 values (any kiln dtype).
Result<compiler::RefTensor> ref_of(const fs::path& path) {
  KILN_ASSIGN_OR_RETURN(Tensor t, tensor_read_pb(path));
  compiler::RefTensor r = tensor_to_ref(t);
  if (static_cast<int64_t>(r.data.size()) != t.numel())
    return invalid_argument(fmt::format("{}: cannot decode its {} values", path.string(),
                                        std::string(dtype_name(t.dtype))));
  return r;
}

Result<ConformanceDataSet> data_set_read(const ConformanceFolder& f, const fs::path& dir) {
  ConformanceDataSet set;
  set.name = dir.filename().string();
  size_t n_in = 0, n_out = 0;
  while (fs::exists(dir / fmt::format("input_{}.pb", n_in))) ++n_in;
  while (fs::exists(dir / fmt::format("output_{}.pb", n_out))) ++n_out;
  if (n_in != f.inputs.size() || n_out != f.outputs.size())
    return invalid_argument(
        fmt::format("{}: {} input and {} output files, the model has {} inputs and {} outputs",
                    set.name, n_in, n_out, f.inputs.size(), f.outputs.size()));
  for (size_t i = 0; i < n_in; ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_read_pb(dir / fmt::format("input_{}.pb", i)));
    t.name = f.inputs[i].name;
    if (t.shape.size() != f.inputs[i].dim_params.size())
      return invalid_argument(fmt::format("{}: input '{}' has {} dims, the model declares {}",
                                          set.name, t.name, t.shape.size(),
                                          f.inputs[i].dim_params.size()));
    set.inputs.push_back(std::move(t));
  }
  for (size_t j = 0; j < n_out; ++j) {
    KILN_ASSIGN_OR_RETURN(compiler::RefTensor r, ref_of(dir / fmt::format("output_{}.pb", j)));
    set.outputs.push_back(std::move(r));
  }
  return set;
}

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}

std::vector<int64_t> default_capture_sizes(int64_t max_size) {
  std::vector<int64_t> s;
  for (int64_t p = 1; p < max_size; p *= 2) s.push_back(p);
  s.push_back(max_size);
  return s;
}

std::vector<int64_t> at_most(std::vector<int64_t> sizes, int64_t max_size) {
  std::erase_if(sizes, [max_size](int64_t s) { return s > max_size; });
  return sizes;
}

}  // namespace

Result<ConformanceFolder> conformance_folder_read(const fs::path& dir) {
  ConformanceFolder f;
  f.dir = dir;
  f.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  KILN_ASSIGN_OR_RETURN(std::string bytes, file_bytes(dir / "model.onnx"));
  KILN_ASSIGN_OR_RETURN(onnx::ModelProto m, compiler::onnx_parse_model(bytes));
  std::set<std::string> initializers;
  for (const auto& t : m.graph().initializer()) initializers.insert(t.name());
  for (const auto& vi : m.graph().input()) {
    if (initializers.contains(vi.name())) continue;
    ConformanceInput in{vi.name(), {}};
    for (const auto& d : vi.type().tensor_type().shape().dim())
      in.dim_params.push_back(d.has_dim_param() ? d.dim_param() : "");
    f.inputs.push_back(std::move(in));
  }
  for (const auto& vi : m.graph().output()) f.outputs.push_back(vi.name());
  if (fs::exists(dir / "kiln.yaml")) {
    KILN_ASSIGN_OR_RETURN(f.base, compiler::config_load(dir / "kiln.yaml"));
  }
  for (const auto& [n, set_dir] : data_set_dirs(dir)) {
    KILN_ASSIGN_OR_RETURN(ConformanceDataSet set, data_set_read(f, set_dir));
    f.sets.push_back(std::move(set));
  }
  if (f.sets.empty()) return not_found(fmt::format("{}: no test_data_set_N folder", dir.string()));
  return f;
}

int64_t ConformanceBinding::max_s() const {
  return sizes.empty() ? 1 : *std::max_element(sizes.begin(), sizes.end());
}

Result<std::vector<ConformanceBinding>> conformance_bindings(const ConformanceFolder& f,
                                                             const std::string& size_dim) {
  std::set<std::string> params;
  for (const auto& in : f.inputs)
    for (const auto& p : in.dim_params)
      if (!p.empty()) params.insert(p);
  if (!size_dim.empty() && !params.contains(size_dim))
    return invalid_argument(fmt::format(
        "size dim '{}' is not a dim_param of any input of {} (its dim_params: {})", size_dim,
        f.name, params.empty() ? "none" : fmt::format("{}", fmt::join(params, ", "))));
  std::vector<ConformanceBinding> out;
  for (size_t k = 0; k < f.sets.size(); ++k) {
    const ConformanceDataSet& set = f.sets[k];
    std::map<std::string, int64_t> bound;
    for (size_t i = 0; i < f.inputs.size(); ++i)
      for (size_t a = 0; a < f.inputs[i].dim_params.size(); ++a) {
        const std::string& p = f.inputs[i].dim_params[a];
        if (p.empty()) continue;
        const int64_t v = set.inputs[i].shape[a];
        auto [it, fresh] = bound.emplace(p, v);
        if (!fresh && it->second != v)
          return invalid_argument(
              fmt::format("{}: dim_param '{}' is {} in one input and {} in input '{}'", set.name, p,
                          it->second, v, f.inputs[i].name));
      }
    int64_t s = 1;
    if (!size_dim.empty()) {
      s = bound.at(size_dim);
      bound.erase(size_dim);
    }
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const ConformanceBinding& b) { return b.dims == bound; });
    if (same == out.end()) {
      out.push_back({size_dim, bound, {}, {}});
      same = out.end() - 1;
    }
    same->sets.push_back(k);
    same->sizes.push_back(s);
  }
  return out;
}

std::string conformance_size_dim(const ConformanceFolder& f, const std::string& requested) {
  if (!requested.empty()) return requested;
  return f.base ? f.base->size_dim : "";
}

compiler::CompileConfig conformance_config(const ConformanceFolder& f, const ConformanceBinding& b,
                                           const ConformanceOptions& opts) {
  compiler::CompileConfig c = f.base ? *f.base : compiler::CompileConfig{};
  c.size_dim = b.size_dim;
  c.dims = b.dims;
  if (opts.precision) c.precision = *opts.precision;
  if (opts.mode) c.mode = *opts.mode;
  if (opts.level) c.level = *opts.level;
  c.autotune = opts.autotune ? compiler::AutotuneMode::kAuto : compiler::AutotuneMode::kOff;
  // A static model's only size is 1; otherwise every set's S must be in range.
  c.max_size = b.size_dim.empty() ? 1 : std::max(f.base ? c.max_size : 1, b.max_s());
  c.compile_sizes = at_most(c.compile_sizes, c.max_size);
  c.capture_sizes = f.base && !b.size_dim.empty() ? at_most(c.capture_sizes, c.max_size)
                                                  : default_capture_sizes(c.max_size);
  if (c.capture_sizes.empty()) c.capture_sizes = {1};
  return c;
}

std::string OutputCheck::summary() const {
  if (!problem.empty()) return fmt::format("'{}': {}", output, problem);
  if (ok) return fmt::format("'{}': max|err| {:.3g} over {}", output, max_error, count);
  return fmt::format(
      "'{}'[{}]: got {:.6g}, stored {:.6g}; max|err| {:.3g}, {} of {} outside tolerance", output,
      index, got, want, max_error, mismatches, count);
}

OutputCheck conformance_compare(const std::string& output, const compiler::RefTensor& got,
                                const compiler::RefTensor& want, compiler::Tolerance tol) {
  OutputCheck c;
  c.output = output;
  if (got.dims != want.dims) {
    c.ok = false;
    c.problem = fmt::format("shape {}, stored {}", compiler::dims_to_string(got.dims),
                            compiler::dims_to_string(want.dims));
    return c;
  }
  if (is_float(got.dtype) != is_float(want.dtype) ||
      (got.dtype == DType::kBool) != (want.dtype == DType::kBool)) {
    c.ok = false;
    c.problem = fmt::format("dtype {}, stored {}", std::string(dtype_name(got.dtype)),
                            std::string(dtype_name(want.dtype)));
    return c;
  }
  c.count = static_cast<int64_t>(want.data.size());
  const bool exact = !is_float(want.dtype);
  std::vector<double> g = got.data;
  if (!exact) {
    // The pass/fail rule is compiler::compare_with_reference's (the table's one definition);
    // outputs are compared as the float32 the GPU path hands back.
    const std::vector<float> gf(got.data.begin(), got.data.end());
    const compiler::Comparison cmp = compiler::compare_with_reference(gf.data(), want.data, tol);
    c.mismatches = cmp.mismatches;
    c.max_error = cmp.max_abs_error;
    c.index = cmp.first_mismatch;
    g.assign(gf.begin(), gf.end());
  }
  // Where: the element furthest outside its tolerance (a NaN/Inf misplacement stays the first
  // mismatch); integers: the largest difference.
  double worst = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double e = std::fabs(g[i] - want.data[i]);
    if (!std::isfinite(e)) continue;
    if (exact) {
      if (e == 0) continue;
      ++c.mismatches;
      c.max_error = std::max(c.max_error, e);
    }
    const double allowed = exact ? 0 : tol.atol + tol.rtol * std::fabs(want.data[i]);
    if (e > allowed && e - allowed > worst) {
      worst = e - allowed;
      c.index = static_cast<int64_t>(i);
    }
  }
  if (c.index >= 0) {
    c.got = g[c.index];
    c.want = want.data[c.index];
  }
  c.ok = c.mismatches == 0;
  return c;
}

Result<Exclusions> conformance_exclusions_read(const fs::path& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, file_bytes(path));
  Exclusions out;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    const size_t name_end = line.find_first_of(" \t", start);
    const size_t reason =
        name_end == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", name_end);
    if (reason == std::string::npos || line.find_first_not_of(" \t\r", reason) == std::string::npos)
      return invalid_argument(fmt::format("{}:{}: '{}' has no reason (lines are `name  reason`)",
                                          path.string(), n, line.substr(start)));
    std::string why = line.substr(reason);
    while (!why.empty() && (why.back() == '\r' || why.back() == ' ')) why.pop_back();
    out.emplace_back(line.substr(start, name_end - start), why);
  }
  return out;
}

std::optional<std::string> conformance_excluded(const Exclusions& ex, const std::string& name) {
  for (const auto& [pattern, reason] : ex)
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return reason;
  return std::nullopt;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace kiln::tools
