// ONNX import hardening: limits checked before bytes are read or allocated (tensor attribute cap,
// the external-data budget with many tensors naming one region), FIFOs refused without blocking
// (as external data and as the model), and the open beneath the model folder. Each import that
// could block or eat memory runs in a forked child with alarm() as a backstop, and the child
// reports its time and peak RSS growth (getrusage) through a pipe, so the bounds are measured.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "compiler/frontend/onnx_import.h"
#include "tests/compiler/frontend/onnx_import_builder.h"

namespace kiln::compiler {
namespace {

using namespace import_test;  // NOLINT: the builder and helpers of this test family
namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct ChildReport {
  int code = -1;            // StatusCode of the import, as an int
  double seconds = 0;       // wall time of the import
  long rss_growth_kib = 0;  // peak RSS during the import minus RSS before it
  char message[1536] = {};  // the import's status message
};

long rss_kib() {
  std::ifstream f("/proc/self/statm");
  long size = 0, resident = 0;
  f >> size >> resident;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

// Runs `import` in a forked child (killed by SIGALRM after `alarm_s`, its address space capped at
// its size now + 2 GiB so a regression dies instead of swapping); fails the test when the child
// does not report.
template <typename F>
ChildReport run_in_child(F import, unsigned alarm_s = 10) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(alarm_s);
    std::ifstream statm("/proc/self/statm");
    long pages = 0;
    statm >> pages;
    const rlim_t cap = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + (rlim_t{2} << 30);
    const rlimit as{cap, cap};
    ::setrlimit(RLIMIT_AS, &as);
    ChildReport rep;
    const long before = rss_kib();
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = import();
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    rep.rss_growth_kib = ru.ru_maxrss - before;
    rep.code = static_cast<int>(s.code());
    std::snprintf(rep.message, sizeof(rep.message), "%s", s.message().c_str());
    const ssize_t n = ::write(fds[1], &rep, sizeof(rep));
    ::_exit(n == static_cast<ssize_t>(sizeof(rep)) ? 0 : 3);
  }
  ::close(fds[1]);
  ChildReport rep;
  const ssize_t n = ::read(fds[0], &rep, sizeof(rep));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(n, static_cast<ssize_t>(sizeof(rep)))
      << "the import did not finish: "
      << (WIFSIGNALED(status)
              ? std::string("killed by signal ") + std::to_string(WTERMSIG(status)) +
                    (WTERMSIG(status) == SIGALRM ? " (SIGALRM: it blocked)" : "")
              : "exit " + std::to_string(WEXITSTATUS(status)));
  return rep;
}

void print(const char* what, const ChildReport& r) {
  std::printf("[measured] %s: %.3f s, peak RSS growth %ld KiB (%s)\n", what, r.seconds,
              r.rss_growth_kib, r.message);
}

// tiny() with W stored externally at `location`.
ModelBuilder external_w(const std::string& location) {
  ModelBuilder b = tiny();
  auto* t = b.g->mutable_initializer(0);
  t->clear_float_data();
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value(location);
  return b;
}

void set_external(onnx::TensorProto* t, const std::string& location, uint64_t offset,
                  uint64_t length) {
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  for (const auto& [k, v] : {std::pair<std::string, std::string>{"location", location},
                             {"offset", std::to_string(offset)},
                             {"length", std::to_string(length)}}) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
}

// tiny() plus `count` f32 initializers <prefix>0.. that all name bytes [0, region) of shared.bin,
// as [region / 4], or with `reshaped` every odd one as [region / 8, 2] (the same bytes as
// another shape).
ModelBuilder shared_region_model(const std::string& prefix, int count, uint64_t region,
                                 bool reshaped = false) {
  ModelBuilder b = tiny();
  for (int i = 0; i < count; ++i) {
    auto* t = b.g->add_initializer();
    t->set_name(prefix + std::to_string(i));
    t->set_data_type(onnx::TensorProto::FLOAT);
    if (reshaped && i % 2 == 1) {
      t->add_dims(static_cast<int64_t>(region / 8));
      t->add_dims(2);
    } else {
      t->add_dims(static_cast<int64_t>(region / 4));
    }
    set_external(t, "shared.bin", 0, region);
  }
  return b;
}

// How many constants of `g` hold `bytes` bytes.
int constants_of_size(const ir::Graph& g, uint64_t bytes) {
  int n = 0;
  for (const ir::Value& v : g.values) n += v.constant && v.constant->bytes.size() == bytes;
  return n;
}

// A sparse file of `size` bytes: it costs no memory until read.
void sparse_file(const fs::path& p, uint64_t size) {
  write_file(p, "");
  fs::resize_file(p, size);
}

TEST(OnnxImportHardening, FifoAsExternalDataIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir.path() / "w.fifo").c_str(), 0600), 0);
  const ModelBuilder b = external_w("w.fifo");
  const ChildReport r = run_in_child([&] { return import(b, opts_n(), dir.path()).status(); });
  print("FIFO as external data", r);
  EXPECT_EQ(r.code, static_cast<int>(StatusCode::kInvalidArgument)) << r.message;
  const std::string msg = r.message;
  EXPECT_NE(msg.find("tensor 'W'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'w.fifo' is not a regular file (a FIFO)"), std::string::npos) << msg;
  EXPECT_LT(r.seconds, 1.0);
}

