#include "cache/kernel_signature.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace kiln::cache {
namespace {

KernelParam ptr(ParamKind k, int64_t coef, int64_t offset) {
  return {k, ParamExtent{coef, offset}};
}

KernelSignature sample() {
  KernelSignature s;
  s.params = {ptr(ParamKind::kReadPtr, 0, 1024), ptr(ParamKind::kWritePtr, 4096, 0),
              ptr(ParamKind::kReadPtr, 3, -2),   {ParamKind::kReadPtr, std::nullopt},
              {ParamKind::kF32, std::nullopt},   {ParamKind::kI32, std::nullopt},
              {ParamKind::kI64, std::nullopt}};
  return s;
}

void expect_refused(const std::string& symbol, const std::string& needle) {
  auto r = kernel_symbol_parse(symbol);
  ASSERT_FALSE(r.ok()) << symbol;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << symbol << ": " << r.status().message();
  EXPECT_NE(r.status().message().find(symbol), std::string::npos) << r.status().message();
}

TEST(KernelSignature, Encoding) {
  EXPECT_EQ(kernel_signature_encode(sample()), "rx0p1024wx4096p0rx3m2rfil");
  EXPECT_EQ(kernel_symbol_with_signature("ew_00ff", sample()),
            "ew_00ff__Krx0p1024wx4096p0rx3m2rfil");
}

TEST(KernelSignature, RoundTripEveryForm) {
  const std::string general = kernel_symbol_with_signature("ew_0123456789abcdef", sample());
  for (const std::string& trailer :
       {std::string(), std::string("_s16"), std::string("_vfedcba9876543210"),
        std::string("_vfedcba9876543210_s4294967295")}) {
    auto r = kernel_symbol_parse(general + trailer);
    ASSERT_TRUE(r.ok()) << general + trailer << ": " << r.status().to_string();
    EXPECT_EQ(r->base, "ew_0123456789abcdef");
    EXPECT_EQ(r->signature, sample());
    EXPECT_EQ(r->candidate, trailer.starts_with("_v") ? "fedcba9876543210" : "");
    EXPECT_EQ(r->specialised, trailer == "_s16"                   ? 16u
                              : trailer.ends_with("_s4294967295") ? 4294967295u
                                                                  : 0u);
  }
}

TEST(KernelSignature, ExtremeExtentsRoundTrip) {
  KernelSignature s;
  s.params = {ptr(ParamKind::kWritePtr, INT64_MAX, INT64_MIN),
              ptr(ParamKind::kReadPtr, 0, INT64_MAX),
              {ParamKind::kI64, std::nullopt}};
  auto r = kernel_symbol_parse(kernel_symbol_with_signature("k", s));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->signature, s);
}

TEST(KernelSignature, BaseMayContainTheMarker) {
  // The last "__K" starts the signature: what follows it never contains one.
  auto r = kernel_symbol_parse("a__Kb_1__Krl_s2");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->base, "a__Kb_1");
  EXPECT_EQ(r->signature.params.size(), 2u);
  EXPECT_EQ(r->specialised, 2u);
}

