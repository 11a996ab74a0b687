// tools/npy_io: .npy round trips in every dtype, the format versions, bad files (each a clear
// error naming the file, never an allocation sized by the header), stored .npz archives and
// safe output file names. cli_test.sh also reads files written by NumPy itself.
#include "tools/npy_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace kiln::tools {
namespace {

Tensor sample(DType dtype, std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros("x", dtype, std::move(shape));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(i * 7 + 1);
  if (dtype == DType::kBool)
    for (auto& b : t.data) b &= 1;
  return t;
}

std::string npy_of(const Tensor& t) {
  auto bytes = npy_encode(t);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return bytes.ok() ? *bytes : "";
}

std::string parse_error(const std::string& bytes) {
  auto t = npy_parse(bytes, "x", "f.npy");
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.status().message();
}

TEST(NpyIo, RoundTripsEveryDtypeAndRank) {
  for (DType d : {DType::kF32, DType::kF16, DType::kF64, DType::kI64, DType::kI32, DType::kI8,
                  DType::kU8, DType::kBool})
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{}, {5}, {2, 3}, {2, 0, 4}, {1, 2, 3, 4}}) {
      const Tensor t = sample(d, shape);
      const std::string bytes = npy_of(t);
      ASSERT_EQ((bytes.size() - t.data.size()) % 64, 0u) << "the header pads to 64 bytes";
      auto back = npy_parse(bytes, "x", "t.npy");
      ASSERT_TRUE(back.ok()) << back.status().to_string();
      EXPECT_EQ(back->dtype, d);
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->data, t.data);
    }
}

TEST(NpyIo, Bf16IsWrittenAsFloat32) {
  Tensor t = Tensor::zeros("x", DType::kBF16, {2});
  const uint16_t one = 0x3f80, minus_two = 0xc000;  // 1.0, -2.0
  std::memcpy(t.data.data(), &one, 2);
  std::memcpy(t.data.data() + 2, &minus_two, 2);
  auto back = npy_parse(npy_of(t), "x", "t.npy");
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->dtype, DType::kF32);
  EXPECT_EQ(back->as<float>()[0], 1.0f);
  EXPECT_EQ(back->as<float>()[1], -2.0f);
}

TEST(NpyIo, ReadsFormatVersions2And3) {
  std::string v1 = npy_of(sample(DType::kF32, {3}));
  const uint16_t header_len = static_cast<uint8_t>(v1[8]) | static_cast<uint8_t>(v1[9]) << 8;
  for (char major : {'\x02', '\x03'}) {
    std::string v = v1.substr(0, 6) + major + '\0';
    v +=
        std::string{static_cast<char>(header_len & 0xff), static_cast<char>(header_len >> 8), 0, 0};
    v += v1.substr(10);
    auto t = npy_parse(v, "x", "t.npy");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->shape, std::vector<int64_t>{3});
  }
}

TEST(NpyIo, BadFilesAreClearErrors) {
  const std::string good = npy_of(sample(DType::kF32, {2, 3}));
  EXPECT_NE(parse_error("").find("f.npy: not a .npy file"), std::string::npos);
  EXPECT_NE(parse_error("PK\x03\x04 not numpy").find("magic"), std::string::npos);
  EXPECT_NE(parse_error(good.substr(0, 30)).find("truncated"), std::string::npos);
  EXPECT_NE(parse_error(good.substr(0, good.size() - 4)).find("20 data bytes"), std::string::npos);
  std::string v9 = good;
  v9[6] = 9;
  EXPECT_NE(parse_error(v9).find("format 9"), std::string::npos);
  auto with_header = [&](const std::string& dict) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64) h += ' ';
    h += '\n';
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h +
           std::string(24, '\0');
  };
  EXPECT_NE(parse_error(with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }"))
                .find("dtype '>f4' is not supported"),
            std::string::npos);
  EXPECT_NE(parse_error(with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }"))
                .find("not supported"),
            std::string::npos);
  EXPECT_NE(parse_error(with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"))
                .find("Fortran-order"),
            std::string::npos);
  // A huge declared shape with 24 bytes of data: refused before any allocation.
  EXPECT_NE(
      parse_error(
          with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }"))
          .find("24 data bytes, its shape (100000, 100000) of f32 needs 40000000000"),
      std::string::npos);
  EXPECT_NE(
      parse_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, "
                              "100000000000), }"))
          .find("overflows"),
      std::string::npos);
  EXPECT_NE(parse_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                    "(9999999999999999999999, 1), }"))
                .find("overflows"),
            std::string::npos);
  EXPECT_NE(parse_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': 6, }"))
                .find("not a tuple"),
            std::string::npos);
}

