#include "cache/manifest_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "cache/file_hash.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

using testing::TempDir;
using testing::write_bytes;

schema::Manifest sample_manifest() {
  schema::Manifest m;
  m.set_format_version(kFormatVersion);
  m.set_key("0123456789abcdef0123456789abcdef");
  m.set_model_name("tiny-mlp");
  m.mutable_factors()->set_compiler_version("0.1.0");
  m.mutable_factors()->add_targets("sm_90");
  m.mutable_config()->set_max_size(64);
  m.mutable_config()->set_precision("fp16");
  auto* f = m.add_files();
  f->set_path("weights.bin");
  f->set_size(4096);
  f->set_xxh3(0x1234);
  f->set_role(schema::FILE_ROLE_WEIGHTS);
  m.set_weights_file("weights.bin");
  m.set_weights_bytes(4096);
  m.set_arena_bytes(1 << 20);
  for (int i = 0; i < 4; ++i) {
    auto* b = m.add_buffers();
    b->set_name("buf" + std::to_string(i));
    b->set_location(schema::Buffer::LOCATION_ARENA);
    b->set_offset(256 * i);
    b->set_dtype(schema::DTYPE_F16);
    b->add_dims()->set_coef(1);
  }
  return m;
}

// Rewrites the header fields of an encoded manifest.
void put_u32(std::string& s, std::size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& s, std::size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
// A header (version kFormatVersion, correct length and checksum) in front of `payload`.
std::string with_header(const std::string& payload) {
  std::string s = "KILNMAN1" + std::string(16, '\0') + payload;
  put_u32(s, 8, kFormatVersion);
  put_u32(s, 12, static_cast<uint32_t>(payload.size()));
  put_u64(s, 16, hash64(payload.data(), payload.size()));
  return s;
}

bool contains(const Status& s, const std::string& needle) {
  return s.message().find(needle) != std::string::npos;
}

TEST(ManifestIo, RoundTrip) {
  const schema::Manifest m = sample_manifest();
  const std::string bytes = manifest_encode(m);
  ASSERT_GT(bytes.size(), kManifestHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), "KILNMAN1");
  Result<schema::Manifest> back = manifest_decode(bytes, "manifest.kiln");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->SerializeAsString(), m.SerializeAsString());
  EXPECT_EQ(back->weights_file(), "weights.bin");
  EXPECT_EQ(back->buffers_size(), 4);
}

TEST(ManifestIo, HeaderIsLittleEndian) {
  const std::string bytes = manifest_encode(sample_manifest());
  const std::string payload = bytes.substr(kManifestHeaderBytes);
  std::string expect = with_header(payload);
  EXPECT_EQ(bytes, expect);
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), kFormatVersion);
  EXPECT_EQ(bytes[9], 0);
}

TEST(ManifestIo, TruncatedAtEveryOffsetIsAnError) {
  const std::string bytes = manifest_encode(sample_manifest());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    Result<schema::Manifest> r = manifest_decode(std::string_view(bytes).substr(0, n), "m.kiln");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes decoded";
    EXPECT_TRUE(contains(r.status(), "m.kiln")) << r.status().message();
  }
}

TEST(ManifestIo, EmptyAndShortFilesHaveDistinctMessages) {
  Result<schema::Manifest> empty = manifest_decode("", "m.kiln");
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(contains(empty.status(), "empty")) << empty.status().message();
  Result<schema::Manifest> shortf = manifest_decode("KILNMAN1\x01", "m.kiln");
  ASSERT_FALSE(shortf.ok());
  EXPECT_TRUE(contains(shortf.status(), "9 bytes")) << shortf.status().message();
  EXPECT_EQ(shortf.status().code(), StatusCode::kDataLoss);
}

TEST(ManifestIo, EveryHeaderBitFlipIsAnError) {
  const std::string bytes = manifest_encode(sample_manifest());
  for (std::size_t bit = 0; bit < kManifestHeaderBytes * 8; ++bit) {
    std::string b = bytes;
    b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(manifest_decode(b, "m.kiln").ok()) << "header bit " << bit;
  }
}

TEST(ManifestIo, PayloadBitFlipsAreErrors) {
  const std::string bytes = manifest_encode(sample_manifest());
  const std::size_t payload_bits = (bytes.size() - kManifestHeaderBytes) * 8;
  for (std::size_t bit = 0; bit < payload_bits; bit += 3) {  // a third of all payload bits
    std::string b = bytes;
    const std::size_t byte = kManifestHeaderBytes + bit / 8;
    b[byte] = static_cast<char>(b[byte] ^ (1 << (bit % 8)));
    Result<schema::Manifest> r = manifest_decode(b, "m.kiln");
    ASSERT_FALSE(r.ok()) << "payload bit " << bit;
    EXPECT_TRUE(contains(r.status(), "checksum")) << r.status().message();
  }
}

TEST(ManifestIo, BadMagic) {
  std::string b = manifest_encode(sample_manifest());
  b[7] = '2';
  Result<schema::Manifest> r = manifest_decode(b, "m.kiln");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status(), "m.kiln: bad magic \"KILNMAN2\", expected \"KILNMAN1\""))
      << r.status().message();
}