TEST(KernelSignature, MalformedSymbolsRefused) {
  expect_refused("add_bias_relu", "no parameter signature");
  expect_refused("", "no parameter signature");
  expect_refused("__Krl", "nothing before");
  expect_refused("k__K", "empty");
  expect_refused("k__K_s4", "empty");
  expect_refused("k__Krzl", "unknown code 'z'");
  expect_refused("k__KRl", "unknown code 'R'");
  expect_refused("k__Klx1p0", "extent on a non-pointer");
  expect_refused("k__Kfx1p0", "extent on a non-pointer");
  expect_refused("k__Krxp0l", "coefficient is not a number");
  expect_refused("k__Krx01p0l", "coefficient is not a number");  // leading zero
  expect_refused("k__Krx-1p0l", "coefficient is not a number");
  expect_refused("k__Krx1l", "lacks its offset");
  expect_refused("k__Krx1", "lacks its offset");
  expect_refused("k__Krx1pl", "offset is not a number");
  expect_refused("k__Krx1m0l", "offset is not a number");  // "-0"
  expect_refused("k__Krx9223372036854775808p0l", "coefficient is not a number");
  expect_refused("k__Krx0p9223372036854775808l", "offset is not a number");
  expect_refused("k__Krx0m9223372036854775809l", "offset is not a number");
  expect_refused("k__Krl_s0", "'_s' must be followed");
  expect_refused("k__Krl_s", "'_s' must be followed");
  expect_refused("k__Krl_s016", "'_s' must be followed");
  expect_refused("k__Krl_s4294967296", "'_s' must be followed");
  expect_refused("k__Krl_s16_v0123456789abcdef", "'_s' must be followed");
  expect_refused("k__Krl_v0123", "16 lowercase hex");
  expect_refused("k__Krl_v0123456789ABCDEF", "16 lowercase hex");
  expect_refused("k__Krl_x", "unexpected '_x'");
  expect_refused("k__Krl_v0123456789abcdef0", "unexpected '0'");
}

TEST(KernelSignature, TensorBytesBound) {
  // [S, 48] f32: exactly 192*S bytes; [3] f16: 6 bytes; a scalar: the element.
  EXPECT_EQ(tensor_bytes_bound({{1, 0}, {0, 48}}, 4), (ParamExtent{192, 0}));
  EXPECT_EQ(tensor_bytes_bound({{0, 3}}, 2), (ParamExtent{0, 6}));
  EXPECT_EQ(tensor_bytes_bound({}, 8), (ParamExtent{0, 8}));
  // [2S+1, 4] bytes: 8S+4.
  EXPECT_EQ(tensor_bytes_bound({{2, 1}, {0, 4}}, 1), (ParamExtent{8, 4}));
  // [S, S+48] f32 = 4S^2+192S: the tangent at S=1 is 200S-4, below it everywhere else.
  EXPECT_EQ(tensor_bytes_bound({{1, 0}, {1, 48}}, 4), (ParamExtent{200, -4}));
  // A zero-sized dim: nothing.
  EXPECT_EQ(tensor_bytes_bound({{0, 0}, {1, 0}}, 4), (ParamExtent{0, 0}));
  EXPECT_FALSE(tensor_bytes_bound({{-1, 4}}, 4).has_value());
  EXPECT_FALSE(tensor_bytes_bound({{0, -1}}, 4).has_value());
  EXPECT_FALSE(tensor_bytes_bound({{0, INT64_MAX / 2}, {0, 3}}, 1).has_value());
  EXPECT_FALSE(tensor_bytes_bound({{INT64_MAX, 0}}, 2).has_value());
}

TEST(KernelSignature, NoCrashOnAnyInput) {
  // Random symbols over the signature's alphabet, and every prefix of a valid one: each either
  // parses to a signature that encodes back to the same text or is refused with a message.
  const std::string alphabet = "rwlifxpm0123456789_Ksv";
  std::mt19937 rng(12345);
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = "k__K";
    const int len = static_cast<int>(rng() % 24);
    for (int j = 0; j < len; ++j) s += alphabet[rng() % alphabet.size()];
    auto r = kernel_symbol_parse(s);
    if (!r.ok()) {
      EXPECT_FALSE(r.status().message().empty());
      continue;
    }
    ++parsed;
    const std::string again = kernel_symbol_with_signature(r->base, r->signature);
    EXPECT_EQ(s.rfind(again, 0), 0u) << s << " re-encodes as " << again;
  }
  EXPECT_GT(parsed, 0);
  const std::string good = "ew_1__Krx0p1024wx4096p0fl_v0123456789abcdef_s8";
  for (size_t n = 0; n <= good.size(); ++n) (void)kernel_symbol_parse(good.substr(0, n));
  std::string binary;
  for (int c = 0; c < 256; ++c) binary += static_cast<char>(c);
  EXPECT_FALSE(kernel_symbol_parse("k__K" + binary).ok());
}

}  // namespace
}  // namespace kiln::cache
