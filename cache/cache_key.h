// The cache key: a hash over everything that changes a compiled result (BuildFactors).
#pragma once

#include <string>

#include "schemas/manifest.pb.h"

namespace kiln::cache {

// 32 hex digits. Deterministic: the same factors give the same key on every machine.
std::string cache_key(const schema::BuildFactors& factors);

}  // namespace kiln::cache
