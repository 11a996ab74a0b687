// compiler_version(): the compiler's identity in every cache key. Its own small library
// (compiler/meson.build), so that the generated hash header, which changes with every source
// change, recompiles this file alone.
#include "compiler/compiler_version.h"

#include <fmt/format.h>

#include "compiler/compiler_fingerprint.h"

namespace kiln::compiler {

std::string compiler_version() {
  return fmt::format("{}+{}", KILN_VERSION, KILN_COMPILER_SOURCE_HASH);
}

}  // namespace kiln::compiler
