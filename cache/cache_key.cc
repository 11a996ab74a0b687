// The key is XXH3-128 over an explicit, versioned byte encoding of BuildFactors, never over the
// protobuf serialisation (whose byte order is not a stability promise). Every field is written
// in a fixed order, each preceded by a one-byte tag; strings and lists carry a length prefix so
// that no two different factor sets can encode to the same bytes.
#include "cache/cache_key.h"

#include <cstdint>
#include <string_view>

#include "cache/file_hash.h"

namespace kiln::cache {

namespace {

// Bump when the encoding below changes, so old and new keys never collide.
constexpr std::string_view kKeyDomain = "kiln-cache-key/1";

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_tag(std::string& out, char tag) { out.push_back(tag); }

void put_str(std::string& out, char tag, std::string_view s) {
  put_tag(out, tag);
  put_u64(out, s.size());
  out.append(s);
}

void put_int(std::string& out, char tag, uint64_t v) {
  put_tag(out, tag);
  put_u64(out, v);
}

}  // namespace

std::string cache_key(const schema::BuildFactors& f) {
  std::string buf;
  buf.append(kKeyDomain);
  put_str(buf, 'c', f.compiler_version());
  put_int(buf, 'f', f.format_version());
  // Sign-extended so negative values stay distinct from large positive ones.
  put_int(buf, 'r', static_cast<uint64_t>(static_cast<int64_t>(f.cuda_runtime_version())));
  put_str(buf, 'n', f.nvrtc_version());
  put_int(buf, 'l', f.cublaslt_version());
  put_int(buf, 't', static_cast<uint64_t>(f.targets_size()));
  for (const std::string& t : f.targets()) put_str(buf, 'a', t);
  put_str(buf, 'm', f.model_hash());
  put_str(buf, 'g', f.config_hash());
  return hash128_hex(buf);
}

}  // namespace kiln::cache
