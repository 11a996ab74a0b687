#include "compiler/frontend/onnx_import.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <system_error>

#include "cache/fs_ops.h"
#include "compiler/frontend/onnx_graph_checks.h"
#include "compiler/frontend/onnx_kv_cache.h"
#include "compiler/frontend/onnx_model_parse.h"
#include "compiler/frontend/onnx_tensor.h"
#include "compiler/ir/graph_infer.h"
#include "compiler/log.h"
#include "compiler/reference/reference_interpreter.h"
#include "onnx/onnx_pb.h"

namespace kiln::compiler {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxTensorAttrBytes = 1 << 20;

class Importer {
 public:
  Importer(const fs::path& base_dir, const ImportOptions& opts,
           std::map<std::string, int64_t> opsets)
      : base_dir_(base_dir),
        opts_(opts),
        opsets_(std::move(opsets)),
        budget_(opts.max_external_bytes) {}

  Result<ir::Graph> run(const onnx::GraphProto& gp, const std::vector<std::string>& names);

 private:
  Status add_initializers(const onnx::GraphProto& gp);
  Status add_inputs(const onnx::GraphProto& gp);
  Result<ir::Shape> input_shape(const onnx::ValueInfoProto& vi);
  Status add_constant_node(const onnx::NodeProto& n, const std::string& name);
  Status add_node(const onnx::NodeProto& n, const std::string& name);
  Status define_value(const std::string& name, ir::Value v, std::string who);
  Status check_outputs(const onnx::GraphProto& gp);