TEST(OnnxImportHardening, FifoAsModelFileIsRefusedWithoutBlocking) {
  TempDir dir;
  const fs::path model = dir.path() / "model.onnx";
  ASSERT_EQ(::mkfifo(model.c_str(), 0600), 0);
  const ChildReport r = run_in_child([&] { return onnx_import_file(model, opts_n()).status(); });
  print("FIFO as the model file", r);
  EXPECT_EQ(r.code, static_cast<int>(StatusCode::kInvalidArgument)) << r.message;
  EXPECT_NE(std::string(r.message).find("is not a regular file (a FIFO)"), std::string::npos)
      << r.message;
  EXPECT_LT(r.seconds, 1.0);
  // A directory named as the model is refused the same way.
  Result<ir::Graph> d = onnx_import_file(dir.path(), opts_n());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file (a directory)"), std::string::npos)
      << d.status().message();
}

// 2,000 initializers of 8 MiB, all naming the same region of one 8 MiB file: materialised, they
// would be 16 GB. As the same type and shape they are one constant, read once; as another shape
// each is a copy, and the default budget (the file's 8 MiB) stops the first copy.
TEST(OnnxImportHardening, ManyTensorsNamingOneRegionShareItOrHitTheBudget) {
  TempDir dir;
  constexpr uint64_t kRegion = 8 * kMiB;
  sparse_file(dir.path() / "shared.bin", kRegion);
  const ModelBuilder same = shared_region_model("S", 2000, kRegion);
  const ChildReport shared =
      run_in_child([&] { return import(same, opts_n(), dir.path()).status(); });
  print("2000 tensors on one 8 MiB region, one shape", shared);
  EXPECT_EQ(shared.code, 0) << shared.message;
  EXPECT_LT(shared.rss_growth_kib, 64 * 1024);
  EXPECT_LT(shared.seconds, 1.0);
  Result<ir::Graph> g = import(shared_region_model("S", 5, kRegion), opts_n(), dir.path());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(constants_of_size(*g, kRegion), 1) << "five names, one constant";

  const ModelBuilder reshaped = shared_region_model("R", 2000, kRegion, /*reshaped=*/true);
  const ChildReport r =
      run_in_child([&] { return import(reshaped, opts_n(), dir.path()).status(); });
  print("2000 tensors on one 8 MiB region, two shapes", r);
  EXPECT_EQ(r.code, static_cast<int>(StatusCode::kResourceExhausted)) << r.message;
  const std::string msg = r.message;
  EXPECT_NE(msg.find("tensor 'R1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("over its budget of 8388608 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("same region as tensor 'R0'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_external_bytes"), std::string::npos) << msg;
  EXPECT_LT(r.rss_growth_kib, 64 * 1024);
  EXPECT_LT(r.seconds, 1.0);

  // The budget can be raised: the region as two shapes then imports, as two copies.
  const ModelBuilder two = shared_region_model("T", 2, kRegion, /*reshaped=*/true);
  ImportOptions o = opts_n();
  expect_error(import(two, o, dir.path()), StatusCode::kResourceExhausted, {"tensor 'T1'"});
  o.max_external_bytes = 2 * kRegion;
  const ChildReport ok = run_in_child([&] { return import(two, o, dir.path()).status(); });
  print("the region as 2 shapes, budget 16 MiB", ok);
  EXPECT_EQ(ok.code, 0) << ok.message;
  EXPECT_LT(ok.rss_growth_kib, 64 * 1024);
}

// An initializer that is a graph output keeps its own value (and so its name), also when it
// names the same region as another: a second copy, which the budget counts.
TEST(OnnxImportHardening, SharedRegionOutputKeepsItsName) {
  TempDir dir;
  constexpr uint64_t kRegion = 64;
  write_file(dir.path() / "shared.bin", std::string(kRegion, '\1'));
  ModelBuilder b = shared_region_model("S", 2, kRegion);
  auto* out = b.g->add_output();
  out->set_name("S1");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  expect_error(import(b, opts_n(), dir.path()), StatusCode::kResourceExhausted, {"tensor 'S1'"});
  ImportOptions o = opts_n();
  o.max_external_bytes = 2 * kRegion;
  Result<ir::Graph> g = import(b, o, dir.path());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(constants_of_size(*g, kRegion), 2);
  ASSERT_FALSE(g->outputs.empty());
  EXPECT_EQ(g->values[g->outputs.back()].name, "S1");
}

// A ConstantOfShape whose `value` attribute is 256 MiB of external data: refused from its shape,
// before the file is opened (the sparse file would cost 256 MiB once read).
TEST(OnnxImportHardening, OversizedTensorAttributeIsRefusedUnread) {
  TempDir dir;
  constexpr uint64_t kBig = 256 * kMiB;
  sparse_file(dir.path() / "big.bin", kBig);
  ModelBuilder b = tiny();
  auto* shape = b.g->add_initializer();
  shape->set_name("shp");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(1);
  shape->add_int64_data(4);
  auto* n = b.node("ConstantOfShape", {"shp"}, {"c"}, "cos");
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(static_cast<int64_t>(kBig / 4));
  set_external(a->mutable_t(), "big.bin", 0, kBig);
  const ChildReport r = run_in_child([&] { return import(b, opts_n(), dir.path()).status(); });
  print("256 MiB external tensor attribute", r);
  EXPECT_EQ(r.code, static_cast<int>(StatusCode::kUnimplemented)) << r.message;
  const std::string msg = r.message;
  EXPECT_NE(msg.find("tensor attribute 'cos.value' holds 268435456 bytes"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("at most 1048576"), std::string::npos) << msg;
  EXPECT_LT(r.rss_growth_kib, 64 * 1024);
  EXPECT_LT(r.seconds, 1.0);
  // Not even opened: the same attribute naming a FIFO gives the same error at once.
  ASSERT_EQ(::mkfifo((dir.path() / "big.fifo").c_str(), 0600), 0);
  a->mutable_t()->mutable_external_data(0)->set_value("big.fifo");
  const ChildReport f = run_in_child([&] { return import(b, opts_n(), dir.path()).status(); });
  EXPECT_EQ(f.code, static_cast<int>(StatusCode::kUnimplemented)) << f.message;
  EXPECT_NE(std::string(f.message).find("its data was not read"), std::string::npos) << f.message;
}

// The harness itself: memory allocated, touched and freed inside the child shows in its peak.
TEST(OnnxImportHardening, ChildMeasuresPeakMemory) {
  const ChildReport r = run_in_child([] {
    std::vector<uint8_t> v(100 * kMiB, 1);
    const volatile uint8_t* p = v.data();  // the allocation cannot be optimised away
    const bool touched = p[50 * kMiB] == 1;
    return touched ? Status::ok_status() : internal_error("not touched");
  });
  print("harness check: 100 MiB allocated and freed", r);
  EXPECT_EQ(r.code, 0) << r.message;
  EXPECT_GE(r.rss_growth_kib, 90 * 1024);
}

// Escapes through a symlink in the middle of the path and through '..', with the open beneath
// the model folder (openat2 RESOLVE_BENEATH where the kernel has it).
TEST(OnnxImportHardening, EscapesThroughTheMiddleOfThePathAreRefused) {
  TempDir dir;
  const fs::path model_dir = dir.path() / "model";
  fs::create_directories(model_dir / "sub");
  std::vector<float> w(12, 0.5f);
  const std::string blob(reinterpret_cast<const char*>(w.data()), 48);
  write_file(dir.path() / "outside.bin", blob);
  write_file(model_dir / "sub" / "w.bin", blob);
  fs::create_directory_symlink(dir.path(), model_dir / "sub" / "up");
  expect_error(import(external_w("sub/up/outside.bin"), opts_n(), model_dir),
               StatusCode::kInvalidArgument, {"tensor 'W'", "outside the model folder"});
  expect_error(import(external_w("sub/../../outside.bin"), opts_n(), model_dir),
               StatusCode::kInvalidArgument, {"tensor 'W'", "'..'"});
  // A symlinked directory that stays inside is followed.
  fs::create_directory_symlink("sub", model_dir / "alias");
  Result<ir::Graph> g = import(external_w("alias/w.bin"), opts_n(), model_dir);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
}

}  // namespace
}  // namespace kiln::compiler