// A stored ZIP of .npy members, laid out as np.savez writes small archives.
std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& members,
                       uint16_t method = 0) {
  auto u16 = [](uint32_t v) {
    return std::string{static_cast<char>(v), static_cast<char>(v >> 8)};
  };
  auto u32 = [&](uint32_t v) { return u16(v & 0xffff) + u16(v >> 16); };
  std::string zip, central;
  for (const auto& [name, data] : members) {
    const auto offset = static_cast<uint32_t>(zip.size());
    const auto size = static_cast<uint32_t>(data.size());
    zip += "PK\x03\x04" + u16(20) + u16(0) + u16(method) + u32(0) + u32(0) + u32(size) + u32(size) +
           u16(static_cast<uint32_t>(name.size())) + u16(0) + name + data;
    central += "PK\x01\x02" + u16(20) + u16(20) + u16(0) + u16(method) + u32(0) + u32(0) +
               u32(size) + u32(size) + u16(static_cast<uint32_t>(name.size())) + u16(0) + u16(0) +
               u16(0) + u16(0) + u32(0) + u32(offset) + name;
  }
  const auto cd = static_cast<uint32_t>(zip.size());
  zip += central;
  zip += "PK\x05\x06" + u16(0) + u16(0) + u16(static_cast<uint32_t>(members.size())) +
         u16(static_cast<uint32_t>(members.size())) + u32(static_cast<uint32_t>(central.size())) +
         u32(cd) + u16(0);
  return zip;
}

TEST(NpyIo, NpzMembersByName) {
  testing::TempDir dir;
  const Tensor a = sample(DType::kI64, {2, 5}), b = sample(DType::kF32, {3});
  {
    std::ofstream f(dir.path() / "set.npz", std::ios::binary);
    f << stored_zip({{"input_ids.npy", npy_of(a)}, {"x.npy", npy_of(b)}});
  }
  auto all = npz_read(dir.path() / "set.npz");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "input_ids");
  EXPECT_EQ((*all)[0].data, a.data);
  EXPECT_EQ((*all)[1].name, "x");
  EXPECT_EQ((*all)[1].shape, b.shape);
  {
    std::ofstream f(dir.path() / "deflated.npz", std::ios::binary);
    f << stored_zip({{"x.npy", npy_of(b)}}, 8);
  }
  auto deflated = npz_read(dir.path() / "deflated.npz");
  ASSERT_FALSE(deflated.ok());
  EXPECT_NE(deflated.status().message().find("member 'x.npy': compressed"), std::string::npos);
  EXPECT_NE(deflated.status().message().find("np.savez"), std::string::npos);
  {
    std::ofstream f(dir.path() / "junk.npz", std::ios::binary);
    f << "not a zip at all, but long enough to have an end record";
  }
  auto junk = npz_read(dir.path() / "junk.npz");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("not an .npz"), std::string::npos);
  EXPECT_FALSE(npz_read(dir.path() / "missing.npz").ok());
}

TEST(NpyIo, WritesAndReadsFiles) {
  testing::TempDir dir;
  const Tensor t = sample(DType::kF16, {4, 2});
  ASSERT_TRUE(npy_write(dir.path() / "t.npy", t).ok());
  auto back = npy_read(dir.path() / "t.npy", "t");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->name, "t");
  EXPECT_EQ(back->data, t.data);
  EXPECT_FALSE(npy_write(dir.path() / "no/such/dir/t.npy", t).ok());
}

TEST(NpyIo, FileNamesStayInTheFolder) {
  EXPECT_EQ(tensor_file_name("logits"), "logits");
  EXPECT_EQ(tensor_file_name("present.0.key"), "present.0.key");
  EXPECT_EQ(tensor_file_name("a/b:0"), "a_b_0");
  EXPECT_EQ(tensor_file_name("../../etc/passwd"), ".._.._etc_passwd");
  EXPECT_EQ(tensor_file_name(".."), "_..");
  EXPECT_EQ(tensor_file_name(""), "_");
}

}  // namespace
}  // namespace kiln::tools
