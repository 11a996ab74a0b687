#include "tests/support/onnx_node_test.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <fstream>
#include <map>

#include "compiler/frontend/onnx_import.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/ir_harness.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

bool frozen(const NodeTestOptions& opts, int i, const onnx::ValueInfoProto& vi) {
  const int32_t et = vi.type().tensor_type().elem_type();
  return opts.freeze_all || opts.freeze_inputs.contains(i) ||
         (opts.freeze_integers &&
          (et == onnx::TensorProto::INT64 || et == onnx::TensorProto::INT32)) ||
         (opts.freeze_bools && et == onnx::TensorProto::BOOL);
}

}  // namespace

void check_onnx_node_test(const std::string& name, const NodeTestOptions& opts) {
  const fs::path dir = kOnnxNodeTests / name;
  if (!fs::exists(dir / "model.onnx")) GTEST_SKIP() << dir << " not installed";
  std::ifstream f(dir / "model.onnx", std::ios::binary);
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromIstream(&f)) << name;
  for (auto& op : *m.mutable_opset_import())
    if ((op.domain().empty() || op.domain() == "ai.onnx") && op.version() < opts.min_opset)
      op.set_version(opts.min_opset);
  const fs::path data = dir / "test_data_set_0";
  onnx::GraphProto* gp = m.mutable_graph();
  std::vector<onnx::ValueInfoProto> kept;
  std::map<std::string, compiler::RefTensor> in;
  for (int i = 0; i < gp->input_size(); ++i) {
    const onnx::ValueInfoProto& vi = gp->input(i);
    const fs::path pb = data / fmt::format("input_{}.pb", i);
    if (frozen(opts, i, vi)) {
      std::ifstream tf(pb, std::ios::binary);
      onnx::TensorProto* t = gp->add_initializer();
      ASSERT_TRUE(t->ParseFromIstream(&tf)) << pb;
      t->set_name(vi.name());
      continue;
    }
    kept.push_back(vi);
    Result<compiler::RefTensor> t = ref_read_pb(pb);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    in[vi.name()] = *t;
  }
  gp->clear_input();
  for (const auto& vi : kept) *gp->add_input() = vi;
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  Result<ir::Graph> g =
      compiler::onnx_import_bytes(bytes, name, dir, compiler::ImportOptions{"", {}});
  ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
  auto out = compiler::reference_run(*g, 1, in);
  ASSERT_TRUE(out.ok()) << name << ": " << out.status().to_string();
  for (size_t j = 0; j < g->outputs.size(); ++j) {
    const std::string& o = g->values[g->outputs[j]].name;
    Result<compiler::RefTensor> want = ref_read_pb(data / fmt::format("output_{}.pb", j));
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    EXPECT_TRUE(tensors_close(out->at(o), *want, opts.rtol, opts.atol, name + " " + o));
    if (opts.check_dtype) {
      EXPECT_EQ(out->at(o).dtype, want->dtype) << name;
    }
  }
}

std::vector<std::string> onnx_node_tests(const std::vector<std::string>& prefixes) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kOnnxNodeTests, ec)) {
    const std::string n = e.path().filename().string();
    for (const auto& p : prefixes)
      if (n.rfind(p, 0) == 0 && n.find("expanded") == std::string::npos) names.insert(n);
  }
  return {names.begin(), names.end()};
}

}  // namespace kiln::testing
