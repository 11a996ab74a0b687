// tools/npy_io: .npy round trips in every dtype, the format versions, bad files (each a clear
// error naming the file, never an allocation sized by the header), .npz archives (stored and
// deflated members, damaged ones) and safe output file names; then files written by NumPy
// itself read here, and files written here loaded by NumPy (skipped without python3 + numpy).
// cli_test.sh also feeds NumPy's files to `kiln run`.
#include "tools/npy_io.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "tests/support/temp_dir.h"
#include "tools/tensor_io.h"

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
  // Format 2.0 declares a 4-byte header length: 64 MB of header is refused, not read.
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + std::string("\x00\x00\x00\x04", 4) +
                   std::string(100, ' ');
  EXPECT_NE(parse_error(v2).find("is too long"), std::string::npos);
  std::string v2_short = v2;
  v2_short[11] = 0;
  v2_short[10] = 1;  // 65536 bytes declared, 100 present
  EXPECT_NE(parse_error(v2_short).find("runs past the end of the file (truncated)"),
            std::string::npos);
}

// A raw deflate stream (ZIP method 8) of `data`.
std::string deflated(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Member {
  std::string name, data;
  uint16_t method = 0;  // 0 stored, 8 deflated (compressed here); others: `data` as is
  int64_t usize = -1;   // the unpacked size the directory declares; -1: the real one
  size_t cut = 0;       // bytes dropped from the end of the packed data
};

// A ZIP of .npy members, laid out as np.savez / np.savez_compressed write small archives.
std::string zip_of(const std::vector<Member>& members) {
  auto u16 = [](uint32_t v) {
    return std::string{static_cast<char>(v), static_cast<char>(v >> 8)};
  };
  auto u32 = [&](uint32_t v) { return u16(v & 0xffff) + u16(v >> 16); };
  std::string zip, central;
  for (const Member& m : members) {
    const auto offset = static_cast<uint32_t>(zip.size());
    std::string packed = m.method == 8 ? deflated(m.data) : m.data;
    packed.resize(packed.size() - m.cut);
    const auto csize = static_cast<uint32_t>(packed.size());
    const auto usize = static_cast<uint32_t>(m.usize >= 0 ? m.usize : m.data.size());
    const auto crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), static_cast<uInt>(m.data.size())));
    const auto name_len = static_cast<uint32_t>(m.name.size());
    zip += "PK\x03\x04" + u16(20) + u16(0) + u16(m.method) + u32(0) + u32(crc) + u32(csize) +
           u32(usize) + u16(name_len) + u16(0) + m.name + packed;
    central += "PK\x01\x02" + u16(20) + u16(20) + u16(0) + u16(m.method) + u32(0) + u32(crc) +
               u32(csize) + u32(usize) + u16(name_len) + u16(0) + u16(0) + u16(0) + u16(0) +
               u32(0) + u32(offset) + m.name;
  }
  const auto cd = static_cast<uint32_t>(zip.size());
  zip += central;
  zip += "PK\x05\x06" + u16(0) + u16(0) + u16(static_cast<uint32_t>(members.size())) +
         u16(static_cast<uint32_t>(members.size())) + u32(static_cast<uint32_t>(central.size())) +
         u32(cd) + u16(0);
  return zip;
}

// npz_read of `bytes` written to DIR/name: the error message ("" if it read).
std::string npz_error(const testing::TempDir& dir, const std::string& name,
                      const std::string& bytes) {
  {
    std::ofstream f(dir.path() / name, std::ios::binary);
    f << bytes;
  }
  auto r = npz_read(dir.path() / name);
  return r.ok() ? "" : r.status().message();
}

TEST(NpyIo, NpzMembersByName) {
  testing::TempDir dir;
  const Tensor a = sample(DType::kI64, {2, 5}), b = sample(DType::kF32, {3});
  {
    std::ofstream f(dir.path() / "set.npz", std::ios::binary);
    f << zip_of({{"input_ids.npy", npy_of(a)}, {"x.npy", npy_of(b)}});
  }
  auto all = npz_read(dir.path() / "set.npz");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "input_ids");
  EXPECT_EQ((*all)[0].data, a.data);
  EXPECT_EQ((*all)[1].name, "x");
  EXPECT_EQ((*all)[1].shape, b.shape);
  EXPECT_FALSE(npz_read(dir.path() / "missing.npz").ok());
}

