// The compiler's identity in every cache key (compiler_version.cc, a library of its own).
#pragma once

#include <string>

namespace kiln::compiler {

// kiln's version, then a hash of the sources that shape what the compiler writes (compiler/,
// kernels/, cache/, schemas/; tools/source_fingerprint.py), so an artifact compiled by a kiln
// built from other sources is never a cache hit.
std::string compiler_version();

}  // namespace kiln::compiler
