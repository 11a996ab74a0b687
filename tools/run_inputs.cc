#include "tools/run_inputs.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/input_validate.h"
#include "runtime/model_state.h"
#include "tools/npy_io.h"
#include "tools/tensor_io.h"

namespace kiln::tools {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename List>
std::string names_of(const List& list) {
  std::vector<std::string> names;
  for (const auto& io : list) names.push_back("'" + io.name() + "'");
  return fmt::format("{}", fmt::join(names, ", "));
}

// One -i argument: NAME=FILE.npy|FILE.pb, FILE.npz (every member), FILE.pb (its own name).
Status read_spec(const std::string& spec, std::vector<Tensor>& out) {
  const size_t eq = spec.find('=');
  const std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
  const std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
  if (ends_with(path, ".npz")) {
    if (!name.empty())
      return invalid_argument(fmt::format(
          "-i {}: an .npz names its own arrays; pass it without NAME= (-i {})", spec, path));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> all, npz_read(path));
    for (Tensor& t : all) out.push_back(std::move(t));
    return Status::ok_status();
  }
  if (ends_with(path, ".npy")) {
    if (name.empty())
      return invalid_argument(
          fmt::format("-i {}: a .npy file carries no tensor name; pass -i NAME={}", spec, path));
    KILN_ASSIGN_OR_RETURN(Tensor t, npy_read(path, name));
    out.push_back(std::move(t));
    return Status::ok_status();
  }
  if (ends_with(path, ".pb")) {
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_read_pb(path));
    if (!name.empty()) t.name = name;
    if (t.name.empty())
      return invalid_argument(
          fmt::format("-i {}: the TensorProto has no name; pass -i NAME={}", spec, path));
    out.push_back(std::move(t));
    return Status::ok_status();
  }
  return invalid_argument(fmt::format(
      "-i {}: expected a .npy, .npz or .pb file (NAME=FILE.npy, FILE.npz, FILE.pb)", spec));
}

// input_0.pb, input_1.pb, ... (or output_) in a data set; an unnamed tensor takes the name of
// the model's tensor at its position.
template <typename List>
Result<std::vector<Tensor>> read_set(const fs::path& dir, const char* prefix, const List& list) {
  std::vector<Tensor> out;
  for (int i = 0;; ++i) {
    const fs::path p = dir / fmt::format("{}_{}.pb", prefix, i);
    std::error_code ec;
    if (!fs::exists(p, ec)) break;
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_read_pb(p));
    if (t.name.empty() && i < list.size()) t.name = list.Get(i).name();
    out.push_back(std::move(t));
  }
  if (out.empty())
    return not_found(
        fmt::format("--expect {}: no {}_0.pb (an ONNX backend-test data set has "
                    "input_0.pb ... and output_0.pb ...)",
                    dir.string(), prefix));
  return out;
}

// Every model input given once, with its dtype, rank and dims (the runtime's own check: one
// size S for all inputs, in [1, max_size]). Returns S.
Result<int64_t> check_against(const std::vector<Tensor>& given, const schema::Manifest& m,
                              const std::string& from) {
  for (const Tensor& t : given) {
    const auto& in = m.inputs();
    auto it =
        std::find_if(in.begin(), in.end(), [&](const auto& io) { return io.name() == t.name; });
    if (it == in.end())
      return invalid_argument(fmt::format("{}: the model has no input '{}'; its inputs are {}",
                                          from, t.name, names_of(in)));
    if (std::count_if(given.begin(), given.end(),
                      [&](const Tensor& o) { return o.name == t.name; }) > 1)
      return invalid_argument(fmt::format("{}: input '{}' is given twice", from, t.name));
    const auto want = static_cast<DType>(it->dtype());
    if (t.dtype != want)
      return invalid_argument(fmt::format("{}: input '{}' is {}, the model expects {}", from,
                                          t.name, std::string(dtype_name(t.dtype)),
                                          std::string(dtype_name(want))));
  }
  for (const auto& io : m.inputs())
    if (std::none_of(given.begin(), given.end(),
                     [&](const Tensor& t) { return t.name == io.name(); }))
      return invalid_argument(fmt::format("{}: input '{}' is missing (the model's inputs are {})",
                                          from, io.name(), names_of(m.inputs())));
  std::vector<TensorInfo> specs;
  for (const auto& io : m.inputs()) specs.push_back(runtime::tensor_info(io));
  auto binding = runtime::inputs_validate(specs, given, m.config().max_size());
  if (!binding.ok()) return invalid_argument(from + ": " + binding.status().message());
  return binding->size;
}

}  // namespace

Result<RunInputs> run_inputs_read(const std::vector<std::string>& specs, const fs::path& expect_dir,
                                  const schema::Manifest& m) {
  RunInputs r;
  if (!expect_dir.empty()) {
    const std::string from = "--expect " + expect_dir.string();
    KILN_ASSIGN_OR_RETURN(r.tensors, read_set(expect_dir, "input", m.inputs()));
    KILN_ASSIGN_OR_RETURN(r.expected, read_set(expect_dir, "output", m.outputs()));
    KILN_ASSIGN_OR_RETURN(r.size, check_against(r.tensors, m, from));
    for (const Tensor& t : r.expected) {
      const auto& outs = m.outputs();
      auto it = std::find_if(outs.begin(), outs.end(),
                             [&](const auto& io) { return io.name() == t.name; });
      if (it == outs.end())
        return invalid_argument(fmt::format("{}: stored output '{}' is not a model output ({})",
                                            from, t.name, names_of(outs)));
      const std::vector<int64_t> want = runtime::tensor_info(*it).shape_at(r.size);
      if (t.shape != want)
        return invalid_argument(fmt::format(
            "{}: stored output '{}' has shape [{}], the model's output at size {} is [{}]", from,
            t.name, fmt::join(t.shape, ", "), r.size, fmt::join(want, ", ")));
    }
    return r;
  }
  for (const std::string& spec : specs) KILN_RETURN_IF_ERROR(read_spec(spec, r.tensors));
  if (!specs.empty()) {
    KILN_ASSIGN_OR_RETURN(r.size, check_against(r.tensors, m, "-i"));
  }
  return r;
}

}  // namespace kiln::tools