TEST(NpyIo, NpzDeflatedMembers) {
  testing::TempDir dir;
  const Tensor a = sample(DType::kF16, {4, 8}), b = sample(DType::kBool, {7});
  {
    std::ofstream f(dir.path() / "c.npz", std::ios::binary);
    f << zip_of({{"a.npy", npy_of(a), 8}, {"b.npy", npy_of(b), 0}});
  }
  auto all = npz_read(dir.path() / "c.npz");
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "a");
  EXPECT_EQ((*all)[0].data, a.data);
  EXPECT_EQ((*all)[1].data, b.data);
}

TEST(NpyIo, DamagedNpzAreClearErrors) {
  testing::TempDir dir;
  const std::string x = npy_of(sample(DType::kF32, {16}));
  auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  has(npz_error(dir, "junk.npz", "not a zip at all, but long enough to have an end record"),
      "junk.npz: not an .npz (ZIP) archive");
  has(npz_error(dir, "bz.npz", zip_of({{"x.npy", x, 12}})),
      "bz.npz member 'x.npy': ZIP compression method 12 is not supported");
  // A deflate stream cut short, or garbled.
  has(npz_error(dir, "cut.npz", zip_of({{"x.npy", x, 8, -1, 4}})),
      "member 'x.npy': the deflate stream is truncated");
  const size_t stream = 30 + 5;  // the first local header and its name
  std::string garbled = zip_of({{"x.npy", x, 8}});
  for (size_t i = stream; i < stream + 8; ++i) garbled[i] = static_cast<char>(0xff);
  has(npz_error(dir, "garbled.npz", garbled), "member 'x.npy': bad deflate stream");
  // The directory claims more (or fewer) unpacked bytes than the stream holds: refused without
  // allocating what it claims.
  has(npz_error(dir, "big.npz", zip_of({{"x.npy", x, 8, 0xFFFFFFF0}})),
      "inflates to " + std::to_string(x.size()) +
          " bytes, its directory entry declares 4294967280");
  has(npz_error(dir, "small.npz", zip_of({{"x.npy", x, 8, 10}})),
      "inflates to more than the 10 bytes");
  has(npz_error(dir, "stored.npz", zip_of({{"x.npy", x, 0, 10}})),
      "stored member of " + std::to_string(x.size()) + " bytes declares 10 unpacked");
  // A flipped data byte: the CRC-32 catches it.
  std::string flipped = zip_of({{"x.npy", x}});
  flipped[30 + 5 + x.size() - 1] ^= 1;
  has(npz_error(dir, "crc.npz", flipped), "member 'x.npy': CRC-32");
  // Offsets past the end of the file (a truncated archive keeps its end record here).
  std::string far = zip_of({{"x.npy", x}});
  const size_t cd = far.size() - 22 - (46 + 5);
  far[cd + 42 + 3] = 0x7f;  // the member's local header offset, now ~2 GB
  has(npz_error(dir, "far.npz", far), "member 'x.npy': local header is damaged");
  std::string cd_far = zip_of({{"x.npy", x}});
  cd_far[cd_far.size() - 22 + 16 + 3] = 0x7f;  // the central directory's offset
  has(npz_error(dir, "cdfar.npz", cd_far), "central directory entry 0 is damaged");
  has(npz_error(dir, "empty.npz", zip_of({})), "the archive holds no array");
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

// NumPy itself, both ways: arrays 0, 1, ..., 6, 0, 1, ... (bools 0, 1, 0, ...) of shape (2, 3, 4)
// in every dtype and format version, archives from np.savez and np.savez_compressed, and the
// files npy_write writes loaded back by np.load.
constexpr const char* kNumpyScript = R"(
import sys, numpy as np
d = sys.argv[2]
types = ['<f4', '<f2', '<f8', '<i8', '<i4', '|i1', '|u1', '|b1']
def want(t):
    return ((np.arange(24) % (2 if t == '|b1' else 7)).astype(t)).reshape(2, 3, 4)
if sys.argv[1] == 'write':
    for i, t in enumerate(types):
        for v in [(1, 0), (2, 0), (3, 0)]:
            with open(f'{d}/np_{i}_v{v[0]}.npy', 'wb') as f:
                np.lib.format.write_array(f, want(t), version=v)
    np.save(f'{d}/np_scalar.npy', np.float32(2.5))
    np.save(f'{d}/np_fortran.npy', np.asfortranarray(want('<f4')))
    np.save(f'{d}/np_big_endian.npy', want('>f4'))
    kw = {'input_ids': want('<i8'), 'attention_mask': want('|b1'), 'x/y:0': want('<f2')}
    np.savez(f'{d}/np_set.npz', **kw)
    np.savez_compressed(f'{d}/np_compressed.npz', **kw)
else:
    for i, t in enumerate(types):
        a = np.load(f'{d}/kiln_{i}.npy')
        assert a.dtype == np.dtype(t) and a.shape == (2, 3, 4) and (a == want(t)).all(), (t, a)
    b = np.load(f'{d}/kiln_bf16.npy')
    assert b.dtype == np.float32 and b.tolist() == [1.0, -2.0], b
    print('numpy read kiln files')
)";

