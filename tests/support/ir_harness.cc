#include "tests/support/ir_harness.h"

#include <fmt/format.h>
#include <onnx/defs/parser.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/config.h"
#include "compiler/frontend/onnx_tensor.h"
#include "tests/support/source_root.h"

namespace kiln::testing {

Result<std::string> model_bytes_from_text(std::string_view text) {
  onnx::ModelProto m;
  const std::string owned(text);
  onnx::OnnxParser parser(owned.c_str());
  auto st = parser.Parse(m);
  if (!st.IsOK()) return invalid_argument("ONNX text does not parse: " + st.ErrorMessage());
  std::string bytes;
  if (!m.SerializeToString(&bytes)) return internal_error("cannot serialise the parsed model");
  return bytes;
}

Result<ir::Graph> import_text(std::string_view text, const compiler::ImportOptions& opts) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, model_bytes_from_text(text));
  return compiler::onnx_import_bytes(bytes, "test.onnx", std::filesystem::temp_directory_path(),
                                     opts);
}

ir::Graph import_text_ok(std::string_view text, const compiler::ImportOptions& opts) {
  Result<ir::Graph> g = import_text(text, opts);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : ir::Graph{};
}

std::map<std::string, compiler::RefTensor> random_inputs(const ir::Graph& g, int64_t s,
                                                         uint32_t seed, int64_t int_hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(-2.0, 2.0);
  std::map<std::string, compiler::RefTensor> out;
  for (int id : g.inputs) {
    const ir::Value& v = g.values[id];
    compiler::RefTensor t;
    t.dtype = v.dtype;
    for (const ir::DimExpr& d : v.shape) t.dims.push_back(d.eval(s));
    t.data.resize(static_cast<size_t>(t.numel()));
    for (double& x : t.data) {
      switch (v.dtype) {
        case DType::kF32:
          x = static_cast<float>(real(rng));
          break;
        case DType::kF16:
        case DType::kBF16:
        case DType::kF64:
          x = real(rng);
          break;
        case DType::kBool:
          x = static_cast<double>(rng() & 1);
          break;
        default: {
          // Segment ids (BERT's token_type_ids) index a table of two rows.
          const bool segment = v.name.find("type_ids") != std::string::npos;
          const auto hi = static_cast<uint32_t>(segment ? std::min<int64_t>(int_hi, 2) : int_hi);
          x = static_cast<double>(static_cast<int64_t>(rng() % hi));
        }
      }
    }
    out[v.name] = std::move(t);
  }
  return out;
}

::testing::AssertionResult tensors_close(const compiler::RefTensor& got,
                                         const compiler::RefTensor& want, double rtol, double atol,
                                         const std::string& what) {
  if (got.dims != want.dims)
    return ::testing::AssertionFailure()
           << what << ": dims [" << fmt::format("{}", fmt::join(got.dims, ",")) << "] vs ["
           << fmt::format("{}", fmt::join(want.dims, ",")) << "]";
  if (got.data.size() != want.data.size())
    return ::testing::AssertionFailure()
           << what << ": " << got.data.size() << " vs " << want.data.size() << " elements";
  const bool exact = want.dtype == DType::kI64 || want.dtype == DType::kI32 ||
                     want.dtype == DType::kI8 || want.dtype == DType::kU8 ||
                     want.dtype == DType::kBool;
  double worst = 0;
  for (size_t i = 0; i < got.data.size(); ++i) {
    const double a = got.data[i], b = want.data[i];
    bool ok;
    if (std::isnan(b) || std::isnan(a)) {
      ok = std::isnan(a) && std::isnan(b);
    } else if (std::isinf(b) || std::isinf(a)) {
      ok = a == b;
    } else if (exact) {
      ok = a == b;
    } else {
      worst = std::max(worst, std::abs(a - b));
      ok = std::abs(a - b) <= atol + rtol * std::abs(b);
    }
    if (!ok)
      return ::testing::AssertionFailure()
             << what << ": element " << i << " is " << a << ", expected " << b << " (rtol " << rtol
             << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess() << what << ": max|err| " << worst;
}

::testing::AssertionResult graphs_equivalent(const ir::Graph& before, const ir::Graph& after,
                                             std::initializer_list<int64_t> sizes, double rtol,
                                             double atol, uint32_t seed, int64_t int_hi) {
  for (int64_t s : sizes) {
    auto inputs = random_inputs(before, s, seed + static_cast<uint32_t>(s), int_hi);
    auto a = compiler::reference_run(before, s, inputs);
    if (!a.ok())
      return ::testing::AssertionFailure() << "before, S=" << s << ": " << a.status().message();
    // `after` may have dropped inputs it no longer reads.
    std::map<std::string, compiler::RefTensor> in_after;
    for (int id : after.inputs)
      if (auto it = inputs.find(after.values[id].name); it != inputs.end()) in_after.insert(*it);
    auto b = compiler::reference_run(after, s, in_after);
    if (!b.ok())
      return ::testing::AssertionFailure() << "after, S=" << s << ": " << b.status().message();
    for (const auto& [name, t] : *a) {
      auto it = b->find(name);
      if (it == b->end())
        return ::testing::AssertionFailure() << "after has no output '" << name << "'";
      auto r =
          tensors_close(it->second, t, rtol, atol, fmt::format("output '{}' at S={}", name, s));
      if (!r) return r;
    }
  }
  return ::testing::AssertionSuccess();
}

Result<compiler::RefTensor> ref_read_pb(const std::filesystem::path& path, std::string* name) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(fmt::format("cannot open '{}'", path.string()));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    return invalid_argument(fmt::format("'{}' is not a TensorProto", path.string()));
  KILN_ASSIGN_OR_RETURN(compiler::OnnxConstant c,
                        compiler::onnx_tensor_to_constant(t, t.name(), path.parent_path()));
  ir::Value v;
  v.name = t.name();
  v.dtype = c.dtype;
  v.constant = std::move(c.constant);
  if (name) *name = t.name();
  return compiler::reference_decode_constant(v);
}

Result<std::map<std::string, compiler::RefTensor>> ref_read_pb_inputs(
    const std::filesystem::path& data_dir) {
  std::map<std::string, compiler::RefTensor> inputs;
  for (int i = 0;; ++i) {
    const std::filesystem::path pb = data_dir / fmt::format("input_{}.pb", i);
    if (!std::filesystem::exists(pb)) return inputs;
    std::string name;
    KILN_ASSIGN_OR_RETURN(compiler::RefTensor t, ref_read_pb(pb, &name));
    inputs[name] = std::move(t);
  }
}

std::filesystem::path op_models_dir() { return source_root() / "tests/models/ops"; }

std::filesystem::path exported_models_dir() { return source_root() / "tests/models/exported"; }

std::vector<std::string> model_names(const std::filesystem::path& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec))
    if (e.is_directory() && std::filesystem::exists(e.path() / "model.onnx"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<compiler::ImportOptions> exported_import_options(const std::filesystem::path& dir) {
  KILN_ASSIGN_OR_RETURN(compiler::CompileConfig cfg, compiler::config_load(dir / "kiln.yaml"));
  compiler::ImportOptions opts{cfg.size_dim, cfg.dims};
  opts.max_size = cfg.max_size;
  return opts;
}

int count_ops(const ir::Graph& g, std::string_view op, std::string_view domain) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.op == op && node.domain == domain;
  return n;
}

}  // namespace kiln::testing
