// Fuzz target: the artifact manifest's loader and validator. The input is a manifest payload;
// it gets a header that matches it (manifest_frame), so mutations reach the protobuf parser and
// the validator instead of stopping at the checksum. Raw bytes (a mutated header) are tried too.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cache/manifest_io.h"
#include "runtime/manifest_validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)kiln::cache::manifest_decode(bytes, "fuzz/raw");
  const std::string framed = kiln::cache::manifest_frame(bytes);
  auto manifest = kiln::cache::manifest_decode(framed, "fuzz/manifest.kiln");
  if (!manifest.ok()) return 0;
  (void)kiln::runtime::manifest_validate(*manifest);
  return 0;
}
