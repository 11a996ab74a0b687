// Artifact signatures (cache/artifact_signature) and their key files (cache/signing_key).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cache/artifact_publish.h"
#include "cache/artifact_signature.h"
#include "cache/artifact_verify.h"
#include "cache/file_blocks.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"
#include "cache/signing_key.h"
#include "tests/cache/sample_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using kiln::testing::read_bytes;
using kiln::testing::sample_publish;
using kiln::testing::TempDir;
using kiln::testing::write_bytes;

SigningKey new_key() {
  Result<SigningKey> k = signing_key_generate();
  EXPECT_TRUE(k.ok()) << k.status().to_string();
  return k.ok() ? *k : SigningKey{};
}

class ArtifactSignTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<fs::path> dir = sample_publish(tmp_.path(), "k", "a", nullptr, &key_);
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    dir_ = *dir;
    Result<schema::Manifest> m = artifact_verify(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    manifest_ = *m;
  }

  // The check as a loader runs it: the manifest read again, then the signature.
  Status check(const std::vector<PublicKey>& trusted) {
    Result<schema::Manifest> m = manifest_read(dir_ / kManifestFileName);
    if (!m.ok()) return m.status();
    return artifact_signature_check(dir_, *m, trusted).status();
  }
  Status check() { return check({key_.public_key}); }

  static void expect_refused(const Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
    EXPECT_NE(st.message().find("artifact signature check failed"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos)
        << "'" << needle << "' not in: " << st.message();
  }

  TempDir tmp_;
  SigningKey key_ = new_key();
  fs::path dir_;
  schema::Manifest manifest_;
};

TEST_F(ArtifactSignTest, SignedArtifactVerifiesAndNamesItsSigner) {
  ASSERT_TRUE(fs::is_regular_file(dir_ / kSignatureFileName));
  Result<PublicKey> signer =
      artifact_signature_check(dir_, manifest_, std::vector{key_.public_key});
  ASSERT_TRUE(signer.ok()) << signer.status().to_string();
  EXPECT_EQ(*signer, key_.public_key);
  // One of several trusted keys is enough.
  EXPECT_TRUE(check({new_key().public_key, key_.public_key}).ok());
  // The signature file is not a listed file: the manifest and artifact_verify ignore it.
  for (const auto& f : manifest_.files()) EXPECT_NE(f.path(), kSignatureFileName);
  const std::string sig = read_bytes(dir_ / kSignatureFileName);
  ASSERT_GT(sig.size(), kSignatureHeaderBytes);
  EXPECT_EQ(sig.substr(0, 8), "KILNSIG1");
  EXPECT_EQ(sig.substr(16, 32),
            std::string(reinterpret_cast<const char*>(key_.public_key.data()), 32));
  EXPECT_EQ(sig.substr(kSignatureHeaderBytes, kSignatureDomain.size()), kSignatureDomain);
}

TEST_F(ArtifactSignTest, SigningIsDeterministic) {
  Result<std::string> a = artifact_signature_make(dir_, manifest_, key_);
  Result<std::string> b = artifact_signature_make(dir_, manifest_, key_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a, read_bytes(dir_ / kSignatureFileName));
}

TEST_F(ArtifactSignTest, OneFlippedByteInAnyFileIsRefusedNamingTheFile) {
  std::vector<std::string> files = {std::string(kManifestFileName)};
  for (const auto& f : manifest_.files()) files.push_back(f.path());
  ASSERT_EQ(files.size(), 5u);  // manifest, weights, two cubins, a source
  const std::string original_sig = read_bytes(dir_ / kSignatureFileName);
  for (const std::string& rel : files) {
    SCOPED_TRACE(rel);
    const fs::path p = dir_ / rel;
    const std::string original = read_bytes(p);
    std::string flipped = original;
    flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x01);
    write_bytes(p, flipped);
    // Checked against the manifest as it was signed, so a flip inside the manifest's payload
    // (whose own checksum would catch it earlier) still reaches the signature check.
    Status st = artifact_signature_check(dir_, manifest_, std::vector{key_.public_key}).status();
    expect_refused(st, p.string() + ": BLAKE2b-256");
    EXPECT_NE(st.message().find("modified after signing"), std::string::npos) << st.message();
    write_bytes(p, original);
    EXPECT_TRUE(check().ok()) << "restored " << rel;
  }
  EXPECT_EQ(read_bytes(dir_ / kSignatureFileName), original_sig);
}