TEST(ManifestIo, NewerAndOlderVersionsAreDistinct) {
  std::string b = manifest_encode(sample_manifest());
  put_u32(b, 8, kFormatVersion + 1);
  Result<schema::Manifest> newer = manifest_decode(b, "m.kiln");
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  const std::string reads = "this runtime reads format " + std::to_string(kFormatVersion);
  EXPECT_TRUE(contains(newer.status(), "written by a newer kiln (format " +
                                           std::to_string(kFormatVersion + 1) + "), " + reads))
      << newer.status().message();

  put_u32(b, 8, kFormatVersion - 1);
  Result<schema::Manifest> older = manifest_decode(b, "m.kiln");
  ASSERT_FALSE(older.ok());
  EXPECT_EQ(older.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(older.status(), "written by an older kiln (format " +
                                           std::to_string(kFormatVersion - 1) + "), " + reads))
      << older.status().message();
}

TEST(ManifestIo, LengthMismatch) {
  const std::string bytes = manifest_encode(sample_manifest());
  Result<schema::Manifest> trailing = manifest_decode(bytes + "xy", "m.kiln");
  ASSERT_FALSE(trailing.ok());
  EXPECT_TRUE(contains(trailing.status(), "2 trailing bytes")) << trailing.status().message();

  Result<schema::Manifest> trunc = manifest_decode(bytes.substr(0, bytes.size() - 1), "m.kiln");
  ASSERT_FALSE(trunc.ok());
  EXPECT_TRUE(contains(trunc.status(), "truncated")) << trunc.status().message();
}

TEST(ManifestIo, ChecksumMismatchQuotesBothValues) {
  std::string b = manifest_encode(sample_manifest());
  put_u64(b, 16, 0xabcdef);
  Result<schema::Manifest> r = manifest_decode(b, "m.kiln");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(r.status(), "does not match header 0x0000000000abcdef"))
      << r.status().message();
}

TEST(ManifestIo, ProtobufParseFailure) {
  // A field tag with wire type 7 does not exist: never a valid message.
  Result<schema::Manifest> r = manifest_decode(with_header("\x0f\x01\x02"), "m.kiln");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status(), "not a valid kiln.schema.Manifest")) << r.status().message();
}

TEST(ManifestIo, FormatVersionFieldMustMatchHeader) {
  schema::Manifest m = sample_manifest();
  m.set_format_version(7);
  Result<schema::Manifest> r = manifest_decode(manifest_encode(m), "m.kiln");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status(), "format_version is 7")) << r.status().message();
  m.clear_format_version();
  EXPECT_FALSE(manifest_decode(manifest_encode(m), "m.kiln").ok());
}

TEST(ManifestIo, ReadFile) {
  TempDir tmp;
  const auto p = tmp.path() / "manifest.kiln";
  write_bytes(p, manifest_encode(sample_manifest()));
  Result<schema::Manifest> r = manifest_read(p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model_name(), "tiny-mlp");
}

TEST(ManifestIo, ReadErrorsNameThePath) {
  TempDir tmp;
  const auto missing = tmp.path() / "manifest.kiln";
  Result<schema::Manifest> r = manifest_read(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(r.status(), missing.string())) << r.status().message();

  Result<schema::Manifest> dir = manifest_read(tmp.path());
  ASSERT_FALSE(dir.ok());
  EXPECT_TRUE(contains(dir.status(), tmp.path().string())) << dir.status().message();

  write_bytes(missing, "garbage");
  Result<schema::Manifest> bad = manifest_read(missing);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status(), missing.string())) << bad.status().message();
}

TEST(ManifestIo, RefusesHugeFiles) {
  TempDir tmp;
  const auto p = tmp.path() / "manifest.kiln";
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, (off_t{256} << 20) + 1), 0);  // sparse: costs no disk
  ::close(fd);
  Result<schema::Manifest> r = manifest_read(p);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status(), "256 MiB")) << r.status().message();
  EXPECT_TRUE(contains(r.status(), p.string())) << r.status().message();
}

TEST(ManifestIo, EncodingIsDeterministicForMapFields) {
  // Same contents, map entries inserted in opposite orders: the bytes must not differ.
  schema::Manifest a;
  schema::Manifest b;
  for (uint32_t i = 0; i < 64; ++i) {
    (*a.add_pieces()->add_steps()->mutable_kernel()->mutable_specialised())[i] = i;
    (*a.mutable_config()->mutable_dims())["d" + std::to_string(i)] = i;
  }
  for (uint32_t i = 0; i < 64; ++i) b.add_pieces()->add_steps()->mutable_kernel();
  for (uint32_t i = 64; i-- > 0;) {
    (*b.mutable_pieces(static_cast<int>(i))
          ->mutable_steps(0)
          ->mutable_kernel()
          ->mutable_specialised())[i] = i;
    (*b.mutable_config()->mutable_dims())["d" + std::to_string(i)] = i;
  }
  EXPECT_EQ(manifest_encode(a), manifest_encode(b));
  // One piece with a 64-entry map, filled forwards and backwards.
  schema::Manifest c;
  schema::Manifest d;
  auto* mc = c.add_pieces()->add_steps()->mutable_kernel()->mutable_specialised();
  auto* md = d.add_pieces()->add_steps()->mutable_kernel()->mutable_specialised();
  for (uint32_t i = 0; i < 64; ++i) (*mc)[i * 7919] = i;
  for (uint32_t i = 64; i-- > 0;) (*md)[i * 7919] = i;
  EXPECT_EQ(manifest_encode(c), manifest_encode(d));
  c.set_format_version(kFormatVersion);
  Result<schema::Manifest> back = manifest_decode(manifest_encode(c), "c");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->pieces(0).steps(0).kernel().specialised().size(), 64u);
}

}  // namespace
}  // namespace kiln::cache