  fs::path base_dir_;
  const ImportOptions& opts_;
  std::map<std::string, int64_t> opsets_;  // domain ("" = ONNX) -> version
  ir::Graph g_;
  bool uses_size_ = false;
  std::map<std::string, int> ids_;             // value name -> id
  std::map<std::string, std::string> source_;  // value name -> who defines it, for messages
  ExternalDataBudget budget_;                  // external data read by this import
};

Status Importer::add_initializers(const onnx::GraphProto& gp) {
  if (gp.sparse_initializer_size() > 0)
    return unimplemented(fmt::format("sparse initializer '{}' is not supported",
                                     gp.sparse_initializer(0).values().name()));
  // Initializers that name the same external region with the same type and shape (weights an
  // exporter wrote once for several names) become one constant, read once. Graph outputs keep
  // their own value, so the output carries its name.
  std::set<std::string> outputs;
  for (const auto& vi : gp.output()) outputs.insert(vi.name());
  std::map<std::string, int> regions;  // external_region_key -> value id
  for (const auto& t : gp.initializer()) {
    if (t.name().empty()) return invalid_argument("an initializer has no name");
    if (ids_.contains(t.name()))
      return invalid_argument(fmt::format("initializer '{}' is defined twice", t.name()));
    std::optional<std::string> region;
    if (!outputs.contains(t.name())) region = external_region_key(t);
    if (auto it = region ? regions.find(*region) : regions.end(); it != regions.end()) {
      ids_[t.name()] = it->second;
      source_[t.name()] = fmt::format("an initializer (the same external data as '{}')",
                                      g_.values[it->second].name);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(OnnxConstant c,
                          onnx_tensor_to_constant(t, t.name(), base_dir_, {.budget = &budget_}));
    ir::Value v;
    v.name = t.name();
    v.dtype = c.dtype;
    for (int64_t d : c.constant.dims) v.shape.push_back(ir::DimExpr::constant(d));
    v.constant = std::move(c.constant);
    ids_[t.name()] = g_.add_value(std::move(v));
    source_[t.name()] = "an initializer";
    if (region) regions.emplace(*region, ids_[t.name()]);
  }
  return Status::ok_status();
}

Result<ir::Shape> Importer::input_shape(const onnx::ValueInfoProto& vi) {
  const std::string what = fmt::format("graph input '{}'", vi.name());
  const auto& tt = vi.type().tensor_type();
  if (!tt.has_shape())
    return invalid_argument(
        fmt::format("{} has no shape; kiln needs every dim fixed or named", what));
  ir::Shape shape;
  int64_t const_numel = 1;
  for (int a = 0; a < tt.shape().dim_size(); ++a) {
    const auto& d = tt.shape().dim(a);
    if (d.has_dim_value()) {
      if (d.dim_value() < 1)
        return invalid_argument(
            fmt::format("{} axis {} has dim_value {}; dims must be >= 1", what, a, d.dim_value()));
      shape.push_back(ir::DimExpr::constant(d.dim_value()));
    } else if (d.has_dim_param() && d.dim_param() == opts_.size_dim) {
      shape.push_back(ir::DimExpr::size());
      uses_size_ = true;
      continue;
    } else if (d.has_dim_param() && opts_.dims.contains(d.dim_param())) {
      const int64_t v = opts_.dims.at(d.dim_param());
      if (v < 1)
        return invalid_argument(
            fmt::format("{} axis {}: dims['{}'] = {} must be >= 1", what, a, d.dim_param(), v));
      shape.push_back(ir::DimExpr::constant(v));
    } else if (d.has_dim_param() && !d.dim_param().empty() && opts_.unbound_dim) {
      shape.push_back(ir::DimExpr::constant(*opts_.unbound_dim));
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      return invalid_argument(fmt::format(
          "{} axis {} has dim_param '{}', which is neither the size_dim ('{}') nor bound in "
          "dims; set it in `dims` or `size_dim` in the config",
          what, a, d.dim_param(), opts_.size_dim));
    } else {
      return invalid_argument(fmt::format(
          "{} axis {} has neither dim_value nor dim_param; kiln needs every dim fixed or named",
          what, a));
    }
    if (__builtin_mul_overflow(const_numel, shape.back().offset, &const_numel))
      return invalid_argument(
          fmt::format("{}: its dims {} overflow int64", what, ir::shape_to_string(shape)));
  }
  return shape;
}

Status Importer::define_value(const std::string& name, ir::Value v, std::string who) {
  if (auto it = source_.find(name); it != source_.end())
    return invalid_argument(
        fmt::format("value '{}' is produced twice: by {} and by {}", name, it->second, who));
  v.name = name;
  ids_[name] = g_.add_value(std::move(v));
  source_[name] = std::move(who);
  return Status::ok_status();
}

Status Importer::add_inputs(const onnx::GraphProto& gp) {
  std::set<std::string> seen;
  for (const auto& vi : gp.input()) {
    const std::string what = fmt::format("graph input '{}'", vi.name());
    if (vi.name().empty()) return invalid_argument("a graph input has no name");
    if (!seen.insert(vi.name()).second)
      return invalid_argument(fmt::format("{} is listed twice", what));
    if (!vi.type().has_tensor_type())
      return unimplemented(
          fmt::format("{} is not a tensor (sequences, maps and optionals are not "
                      "supported)",
                      what));
    const int32_t elem = vi.type().tensor_type().elem_type();
    if (auto it = ids_.find(vi.name()); it != ids_.end()) {
      // ONNX's "initializer as default for an input": kiln treats it as a constant weight.
      const ir::Value& w = g_.values[it->second];
      KILN_ASSIGN_OR_RETURN(DType dt, onnx_dtype(elem, what));
      if (dt != w.dtype)
        return invalid_argument(fmt::format("{} is declared {} but its initializer is {}", what,
                                            dtype_name(dt), dtype_name(w.dtype)));
      continue;
    }
    ir::Value v;
    KILN_ASSIGN_OR_RETURN(v.dtype, onnx_dtype(elem, what));
    KILN_ASSIGN_OR_RETURN(v.shape, input_shape(vi));
    KILN_RETURN_IF_ERROR(define_value(vi.name(), std::move(v), "a graph input"));
    g_.inputs.push_back(ids_.at(vi.name()));
  }
  if (!uses_size_ && !opts_.size_dim.empty())
    return invalid_argument(fmt::format(
        "no graph input has the size_dim '{}' as a dim_param; set `size_dim` in the config to the "
        "dim_param that is the run-time size",
        opts_.size_dim));
  return Status::ok_status();
}

Status Importer::add_constant_node(const onnx::NodeProto& n, const std::string& name) {
  const std::string what = onnx_node_label(name, n);
  if (n.input_size() != 0 || n.output_size() != 1 || n.output(0).empty() || n.attribute_size() != 1)
    return invalid_argument(
        fmt::format("{} must have no inputs, one output and one attribute", what));
  const onnx::AttributeProto& a = n.attribute(0);
  OnnxConstant c;
  auto scalars = [&](DType dt, const auto& vals, bool scalar) {
    c.dtype = dt;
    if (!scalar) c.constant.dims.push_back(static_cast<int64_t>(vals.size()));
    for (auto v : vals) {
      const auto x =
          static_cast<std::conditional_t<std::is_floating_point_v<decltype(v)>, float, int64_t>>(v);
      const auto* p = reinterpret_cast<const uint8_t*>(&x);
      c.constant.bytes.insert(c.constant.bytes.end(), p, p + sizeof(x));
    }
  };
  if (a.name() == "value" && a.has_t()) {
    KILN_ASSIGN_OR_RETURN(
        c, onnx_tensor_to_constant(a.t(), n.output(0), base_dir_, {.budget = &budget_}));
  } else if (a.name() == "value_float") {
    scalars(DType::kF32, std::vector<float>{a.f()}, true);
  } else if (a.name() == "value_floats") {
    scalars(DType::kF32, std::vector<float>(a.floats().begin(), a.floats().end()), false);
  } else if (a.name() == "value_int") {
    scalars(DType::kI64, std::vector<int64_t>{a.i()}, true);
  } else if (a.name() == "value_ints") {
    scalars(DType::kI64, std::vector<int64_t>(a.ints().begin(), a.ints().end()), false);
  } else {
    return unimplemented(fmt::format("{}: attribute '{}' is not supported", what, a.name()));
  }
  ir::Value v;
  v.dtype = c.dtype;
  for (int64_t d : c.constant.dims) v.shape.push_back(ir::DimExpr::constant(d));
  v.constant = std::move(c.constant);
  return define_value(n.output(0), std::move(v), what);
}

Result<ir::AttrValue> convert_attr(const onnx::AttributeProto& a, const std::string& what) {
  using AP = onnx::AttributeProto;
  switch (a.type()) {
    case AP::INT:
      return ir::AttrValue(a.i());
    case AP::FLOAT:
      return ir::AttrValue(static_cast<double>(a.f()));
    case AP::STRING:
      return ir::AttrValue(a.s());
    case AP::INTS:
      return ir::AttrValue(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case AP::FLOATS:
      return ir::AttrValue(std::vector<double>(a.floats().begin(), a.floats().end()));
    default:
      break;
  }
  const std::string type_name = AP::AttributeType_IsValid(a.type())
                                    ? AP::AttributeType_Name(a.type())
                                    : fmt::format("unknown type {}", static_cast<int>(a.type()));
  return unimplemented(fmt::format("{}: attribute '{}' has type {}, which is not supported", what,
                                   a.name(), type_name));
}

Status Importer::add_node(const onnx::NodeProto& n, const std::string& name) {
  if (n.op_type() == "Constant") return add_constant_node(n, name);
  const std::string what = onnx_node_label(name, n);
  ir::Node node;
  node.name = name;
  node.op = n.op_type();
  node.domain = onnx_is_default_domain(n.domain()) ? "" : n.domain();
  for (const auto& a : n.attribute()) {
    if (!a.ref_attr_name().empty())
      return unimplemented(
          fmt::format("{}: attribute '{}' refers to a function attribute", what, a.name()));
    if (a.type() == onnx::AttributeProto::TENSOR && a.has_t()) {
      // A tensor attribute (ConstantOfShape's `value`, ...) becomes its values as doubles plus
      // "<name>_dtype" (the DType enum value); only small tensors are meaningful here, and the
      // cap is checked from the shape before any data is read.
      const TensorLimits limits{
          .max_bytes = kMaxTensorAttrBytes, .kind = "tensor attribute", .budget = &budget_};
      Result<OnnxConstant> c =
          onnx_tensor_to_constant(a.t(), name + "." + a.name(), base_dir_, limits);
      if (!c.ok()) return c.status().with_context(what);
      ir::Value tmp;
      tmp.name = a.name();
      tmp.dtype = c->dtype;
      tmp.constant = std::move(c->constant);
      KILN_ASSIGN_OR_RETURN(RefTensor t, reference_decode_constant(tmp));
      node.attrs[a.name()] = std::move(t.data);
      node.attrs[a.name() + "_dtype"] = static_cast<int64_t>(c->dtype);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(ir::AttrValue v, convert_attr(a, what));
    if (!node.attrs.emplace(a.name(), std::move(v)).second)
      return invalid_argument(fmt::format("{}: attribute '{}' is given twice", what, a.name()));
  }
  for (const auto& in : n.input()) node.inputs.push_back(in.empty() ? -1 : ids_.at(in));
  while (!node.inputs.empty() && node.inputs.back() == -1) node.inputs.pop_back();
  int last = n.output_size() - 1;
  while (last >= 0 && n.output(last).empty()) --last;
  for (int k = 0; k <= last; ++k) {
    // An omitted optional output before a named one gets a private placeholder value that
    // nothing reads (the IR gives every output slot a value).
    std::string out_name = n.output(k);
    if (out_name.empty()) {
      out_name = fmt::format("{}:unused_output_{}", name, k);
      for (int j = 2; ids_.contains(out_name); ++j)
        out_name = fmt::format("{}:unused_output_{}_{}", name, k, j);
    }
    ir::Value v;
    v.producer = static_cast<int>(g_.nodes.size());
    KILN_RETURN_IF_ERROR(define_value(out_name, std::move(v), what));
    node.outputs.push_back(ids_.at(out_name));
  }
  g_.nodes.push_back(std::move(node));
  return Status::ok_status();
}

// Declared output types must agree with what inference computed.
Status Importer::check_outputs(const onnx::GraphProto& gp) {
  for (int i = 0; i < gp.output_size(); ++i) {
    const auto& vi = gp.output(i);
    const ir::Value& v = g_.values[g_.outputs[i]];
    if (!vi.type().has_tensor_type()) continue;
    const auto& tt = vi.type().tensor_type();
    const std::string what = fmt::format("graph output '{}'", vi.name());
    if (tt.elem_type() != 0) {
      KILN_ASSIGN_OR_RETURN(DType dt, onnx_dtype(tt.elem_type(), what));
      if (dt != v.dtype)
        return invalid_argument(fmt::format("{} is declared {} but computes {}", what,
                                            dtype_name(dt), dtype_name(v.dtype)));
    }
    if (!tt.has_shape()) continue;
    const auto& s = tt.shape();
    if (static_cast<size_t>(s.dim_size()) != v.shape.size())
      return invalid_argument(fmt::format("{} is declared with {} dims but computes {}", what,
                                          s.dim_size(), ir::shape_to_string(v.shape)));
    for (int a = 0; a < s.dim_size(); ++a) {
      const auto& d = s.dim(a);
      std::optional<ir::DimExpr> want;
      if (d.has_dim_value()) want = ir::DimExpr::constant(d.dim_value());
      if (d.has_dim_param() && d.dim_param() == opts_.size_dim) want = ir::DimExpr::size();
      if (d.has_dim_param() && opts_.dims.contains(d.dim_param()))
        want = ir::DimExpr::constant(opts_.dims.at(d.dim_param()));
      if (want && *want != v.shape[a])
        return invalid_argument(fmt::format("{} axis {} is declared {} but computes {} (shape {})",
                                            what, a, want->to_string(), v.shape[a].to_string(),
                                            ir::shape_to_string(v.shape)));
    }
  }
  return Status::ok_status();
}

Result<ir::Graph> Importer::run(const onnx::GraphProto& gp, const std::vector<std::string>& names) {
  g_.name = gp.name().empty() ? "main" : gp.name();
  KILN_RETURN_IF_ERROR(add_initializers(gp));
  KILN_RETURN_IF_ERROR(add_inputs(gp));
  KILN_ASSIGN_OR_RETURN(std::vector<int> order, onnx_topo_order(gp, names, source_));
  for (int i : order) KILN_RETURN_IF_ERROR(add_node(gp.node(i), names[i]));
  if (gp.output_size() == 0) return invalid_argument("the graph has no outputs");
  std::set<std::string> seen;
  for (const auto& o : gp.output()) {
    if (!seen.insert(o.name()).second)
      return invalid_argument(fmt::format("graph output '{}' is listed twice", o.name()));
    auto it = ids_.find(o.name());
    if (it == ids_.end())
      return invalid_argument(fmt::format("graph output '{}' is produced by nothing", o.name()));
    g_.outputs.push_back(it->second);
  }
  g_.opsets = opsets_;
  InferOptions infer;
  if (opts_.max_size > 0) infer.max_size = opts_.max_size;
  infer.fold = opts_.fold;
  KILN_RETURN_IF_ERROR(graph_infer(g_, infer));
  KILN_RETURN_IF_ERROR(check_outputs(gp));
  KILN_RETURN_IF_ERROR(ir::graph_verify(g_));
  return std::move(g_);
}

}  // namespace

namespace {

Result<ir::Graph> import_model(std::string_view bytes, const fs::path& base_dir,
                               const ImportOptions& opts) {
  KILN_ASSIGN_OR_RETURN(onnx::ModelProto m, onnx_parse_model(bytes));
  KILN_ASSIGN_OR_RETURN(auto opsets, onnx_check_opsets(m));
  KILN_ASSIGN_OR_RETURN(const std::vector<OnnxKvPair> kv, onnx_kv_to_prefill(*m.mutable_graph()));
  if (!kv.empty() && !opts.generation)
    logger().warn(
        "kiln: the model has a KV cache ({} past/present pairs, '{}' → '{}' first): compiling its "
        "prefill step with an empty past, the presents holding the new tokens' keys and values "
        "(add a `kv_cache:` section to the config to compile it for generation with a "
        "runtime-owned paged cache)",
        kv.size(), kv[0].past, kv[0].present);
  const std::vector<std::string> names = onnx_node_names(m.graph());
  KILN_RETURN_IF_ERROR(onnx_check_ops(m.graph(), names, opsets));
  KILN_ASSIGN_OR_RETURN(ir::Graph g,
                        Importer(base_dir, opts, std::move(opsets)).run(m.graph(), names));
  for (const OnnxKvPair& p : kv) g.kv_presents.push_back(p.present);
  return g;
}

}  // namespace

Result<ir::Graph> onnx_import_bytes(std::string_view bytes, std::string_view source,
                                    const fs::path& base_dir, const ImportOptions& opts) {
  Result<ir::Graph> r = import_model(bytes, base_dir, opts);
  if (!r.ok()) return r.status().with_context(std::string(source));
  return r;
}

Result<ir::Graph> onnx_import_file(const fs::path& model, const ImportOptions& opts) {
  const std::string src = model.string();
  // O_NONBLOCK: a FIFO (or a device) named as the model must not block the open; fstat then
  // refuses anything but a regular file, on the very file that is read.
  const cache::UniqueFd file(::open(model.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!file.valid() && errno == ENOENT)
    return not_found(fmt::format("model file '{}' not found", src));
  if (!file.valid())
    return io_error(fmt::format("cannot open model '{}': {}", src, std::strerror(errno)));
  const int fd = file.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return io_error(fmt::format("cannot stat model '{}': {}", src, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return invalid_argument(fmt::format("model '{}' is not a regular file ({})", src,
                                        S_ISFIFO(st.st_mode)  ? "a FIFO"
                                        : S_ISDIR(st.st_mode) ? "a directory"
                                                              : "a socket or device"));
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return invalid_argument(fmt::format("{}: the model file is empty", src));
  if (size > kOnnxMaxModelBytes)
    return invalid_argument(fmt::format(
        "{}: the model file is {} bytes; protobuf cannot parse a single file over 2 GiB, so store "
        "the weights as external data (onnx.save_model(..., save_as_external_data=True))",
        src, size));
  std::string bytes(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, bytes.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return io_error(fmt::format("cannot read model '{}': {}", src, std::strerror(errno)));
    if (n == 0)
      return io_error(
          fmt::format("cannot read model '{}': it shrank to {} bytes while read", src, done));
    done += static_cast<uint64_t>(n);
  }
  const fs::path base = model.has_parent_path() ? model.parent_path() : fs::path(".");
  return onnx_import_bytes(bytes, src, base, opts);
}

}  // namespace kiln::compiler