TEST_F(ArtifactSignTest, ConsistentTamperingPassesIntegrityButNotTheSignature) {
  // An attacker changes the weights and rewrites the manifest's XXH3 values (the whole file's
  // and its blocks') and checksum to match: artifact_verify passes, the signature names the
  // manifest.
  const fs::path w = dir_ / "weights.bin";
  std::string bytes = read_bytes(w);
  bytes[100] = static_cast<char>(bytes[100] ^ 0x80);
  write_bytes(w, bytes);
  schema::Manifest m = manifest_;
  for (auto& f : *m.mutable_files())
    if (f.path() == "weights.bin") {
      f.set_xxh3(hash64(bytes.data(), bytes.size()));
      f.clear_block_xxh3();
      for (uint64_t h : block_hashes(bytes.data(), bytes.size(), f.block_bytes()))
        f.add_block_xxh3(h);
    }
  write_bytes(dir_ / kManifestFileName, manifest_encode(m));
  ASSERT_TRUE(artifact_verify(dir_).ok());
  expect_refused(check(), (dir_ / kManifestFileName).string());
}

TEST_F(ArtifactSignTest, TruncatedOrGrownFileIsRefusedBySize) {
  const fs::path src = dir_ / "sources/module0.cu";
  const std::string original = read_bytes(src);
  write_bytes(src, original + "x");
  Status st = artifact_signature_check(dir_, manifest_, std::vector{key_.public_key}).status();
  expect_refused(st, src.string() + ": " + std::to_string(original.size() + 1) +
                         " bytes, signed as " + std::to_string(original.size()));
}

TEST_F(ArtifactSignTest, FileDroppedFromTheManifestIsRefused) {
  schema::Manifest m = manifest_;
  m.mutable_files()->RemoveLast();  // sources/module0.cu
  ASSERT_EQ(manifest_.files(manifest_.files_size() - 1).path(), "sources/module0.cu");
  expect_refused(artifact_signature_check(dir_, m, std::vector{key_.public_key}).status(),
                 "'sources/module0.cu' was signed but the manifest no longer lists it");
  schema::Manifest added = manifest_;
  added.add_files()->set_path("extra.bin");
  write_bytes(dir_ / "extra.bin", "x");
  expect_refused(artifact_signature_check(dir_, added, std::vector{key_.public_key}).status(),
                 (dir_ / "extra.bin").string() + " is not covered by the signature");
}