std::vector<double> counting(size_t n, int mod) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i % mod);
  return v;
}

TEST(NpyIo, NumpyFilesBothWays) {
  if (std::system("python3 -c 'import numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with numpy is not installed";
  testing::TempDir dir;
  const std::string d = dir.path().string();
  {
    std::ofstream f(dir.path() / "np.py");
    f << kNumpyScript;
  }
  ASSERT_EQ(std::system(("python3 '" + d + "/np.py' write '" + d + "'").c_str()), 0);
  const DType types[] = {DType::kF32, DType::kF16, DType::kF64, DType::kI64,
                         DType::kI32, DType::kI8,  DType::kU8,  DType::kBool};
  for (size_t i = 0; i < std::size(types); ++i) {
    const std::vector<double> want = counting(24, types[i] == DType::kBool ? 2 : 7);
    for (int v = 1; v <= 3; ++v) {
      const std::string file = fmt::format("np_{}_v{}.npy", i, v);
      auto t = npy_read(dir.path() / file, "t");
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      EXPECT_EQ(t->dtype, types[i]) << file;
      EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3, 4})) << file;
      EXPECT_EQ(tensor_to_ref(*t).data, want) << file;
      // ... and back to NumPy, from kiln's writer.
      if (v == 1) {
        ASSERT_TRUE(npy_write(dir.path() / fmt::format("kiln_{}.npy", i), *t).ok());
      }
    }
  }
  auto scalar = npy_read(dir.path() / "np_scalar.npy", "s");
  ASSERT_TRUE(scalar.ok()) << scalar.status().to_string();
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->as<float>()[0], 2.5f);
  auto fortran = npy_read(dir.path() / "np_fortran.npy", "f");
  ASSERT_FALSE(fortran.ok());
  EXPECT_NE(fortran.status().message().find("np_fortran.npy: Fortran-order"), std::string::npos);
  auto big = npy_read(dir.path() / "np_big_endian.npy", "b");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("dtype '>f4' is not supported"), std::string::npos);
  for (const char* archive : {"np_set.npz", "np_compressed.npz"}) {
    auto all = npz_read(dir.path() / archive);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    ASSERT_EQ(all->size(), 3u) << archive;
    EXPECT_EQ((*all)[0].name, "input_ids");
    EXPECT_EQ((*all)[0].dtype, DType::kI64);
    EXPECT_EQ((*all)[1].name, "attention_mask");
    EXPECT_EQ((*all)[1].dtype, DType::kBool);
    EXPECT_EQ(tensor_to_ref((*all)[1]).data, counting(24, 2));
    EXPECT_EQ((*all)[2].name, "x/y:0");
    EXPECT_EQ(tensor_to_ref((*all)[2]).data, counting(24, 7));
    EXPECT_EQ(tensor_file_name((*all)[2].name), "x_y_0");
  }
  Tensor bf16 = Tensor::zeros("b", DType::kBF16, {2});
  const uint16_t one = 0x3f80, minus_two = 0xc000;
  std::memcpy(bf16.data.data(), &one, 2);
  std::memcpy(bf16.data.data() + 2, &minus_two, 2);
  ASSERT_TRUE(npy_write(dir.path() / "kiln_bf16.npy", bf16).ok());
  EXPECT_EQ(std::system(("python3 '" + d + "/np.py' check '" + d + "'").c_str()), 0);
}

}  // namespace
}  // namespace kiln::tools
