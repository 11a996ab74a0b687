// A generated kernel's parameter signature, carried in its extern "C" symbol so that the cubin
// vouches for it: the runtime looks every kernel up by symbol (cudaLibraryGetKernel), so a
// manifest edited to claim another signature names a symbol the cubin does not have. The
// compiler derives the signature from the kernel's parameter list and the tensors its launches
// bind (compiler/backend/kernel_codegen); manifest validation (runtime/manifest_validate*)
// checks every step's arguments against it before any CUDA call. cache/FORMAT.md, "Trust model".
//
// Symbol forms ("<base>" is e.g. "ew_<16 hex>", any identifier text):
//   <base>__K<sig>                  a general kernel (takes S)
//   <base>__K<sig>_s<size>          specialised for one size (S baked in)
//   <base>__K<sig>_v<16 hex>        a tuned candidate (only ever specialised: ..._s<size>)
//   <base>__K<sig>_v<16 hex>_s<size>
// <sig> is one code per parameter, the last (S) included, in order:
//   r  read-only pointer (const T*)      w  writable pointer (T*)
//   l  64-bit integer (long long)        i  32-bit integer       f  float
// A pointer may be followed by its extent, the bytes the kernel may touch from it as a linear
// function of S, coef*S+offset: "x<coef>p<offset>" or "x<coef>m<-offset>" (decimal, no leading
// zeros; coef >= 0). A pointer without an extent (a runtime-owned pointer: the real size, the
// KV cache) is checked for its kind only. Example: "rx0p1024wx4096p0fl".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"

namespace kiln::cache {

enum class ParamKind : char {
  kReadPtr = 'r',
  kWritePtr = 'w',
  kI64 = 'l',
  kI32 = 'i',
  kF32 = 'f',
};

// Bytes = coef * S + offset, for S in [1, max_size].
struct ParamExtent {
  int64_t coef = 0;
  int64_t offset = 0;
  friend bool operator==(const ParamExtent&, const ParamExtent&) = default;
};

struct KernelParam {
  ParamKind kind = ParamKind::kI64;
  std::optional<ParamExtent> extent = std::nullopt;  // pointers only
  friend bool operator==(const KernelParam&, const KernelParam&) = default;
};

struct KernelSignature {
  std::vector<KernelParam> params;
  friend bool operator==(const KernelSignature&, const KernelSignature&) = default;
};

// The bytes of a tensor with dims coef_i*S + offset_i (`dims`, as ParamExtents) of
// `elem_bytes` each, as a bound linear in S: the tangent at S = 1 of its byte size. The byte
// size is a product of non-negative, non-decreasing linear factors — a polynomial in S-1 with
// non-negative coefficients — so it is never below this bound for S >= 1, and equal to it when
// at most one dim depends on S. nullopt on overflow, a negative coef or a dim negative at S = 1.
// The compiler declares extents with it and the runtime sizes buffers with it, so they agree.
std::optional<ParamExtent> tensor_bytes_bound(const std::vector<ParamExtent>& dims,
                                              int64_t elem_bytes);

bool param_is_pointer(ParamKind k);
// "a read-only pointer", "a writable pointer", "a 64-bit integer", ...
std::string_view param_kind_name(ParamKind k);

// "rx0p1024wfl" (without "__K"). An extent on a non-pointer or a negative coef is the caller's
// bug: encode writes them anyway and the parse refuses the result.
std::string kernel_signature_encode(const KernelSignature& sig);
// `base` + "__K" + the encoding: the general kernel's symbol.
std::string kernel_symbol_with_signature(const std::string& base, const KernelSignature& sig);

// A symbol taken apart.
struct KernelSymbolParts {
  std::string base;  // before "__K"
  KernelSignature signature;
  std::string candidate;     // the 16 hex digits after "_v"; empty for a default kernel
  uint32_t specialised = 0;  // the size after "_s"; 0 for a general kernel
};

// Parses any of the forms above; kInvalidArgument naming the symbol and what is wrong (no
// "__K", an unknown code, a malformed extent, a trailer other than _s<size> / _v<hex>[_s<size>]).
// Never crashes, whatever the input.
Result<KernelSymbolParts> kernel_symbol_parse(std::string_view symbol);

}  // namespace kiln::cache
