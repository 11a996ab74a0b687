// LoadOptions::trusted_keys: the signature check runs before any manifest field is interpreted
// and before any CUDA call, so every refusal is testable without a GPU. A signed artifact that
// passes gets as far as the device (no GPU here: "no CUDA device"; on a GPU it loads).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/artifact_signature.h"
#include "cache/signing_key.h"
#include "kiln/model.h"
#include "kiln/runtime.h"
#include "runtime/cuda_check.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/test_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using kiln::testing::read_bytes;
using kiln::testing::TempDir;
using kiln::testing::write_bytes;
using runtime::testing::c_api_fails;
using runtime::testing::is_error;
using runtime::testing::TestModelSpec;

std::string local_arch() {
  if (!cuda_device_available()) return "sm_90";
  auto arch = runtime::device_arch(0);
  return arch.ok() ? *arch : "sm_90";
}

cache::SigningKey new_key() {
  auto k = cache::signing_key_generate();
  EXPECT_TRUE(k.ok());
  return k.ok() ? *k : cache::SigningKey{};
}

LoadOptions trusting(const std::vector<std::string>& keys) {
  LoadOptions o;
  o.trusted_keys = keys;
  return o;
}

class ModelLoadSignature : public ::testing::Test {
 protected:
  void SetUp() override {
    TestModelSpec spec;
    spec.arch = local_arch();
    auto art = runtime::testing::test_artifact_build(tmp_.path(), spec);
    ASSERT_TRUE(art.ok()) << art.status().to_string();
    dir_ = art->dir;
  }
  void sign() { ASSERT_TRUE(cache::artifact_sign_in_place(dir_, key_).ok()); }
  std::string pub_text() const { return cache::public_key_text(key_.public_key); }

  // A signed artifact that passes the check reaches the device.
  static void expect_passed_signature(const Result<std::shared_ptr<Model>>& r) {
    if (!cuda_device_available()) {
      EXPECT_TRUE(is_error(r.status(), StatusCode::kFailedPrecondition, {"no CUDA device"}));
      return;
    }
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_GT((*r)->load_report().signature_ms, 0.0);
  }

  TempDir tmp_;
  cache::SigningKey key_ = new_key();
  std::filesystem::path dir_;
};

TEST_F(ModelLoadSignature, SignedByATrustedKeyPasses) {
  sign();
  expect_passed_signature(Model::load(dir_, trusting({pub_text()})));
  // Bare hex, and one trusted key among several.
  expect_passed_signature(Model::load(dir_, trusting({cache::public_key_hex(new_key().public_key),
                                                      cache::public_key_hex(key_.public_key)})));
}

TEST_F(ModelLoadSignature, UnsignedIsRefusedOnlyUnderTrust) {
  auto r = Model::load(dir_, trusting({pub_text()}));
  EXPECT_TRUE(is_error(r.status(), StatusCode::kFailedPrecondition,
                       {"artifact signature check failed", "unsigned", dir_.string()}));
  // Without trusted keys nothing is asked of signatures.
  auto plain = Model::load(dir_);
  if (!cuda_device_available()) {
    EXPECT_TRUE(is_error(plain.status(), StatusCode::kFailedPrecondition, {"no CUDA device"}));
  } else {
    EXPECT_TRUE(plain.ok()) << plain.status().to_string();
  }
}

TEST_F(ModelLoadSignature, OtherSignerIsRefused) {
  sign();
  auto r = Model::load(dir_, trusting({cache::public_key_text(new_key().public_key)}));
  EXPECT_TRUE(is_error(r.status(), StatusCode::kFailedPrecondition,
                       {"artifact signature check failed",
                        "signed by key " + cache::public_key_hex(key_.public_key), "not trusted"}));
}

TEST_F(ModelLoadSignature, ModifiedWeightsAreRefusedBeforeUpload) {
  sign();
  const auto w = dir_ / "weights.bin";
  std::string bytes = read_bytes(w);
  ASSERT_FALSE(bytes.empty());
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
  write_bytes(w, bytes);
  // Sizes still match, so only a hash finds it: the signature check, before any CUDA call.
  auto r = Model::load(dir_, trusting({pub_text()}));
  EXPECT_TRUE(is_error(r.status(), StatusCode::kFailedPrecondition,
                       {"artifact signature check failed", w.string(), "modified after signing"}));
}

TEST_F(ModelLoadSignature, MalformedTrustedKeyIsAnInvalidArgument) {
  sign();
  auto r = Model::load(dir_, trusting({pub_text(), "not a key"}));
  EXPECT_TRUE(is_error(r.status(), StatusCode::kInvalidArgument, {"LoadOptions.trusted_keys[1]"}));
  auto empty = Model::load(dir_, trusting({""}));
  EXPECT_TRUE(
      is_error(empty.status(), StatusCode::kInvalidArgument, {"LoadOptions.trusted_keys[0]"}));
}

TEST_F(ModelLoadSignature, CApiTakesTrustedKeys) {
  const std::string pub = pub_text();
  const char* keys[] = {pub.c_str()};
  kiln_model* model = nullptr;
  EXPECT_TRUE(c_api_fails(kiln_model_load_trusted(dir_.c_str(), keys, 1, &model),
                          KILN_FAILED_PRECONDITION, "the artifact is unsigned"));
  EXPECT_EQ(model, nullptr);
  EXPECT_TRUE(c_api_fails(kiln_model_load_trusted(dir_.c_str(), keys, 0, &model),
                          KILN_INVALID_ARGUMENT, "no trusted keys"));
  const char* null_key[] = {nullptr};
  EXPECT_TRUE(c_api_fails(kiln_model_load_trusted(dir_.c_str(), null_key, 1, &model),
                          KILN_INVALID_ARGUMENT, "trusted_keys[0] is NULL"));
  sign();
  const kiln_status st = kiln_model_load_trusted(dir_.c_str(), keys, 1, &model);
  if (!cuda_device_available()) {
    EXPECT_TRUE(c_api_fails(st, KILN_FAILED_PRECONDITION, "no CUDA device"));
  } else {
    EXPECT_EQ(st, KILN_OK) << kiln_last_error();
  }
  kiln_model_free(model);
}

}  // namespace
}  // namespace kiln
