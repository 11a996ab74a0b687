// ONNX import: dims, initializers and external data (bad inputs).
#include <gtest/gtest.h>
#include <unistd.h>

#include "compiler/frontend/onnx_import.h"
#include "tests/compiler/frontend/onnx_import_builder.h"

namespace kiln::compiler {
namespace {

using namespace import_test;  // NOLINT: the builder and helpers of this test family
using ir::DimExpr;
using ir::Shape;
using kiln::testing::source_root;
namespace fs = std::filesystem;

// ---- dims ------------------------------------------------------------------------------------

TEST(OnnxImportDims, BindsSizeAndDims) {
  ModelBuilder b;
  b.input("x", {"batch", "seq", "4"});
  b.node("Relu", {"x"}, {"y"}, "act");
  b.output("y", {"batch", "seq", "4"});
  ir::Graph g = import_ok(b, ImportOptions{"batch", {{"seq", 16}}});
  EXPECT_EQ(g.values[g.inputs[0]].shape,
            (Shape{DimExpr::size(), DimExpr::constant(16), DimExpr::constant(4)}));
  expect_error(
      b, StatusCode::kInvalidArgument,
      {"graph input 'x' axis 1 has dim_param 'seq'", "size_dim ('batch')", "`dims`", "`size_dim`"},
      ImportOptions{"batch", {}});
  expect_error(b, StatusCode::kInvalidArgument, {"no graph input has the size_dim 'tokens'"},
               ImportOptions{"tokens", {{"batch", 2}, {"seq", 3}}});
}

TEST(OnnxImportDims, BadDimValues) {
  for (const char* bad : {"0", "-3"}) {
    ModelBuilder b;
    b.input("x", {"n", bad});
    b.node("Relu", {"x"}, {"y"}, "act");
    b.output("y");
    expect_error(b, StatusCode::kInvalidArgument,
                 {"graph input 'x' axis 1 has dim_value " + std::string(bad), ">= 1"});
  }
  ModelBuilder u;
  u.input("x", {"n", "?"});
  u.node("Relu", {"x"}, {"y"}, "act");
  u.output("y");
  expect_error(u, StatusCode::kInvalidArgument,
               {"graph input 'x' axis 1 has neither dim_value nor dim_param"});
  ModelBuilder o;
  o.input("x", {"n", "4611686018427387904", "4611686018427387904"});
  o.node("Relu", {"x"}, {"y"}, "act");
  o.output("y");
  expect_error(o, StatusCode::kInvalidArgument, {"graph input 'x'", "overflow int64"});
  ModelBuilder noshape;
  noshape.input("x", {"n"});
  noshape.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  noshape.node("Relu", {"x"}, {"y"}, "act");
  noshape.output("y");
  expect_error(noshape, StatusCode::kInvalidArgument, {"graph input 'x' has no shape"});
}

TEST(OnnxImportDims, DeclaredOutputsMustMatch) {
  ModelBuilder b = tiny();
  b.g->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(5);
  expect_error(b, StatusCode::kInvalidArgument,
               {"graph output 'y' axis 1 is declared 5 but computes 3", "[S, 3]"});
  ModelBuilder c = tiny();
  c.g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT16);
  expect_error(c, StatusCode::kInvalidArgument,
               {"graph output 'y' is declared f16 but computes f32"});
  ModelBuilder d = tiny();
  d.g->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim();
  expect_error(d, StatusCode::kInvalidArgument, {"graph output 'y' is declared with 3 dims"});
  // Names that are neither size_dim nor in dims are exporter noise: accepted.
  ModelBuilder e = tiny();
  e.g->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_param("Reluy_dim_1");
  import_ok(e);
  ModelBuilder f;
  f.input("x", {"n", "4"});
  f.node("Relu", {"x"}, {"y"}, "act");
  f.output("y", {"4", "n"});
  expect_error(f, StatusCode::kInvalidArgument,
               {"graph output 'y' axis 0 is declared 4 but computes S"});
}

TEST(OnnxImportDims, HalfPrecisionAndStringInputs) {
  ModelBuilder b;  // f16 imports (the back end says what it cannot lower yet)
  b.input("xh", {"n", "4"}, onnx::TensorProto::FLOAT16);
  b.node("Relu", {"xh"}, {"y"}, "act");
  b.output("y", {"n", "4"}, onnx::TensorProto::FLOAT16);
  ir::Graph g = import_ok(b);
  EXPECT_EQ(g.values[g.outputs[0]].dtype, DType::kF16);
  ModelBuilder s;
  s.input("xs", {"n"}, onnx::TensorProto::STRING);
  s.node("Identity", {"xs"}, {"y"}, "id");
  s.output("y");
  expect_error(s, StatusCode::kUnimplemented, {"graph input 'xs'", "STRING"});
}

// ---- initializers ----------------------------------------------------------------------------

TEST(OnnxImportTensors, TypedAndRawData) {
  ModelBuilder b = tiny();
  b.g->mutable_initializer(0)->clear_float_data();
  std::vector<float> w(12);
  for (int i = 0; i < 12; ++i) w[i] = static_cast<float>(i);
  b.g->mutable_initializer(0)->set_raw_data(std::string(reinterpret_cast<char*>(w.data()), 48));
  ir::Graph g = import_ok(b);
  const auto& bytes = g.values[g.find_value("W")].constant->bytes;
  ASSERT_EQ(bytes.size(), 48u);
  EXPECT_EQ(std::memcmp(bytes.data(), w.data(), 48), 0);
}

TEST(OnnxImportTensors, SizeMismatches) {
  ModelBuilder raw = tiny();
  raw.g->mutable_initializer(0)->clear_float_data();
  raw.g->mutable_initializer(0)->set_raw_data(std::string(40, '\0'));
  expect_error(raw, StatusCode::kDataLoss, {"tensor 'W'", "raw_data has 40 bytes", "needs 48"});
  ModelBuilder typed = tiny();
  typed.g->mutable_initializer(0)->add_float_data(1.0f);
  expect_error(typed, StatusCode::kDataLoss,
               {"tensor 'W'", "float_data has 13 values", "needs 12"});
  ModelBuilder both = tiny();
  both.g->mutable_initializer(0)->set_raw_data(std::string(48, '\0'));
  expect_error(both, StatusCode::kInvalidArgument, {"tensor 'W' has data in both"});
  ModelBuilder wrong = tiny();
  wrong.g->mutable_initializer(0)->clear_float_data();
  for (int i = 0; i < 12; ++i) wrong.g->mutable_initializer(0)->add_int64_data(1);
  expect_error(wrong, StatusCode::kInvalidArgument,
               {"tensor 'W' is f32 but stores its data in int64_data"});
  ModelBuilder none = tiny();
  none.g->mutable_initializer(0)->clear_float_data();
  expect_error(none, StatusCode::kInvalidArgument, {"tensor 'W' has no data"});
}

TEST(OnnxImportTensors, HugeDeclaredShapeTinyData) {
  ModelBuilder b = tiny();
  auto* t = b.g->add_initializer();
  t->set_name("big");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(int64_t{1} << 40);
  t->add_dims(1024);
  t->set_raw_data(std::string(16, '\0'));
  expect_error(b, StatusCode::kDataLoss, {"tensor 'big'", "raw_data has 16 bytes"});
  ModelBuilder o = tiny();
  auto* u = o.g->add_initializer();
  u->set_name("overflow");
  u->set_data_type(onnx::TensorProto::FLOAT);
  u->add_dims(int64_t{1} << 62);
  u->add_dims(int64_t{1} << 62);
  expect_error(o, StatusCode::kInvalidArgument, {"tensor 'overflow'", "overflow int64"});
  ModelBuilder n = tiny();
  n.g->mutable_initializer(0)->set_dims(0, -4);
  expect_error(n, StatusCode::kInvalidArgument, {"tensor 'W' has a negative dim -4"});
  ModelBuilder s = tiny();
  s.g->mutable_initializer(0)->set_data_type(onnx::TensorProto::COMPLEX64);
  expect_error(s, StatusCode::kUnimplemented, {"tensor 'W'", "COMPLEX64"});
}

TEST(OnnxImportTensors, Int32DataRangeIsChecked) {
  ModelBuilder b = tiny();
  auto* t = b.g->add_initializer();
  t->set_name("bytes");
  t->set_data_type(onnx::TensorProto::UINT8);
  t->add_dims(2);
  t->add_int32_data(7);
  t->add_int32_data(300);
  expect_error(b, StatusCode::kInvalidArgument, {"tensor 'bytes'", "int32_data[1] = 300", "u8"});
}

// ---- external data ---------------------------------------------------------------------------

struct ExternalFixture {
  TempDir dir;
  fs::path model_dir;
  std::vector<float> w;
  ExternalFixture() : model_dir(dir.path() / "model") {
    fs::create_directories(model_dir);
    for (int i = 0; i < 12; ++i) w.push_back(0.25f * static_cast<float>(i));
    std::string blob(100, 'x');  // weights at offset 100
    blob.append(reinterpret_cast<const char*>(w.data()), 48);
    write_file(model_dir / "weights.bin", blob);
  }
  // tiny() with W stored externally under `entries`.
  static ModelBuilder model(const std::vector<std::pair<std::string, std::string>>& entries) {
    ModelBuilder b = tiny();
    auto* t = b.g->mutable_initializer(0);
    t->clear_float_data();
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [k, v] : entries) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    return b;
  }
  Result<ir::Graph> run(const std::vector<std::pair<std::string, std::string>>& entries) {
    return import(model(entries), opts_n(), model_dir);
  }
};