TEST_F(ArtifactSignTest, UnsignedArtifactIsRefusedUnderTrust) {
  Result<fs::path> dir = sample_publish(tmp_.path(), "unsigned", "a");
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE(fs::exists(*dir / kSignatureFileName));
  Result<schema::Manifest> m = artifact_verify(*dir);
  ASSERT_TRUE(m.ok());
  expect_refused(artifact_signature_check(*dir, *m, std::vector{key_.public_key}).status(),
                 "the artifact is unsigned");
  // No trusted keys is a caller error, not a pass.
  EXPECT_EQ(artifact_signature_check(*dir, *m, std::vector<PublicKey>{}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ArtifactSignTest, WrongKeyIsRefused) {
  const SigningKey other = new_key();
  expect_refused(check({other.public_key}),
                 "signed by key " + public_key_hex(key_.public_key) + ", which is not trusted");
}

TEST_F(ArtifactSignTest, SignatureFileDamageGivesClearErrors) {
  const fs::path sig_path = dir_ / kSignatureFileName;
  const std::string sig = read_bytes(sig_path);
  struct Case {
    std::string name, bytes, needle;
  };
  std::string bad_magic = sig, bad_version = sig, bad_sig = sig, bad_msg = sig, bad_len = sig;
  bad_magic[0] = 'X';
  bad_version[8] = 2;
  bad_sig[60] = static_cast<char>(bad_sig[60] ^ 1);
  bad_msg[sig.size() - 1] = static_cast<char>(bad_msg[sig.size() - 1] ^ 1);
  bad_len[12] = static_cast<char>(bad_len[12] + 1);
  const std::vector<Case> cases = {
      {"empty", "", "is 0 bytes"},
      {"short", sig.substr(0, 50), "is 50 bytes"},
      {"header only", sig.substr(0, kSignatureHeaderBytes), "declares a"},
      {"truncated message", sig.substr(0, sig.size() - 1), "truncated or trailing bytes"},
      {"trailing bytes", sig + "x", "truncated or trailing bytes"},
      {"bad magic", bad_magic, "bad magic"},
      {"newer version", bad_version, "version 2, this kiln reads version 1 (upgrade kiln)"},
      {"length field", bad_len, "truncated or trailing bytes"},
      {"signature flipped", bad_sig, "the signature does not verify"},
      {"message flipped", bad_msg, "the signature does not verify"},
      {"garbage", std::string(sig.size(), '\x5a'), "bad magic"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write_bytes(sig_path, c.bytes);
    expect_refused(check(), c.needle);
  }
  // Every truncation point: an error, never a crash or a pass.
  for (std::size_t n = 0; n < sig.size(); n += 7) {
    write_bytes(sig_path, sig.substr(0, n));
    EXPECT_EQ(check().code(), StatusCode::kFailedPrecondition) << n;
  }
  fs::remove(sig_path);
  fs::create_directory(sig_path);
  expect_refused(check(), "is not a regular file");
  fs::remove(sig_path);
  write_bytes(sig_path, sig);
  EXPECT_TRUE(check().ok());
}

TEST_F(ArtifactSignTest, PublishWithKeyReplacesAnArtifactItDidNotSign) {
  // The same key published unsigned, then signed: the signed stage replaces it.
  Result<fs::path> plain = sample_publish(tmp_.path(), "r", "a");
  ASSERT_TRUE(plain.ok());
  ASSERT_FALSE(fs::exists(*plain / kSignatureFileName));
  Result<fs::path> signed_dir = sample_publish(tmp_.path(), "r", "a", nullptr, &key_);
  ASSERT_TRUE(signed_dir.ok()) << signed_dir.status().to_string();
  EXPECT_EQ(*signed_dir, *plain);
  Result<schema::Manifest> m = artifact_verify(*signed_dir);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(artifact_signature_check(*signed_dir, *m, std::vector{key_.public_key}).ok());
  // An unsigned publish of the same key keeps the signed, intact artifact.
  ASSERT_TRUE(sample_publish(tmp_.path(), "r", "b").ok());
  EXPECT_TRUE(fs::exists(*signed_dir / kSignatureFileName));
  EXPECT_EQ(artifact_verify(*signed_dir)->model_name(), "a");
  // Another key's publish replaces it with its own signature.
  const SigningKey other = new_key();
  ASSERT_TRUE(sample_publish(tmp_.path(), "r", "c", nullptr, &other).ok());
  m = artifact_verify(*signed_dir);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->model_name(), "c");
  EXPECT_TRUE(artifact_signature_check(*signed_dir, *m, std::vector{other.public_key}).ok());
  EXPECT_FALSE(artifact_signature_check(*signed_dir, *m, std::vector{key_.public_key}).ok());
}

TEST_F(ArtifactSignTest, ReservedNameCannotBeAddedAsAFile) {
  auto s = ArtifactStage::begin(tmp_.path(), "x");
  ASSERT_TRUE(s.ok());
  const Status st = (*s)->add_file(std::string(kSignatureFileName), kiln::testing::bytes_of("x"),
                                   schema::FILE_ROLE_SOURCE);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("reserved"), std::string::npos) << st.message();
}

TEST_F(ArtifactSignTest, SignInPlaceSignsAVerifiedArtifactOnly) {
  Result<fs::path> dir = sample_publish(tmp_.path(), "later", "a");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(artifact_sign_in_place(*dir, key_).ok());
  Result<schema::Manifest> m = artifact_verify(*dir);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(artifact_signature_check(*dir, *m, std::vector{key_.public_key}).ok());
  // Re-signing with another key replaces the signature.
  const SigningKey other = new_key();
  ASSERT_TRUE(artifact_sign_in_place(*dir, other).ok());
  EXPECT_TRUE(artifact_signature_check(*dir, *m, std::vector{other.public_key}).ok());
  EXPECT_FALSE(artifact_signature_check(*dir, *m, std::vector{key_.public_key}).ok());
  for (const auto& e : fs::directory_iterator(*dir))
    EXPECT_EQ(e.path().filename().string().find(".signature"), std::string::npos) << e.path();
  // A corrupt artifact is not signed.
  std::string w = read_bytes(*dir / "weights.bin");
  w[0] = static_cast<char>(w[0] ^ 1);
  write_bytes(*dir / "weights.bin", w);
  const Status st = artifact_sign_in_place(*dir, key_);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.to_string();
  EXPECT_TRUE(artifact_signature_check(*dir, *m, std::vector{other.public_key}).status().code() ==
              StatusCode::kFailedPrecondition);
}

// How long the check takes on a big artifact (KILN_SIGN_BENCH_MB, default 8 MB of weights).
TEST(ArtifactSignTiming, CheckHashesEveryFile) {
  TempDir tmp;
  const char* env = std::getenv("KILN_SIGN_BENCH_MB");
  const std::size_t mb = env != nullptr ? std::strtoul(env, nullptr, 10) : 8;
  auto s = ArtifactStage::begin(tmp.path(), "big");
  ASSERT_TRUE(s.ok());
  std::vector<uint8_t> weights(mb << 20);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<uint8_t>(i * 131 + 7);
  ASSERT_TRUE((*s)->add_file("weights.bin", weights, schema::FILE_ROLE_WEIGHTS).ok());
  const SigningKey key = new_key();
  (*s)->sign_with(key);
  schema::Manifest m;
  m.set_weights_file("weights.bin");
  Result<fs::path> dir = (*s)->publish(m);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  Result<schema::Manifest> read = artifact_verify(*dir, /*hash_files=*/false);
  ASSERT_TRUE(read.ok());
  const auto t0 = std::chrono::steady_clock::now();
  Result<PublicKey> signer = artifact_signature_check(*dir, *read, std::vector{key.public_key});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(signer.ok()) << signer.status().to_string();
  // For comparison: the integrity check every `kiln verify` runs (XXH3-64 of every file).
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(artifact_verify(*dir).ok());
  const double xxh3_secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::printf(
      "%zu MiB artifact: signature check (BLAKE2b-256 + ed25519) %.3f s (%.0f MiB/s); "
      "artifact_verify (XXH3-64) %.3f s\n",
      mb, secs, static_cast<double>(mb) / secs, xxh3_secs);
}

// Key files: round trip, modes, refusal to overwrite, and errors that name the file.
TEST(SigningKeyFiles, WriteReadRoundTrip) {
  TempDir tmp;
  const SigningKey key = new_key();
  const std::string prefix = (tmp.path() / "release").string();
  ASSERT_TRUE(signing_key_write(key, prefix).ok());
  struct stat st {};
  ASSERT_EQ(::stat((prefix + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result<SigningKey> back = signing_key_read(prefix + ".key");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->public_key, key.public_key);
  EXPECT_EQ(back->secret, key.secret);
  Result<PublicKey> pub = public_key_read(prefix + ".pub");
  ASSERT_TRUE(pub.ok()) << pub.status().to_string();
  EXPECT_EQ(*pub, key.public_key);
  EXPECT_EQ(read_bytes(prefix + ".pub"), public_key_text(key.public_key));
  // Bare hex works where text is parsed (LoadOptions::trusted_keys), with or without newline.
  EXPECT_EQ(*public_key_parse(public_key_hex(key.public_key), "k"), key.public_key);
  EXPECT_EQ(*public_key_parse(public_key_hex(key.public_key) + "\n", "k"), key.public_key);
  // Never overwritten.
  const Status again = signing_key_write(new_key(), prefix);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("exists"), std::string::npos) << again.message();
  EXPECT_EQ(signing_key_read(prefix + ".key")->public_key, key.public_key);
}

TEST(SigningKeyFiles, BadKeyFilesNameTheFile) {
  TempDir tmp;
  const SigningKey key = new_key();
  const std::string prefix = (tmp.path() / "k").string();
  ASSERT_TRUE(signing_key_write(key, prefix).ok());
  const std::string hex = public_key_hex(key.public_key);
  struct Case {
    std::string name, text, needle;
  };
  const std::vector<Case> secret_cases = {
      {"empty", "", "expected a first line 'kiln-ed25519-secret-key-v1'"},
      {"no header", hex + "\n", "expected a first line"},
      {"short hex", std::string(kSecretKeyHeader) + "\nabcd\n", "expected one line of 64 hex"},
      {"not hex", std::string(kSecretKeyHeader) + "\n" + std::string(64, 'g') + "\n",
       "not hexadecimal"},
      {"extra line", std::string(kSecretKeyHeader) + "\n" + hex + "\nmore\n", "expected one line"},
      {"public key", public_key_text(key.public_key), "is a public key file"},
      {"huge", std::string(10000, 'a'), "too large"},
  };
  for (const Case& c : secret_cases) {
    SCOPED_TRACE(c.name);
    const fs::path f = tmp.path() / "bad.key";
    write_bytes(f, c.text);
    Result<SigningKey> r = signing_key_read(f);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(f.string()), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
  const std::vector<Case> public_cases = {
      {"secret key", read_bytes(prefix + ".key"), "is a secret key file"},
      {"no header", hex + "\n", "expected a first line 'kiln-ed25519-public-key-v1'"},
      {"short", std::string(kPublicKeyHeader) + "\n" + hex.substr(2) + "\n", "expected one line"},
  };
  for (const Case& c : public_cases) {
    SCOPED_TRACE(c.name);
    const fs::path f = tmp.path() / "bad.pub";
    write_bytes(f, c.text);
    Result<PublicKey> r = public_key_read(f);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(f.string()), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
  Result<PublicKey> missing = public_key_read(tmp.path() / "nope.pub");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.pub"), std::string::npos);
  EXPECT_FALSE(public_key_parse("xyz", "LoadOptions.trusted_keys[0]").ok());
  EXPECT_NE(public_key_parse("xyz", "LoadOptions.trusted_keys[0]")
                .status()
                .message()
                .find("LoadOptions.trusted_keys[0]"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::cache
