#include "cache/kernel_signature.h"

#include <algorithm>
#include <cstddef>

namespace kiln::cache {
namespace {

constexpr std::string_view kMarker = "__K";

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

Status bad(std::string_view symbol, const std::string& why) {
  return invalid_argument("kernel symbol '" + std::string(symbol) + "': " + why);
}

// A canonical unsigned decimal at `text[*at]` (no leading zeros), at most `max`; advances *at.
std::optional<uint64_t> read_number(std::string_view text, size_t* at, uint64_t max) {
  const size_t start = *at;
  uint64_t v = 0;
  while (*at < text.size() && is_digit(text[*at])) {
    const auto d = static_cast<uint64_t>(text[*at] - '0');
    if (v > (max - d) / 10) return std::nullopt;
    v = v * 10 + d;
    ++*at;
  }
  const size_t len = *at - start;
  if (len == 0 || (len > 1 && text[start] == '0')) return std::nullopt;
  return v;
}

std::optional<ParamKind> kind_of(char c) {
  switch (c) {
    case 'r':
      return ParamKind::kReadPtr;
    case 'w':
      return ParamKind::kWritePtr;
    case 'l':
      return ParamKind::kI64;
    case 'i':
      return ParamKind::kI32;
    case 'f':
      return ParamKind::kF32;
    default:
      return std::nullopt;
  }
}

Result<KernelSignature> signature_parse(std::string_view symbol, std::string_view sig) {
  KernelSignature out;
  constexpr auto kMax = static_cast<uint64_t>(INT64_MAX);
  size_t at = 0;
  while (at < sig.size()) {
    const size_t code_at = at;
    const std::optional<ParamKind> kind = kind_of(sig[at++]);
    const std::string where = "parameter " + std::to_string(out.params.size()) + " (signature '" +
                              std::string(sig) + "', offset " + std::to_string(code_at) + ")";
    if (!kind) return bad(symbol, where + ": unknown code '" + sig[code_at] + "'");
    KernelParam p{*kind, std::nullopt};
    if (at < sig.size() && sig[at] == 'x') {
      if (!param_is_pointer(*kind)) return bad(symbol, where + ": an extent on a non-pointer");
      ++at;
      auto coef = read_number(sig, &at, kMax);
      if (!coef) return bad(symbol, where + ": the extent's coefficient is not a number");
      if (at >= sig.size() || (sig[at] != 'p' && sig[at] != 'm'))
        return bad(symbol, where + ": the extent lacks its offset ('p<n>' or 'm<n>')");
      const bool negative = sig[at++] == 'm';
      auto offset = read_number(sig, &at, negative ? kMax + 1 : kMax);
      if (!offset || (negative && *offset == 0))
        return bad(symbol, where + ": the extent's offset is not a number");
      ParamExtent e;
      e.coef = static_cast<int64_t>(*coef);
      e.offset = negative ? static_cast<int64_t>(0 - *offset) : static_cast<int64_t>(*offset);
      p.extent = e;
    }
    out.params.push_back(p);
  }
  if (out.params.empty()) return bad(symbol, "the signature after '__K' is empty");
  return out;
}

}  // namespace

std::optional<ParamExtent> tensor_bytes_bound(const std::vector<ParamExtent>& dims,
                                              int64_t elem_bytes) {
  int64_t p1 = 1, dp1 = 0;  // numel(1), numel'(1)
  for (const ParamExtent& d : dims) {
    int64_t at1 = 0, a = 0, b = 0;
    if (d.coef < 0 || __builtin_add_overflow(d.coef, d.offset, &at1) || at1 < 0)
      return std::nullopt;
    if (__builtin_mul_overflow(dp1, at1, &a) || __builtin_mul_overflow(p1, d.coef, &b) ||
        __builtin_add_overflow(a, b, &dp1) || __builtin_mul_overflow(p1, at1, &p1))
      return std::nullopt;
  }
  int64_t coef = 0, at1 = 0, offset = 0;
  if (elem_bytes < 0 || __builtin_mul_overflow(dp1, elem_bytes, &coef) ||
      __builtin_mul_overflow(p1, elem_bytes, &at1) || __builtin_sub_overflow(at1, coef, &offset))
    return std::nullopt;
  return ParamExtent{coef, offset};
}

bool param_is_pointer(ParamKind k) { return k == ParamKind::kReadPtr || k == ParamKind::kWritePtr; }

std::string_view param_kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::kReadPtr:
      return "a read-only pointer";
    case ParamKind::kWritePtr:
      return "a writable pointer";
    case ParamKind::kI64:
      return "a 64-bit integer";
    case ParamKind::kI32:
      return "a 32-bit integer";
    case ParamKind::kF32:
      return "a float";
  }
  return "an unknown parameter";
}

std::string kernel_signature_encode(const KernelSignature& sig) {
  std::string out;
  for (const KernelParam& p : sig.params) {
    out += static_cast<char>(p.kind);
    if (!p.extent) continue;
    out += 'x' + std::to_string(p.extent->coef);
    if (p.extent->offset < 0) {
      out += 'm' + std::to_string(0 - static_cast<uint64_t>(p.extent->offset));
    } else {
      out += 'p' + std::to_string(p.extent->offset);
    }
  }
  return out;
}

std::string kernel_symbol_with_signature(const std::string& base, const KernelSignature& sig) {
  return base + std::string(kMarker) + kernel_signature_encode(sig);
}

Result<KernelSymbolParts> kernel_symbol_parse(std::string_view symbol) {
  const size_t marker = symbol.rfind(kMarker);
  if (marker == std::string_view::npos)
    return bad(symbol,
               "no parameter signature ('__K...'); an artifact of an older kiln, or "
               "edited: recompile it");
  KernelSymbolParts out;
  out.base = std::string(symbol.substr(0, marker));
  if (out.base.empty()) return bad(symbol, "nothing before '__K'");
  const std::string_view rest = symbol.substr(marker + kMarker.size());
  const size_t trailer = rest.find('_');
  KILN_ASSIGN_OR_RETURN(out.signature, signature_parse(symbol, rest.substr(0, trailer)));
  if (trailer == std::string_view::npos) return out;
  std::string_view t = rest.substr(trailer);
  if (t.starts_with("_v")) {
    if (t.size() < 18 || !std::all_of(t.begin() + 2, t.begin() + 18, is_hex))
      return bad(symbol, "'_v' must be followed by 16 lowercase hex digits");
    out.candidate = std::string(t.substr(2, 16));
    t.remove_prefix(18);
  }
  if (t.starts_with("_s")) {
    size_t at = 2;
    auto size = read_number(t, &at, UINT32_MAX);
    if (!size || *size == 0 || at != t.size())
      return bad(symbol, "'_s' must be followed by a size in [1, 2^32-1] and end the symbol");
    out.specialised = static_cast<uint32_t>(*size);
    t.remove_prefix(at);
  }
  if (!t.empty())
    return bad(symbol, "unexpected '" + std::string(t) +
                           "' after the signature (expected _s<size>, _v<hex> or _v<hex>_s<size>)");
  return out;
}

}  // namespace kiln::cache
