// onnx_kv_cache: past/present pairs found by structure in the KV-cache exports (tests/models/kv),
// none in the corpus of exports without a cache, and the import error that names them.
#include "compiler/frontend/onnx_kv_cache.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "compiler/frontend/onnx_import.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

onnx::ModelProto load(const fs::path& p) {
  onnx::ModelProto m;
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << p;
  return m;
}

TEST(OnnxKvCache, FindsEveryPairInTheKvExports) {
  const fs::path root = kiln::testing::source_root() / "tests/models/kv";
  int models = 0;
  for (const std::string& name : kiln::testing::model_names(root)) {
    ++models;
    const std::vector<OnnxKvPair> pairs = onnx_kv_pairs(load(root / name / "model.onnx").graph());
    ASSERT_EQ(pairs.size(), 4u) << name;  // 2 layers x (key, value)
    for (int layer = 0; layer < 2; ++layer)
      for (int kv = 0; kv < 2; ++kv) {
        const std::string which = std::to_string(layer) + (kv ? ".value" : ".key");
        const OnnxKvPair& p = pairs[static_cast<size_t>(2 * layer + kv)];
        EXPECT_EQ(p.past, "past_key_values." + which) << name;
        EXPECT_EQ(p.present, "present." + which) << name;
      }
    Result<ir::Graph> g = onnx_import_file(root / name / "model.onnx", ImportOptions{"seq", {}});
    ASSERT_FALSE(g.ok()) << name;
    EXPECT_EQ(g.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(g.status().message().find("KV cache: 4 past/present pairs ('past_key_values.0.key' "
                                        "→ 'present.0.key'"),
              std::string::npos)
        << g.status().message();
    EXPECT_NE(g.status().message().find("use_cache=False"), std::string::npos);
  }
  EXPECT_EQ(models, 4);
}

TEST(OnnxKvCache, NoPairsInExportsWithoutACache) {
  const fs::path root = kiln::testing::exported_models_dir();
  for (const std::string& name : kiln::testing::model_names(root))
    EXPECT_TRUE(onnx_kv_pairs(load(root / name / "model.onnx").graph()).empty()) << name;
}

}  // namespace
}  // namespace kiln::compiler