TEST(OnnxImportExternal, ReadsTheRightBytes) {
  ExternalFixture f;
  Result<ir::Graph> r =
      f.run({{"location", "weights.bin"}, {"offset", "100"}, {"length", "48"}, {"checksum", "x"}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& bytes = r->values[r->find_value("W")].constant->bytes;
  ASSERT_EQ(bytes.size(), 48u);
  EXPECT_EQ(std::memcmp(bytes.data(), f.w.data(), 48), 0);
  // Through onnx_import_file: external data resolves next to the model.
  write_file(f.model_dir / "model.onnx",
             ExternalFixture::model({{"location", "weights.bin"}, {"offset", "100"}}).bytes());
  Result<ir::Graph> g = onnx_import_file(f.model_dir / "model.onnx", opts_n());
  EXPECT_TRUE(g.ok()) << g.status().to_string();
}

TEST(OnnxImportExternal, PathEscapes) {
  ExternalFixture f;
  write_file(f.dir.path() / "outside.bin", std::string(148, 'o'));
  expect_error(f.run({{"location", "../outside.bin"}, {"offset", "100"}}),
               StatusCode::kInvalidArgument, {"tensor 'W'", "'../outside.bin'", "'..'"});
  expect_error(f.run({{"location", "sub/../../outside.bin"}}), StatusCode::kInvalidArgument,
               {"'..'"});
  expect_error(f.run({{"location", (f.dir.path() / "outside.bin").string()}}),
               StatusCode::kInvalidArgument, {"tensor 'W'", "is absolute"});
  fs::create_symlink(f.dir.path() / "outside.bin", f.model_dir / "link.bin");
  expect_error(f.run({{"location", "link.bin"}, {"offset", "100"}}), StatusCode::kInvalidArgument,
               {"tensor 'W'", "'link.bin'", "outside the model folder"});
  fs::create_directory_symlink(f.dir.path(), f.model_dir / "up");
  expect_error(f.run({{"location", "up/outside.bin"}, {"offset", "100"}}),
               StatusCode::kInvalidArgument, {"outside the model folder"});
  fs::create_hard_link(f.dir.path() / "outside.bin", f.model_dir / "hard.bin");
  expect_error(f.run({{"location", "hard.bin"}, {"offset", "100"}}), StatusCode::kInvalidArgument,
               {"tensor 'W'", "'hard.bin'", "hard links"});
  // A symlink that stays inside the folder is fine.
  fs::create_symlink("weights.bin", f.model_dir / "alias.bin");
  EXPECT_TRUE(f.run({{"location", "alias.bin"}, {"offset", "100"}}).ok());
}

TEST(OnnxImportExternal, OffsetsAndLengths) {
  ExternalFixture f;
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "-1"}}), StatusCode::kInvalidArgument,
               {"tensor 'W'", "offset '-1' is negative"});
  expect_error(f.run({{"location", "weights.bin"}, {"length", "-48"}}),
               StatusCode::kInvalidArgument, {"length '-48' is negative"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "12abc"}}),
               StatusCode::kInvalidArgument, {"offset '12abc' is not a non-negative integer"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "99999999999999999999"}}),
               StatusCode::kInvalidArgument, {"offset '99999999999999999999'"});
  expect_error(f.run({{"location", "weights.bin"},
                      {"offset", "9999999999999999999"},
                      {"length", "9999999999999999999"}}),
               StatusCode::kDataLoss, {"past the end of 'weights.bin' (148 bytes)"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "120"}}), StatusCode::kDataLoss,
               {"offset 120 + length 48 is past the end of 'weights.bin'"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "100"}, {"length", "44"}}),
               StatusCode::kDataLoss, {"length 44", "needs 48 bytes"});
}

TEST(OnnxImportExternal, MissingFileAndBadKeys) {
  ExternalFixture f;
  expect_error(f.run({{"location", "gone.bin"}}), StatusCode::kNotFound,
               {"tensor 'W'", "'gone.bin' not found"});
  expect_error(f.run({{"location", "weights.bin"}, {"compression", "zstd"}}),
               StatusCode::kInvalidArgument,
               {"tensor 'W'", "unknown key 'compression'", "location, offset, length, checksum"});
  expect_error(f.run({{"offset", "0"}}), StatusCode::kInvalidArgument, {"no 'location'"});
  expect_error(f.run({{"location", "weights.bin"}, {"location", "weights.bin"}}),
               StatusCode::kInvalidArgument, {"'location' is given twice"});
}

}  // namespace
}  // namespace kiln::compiler
