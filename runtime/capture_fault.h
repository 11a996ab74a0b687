// A test hook for capture failures: tests make a capture fail at a chosen size, as a failed
// launch or an allocation failure inside the capture would, and check that the executor comes
// back as a clean error with every resource released. Internal (not an installed header, no
// environment knob); nothing but tests sets it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cache/status.h"

namespace kiln::runtime {

// Called inside each segment capture (between cudaStreamBeginCapture and cudaStreamEndCapture)
// with the padded size and the segment index; a non-OK Status aborts that capture.
using CaptureFaultHook = std::function<Status(int64_t size, size_t segment)>;

// Replaces the hook for all later captures (an empty function removes it); returns the previous
// one. Thread-safe.
CaptureFaultHook capture_fault_set(CaptureFaultHook hook);

// OK when no hook is set; otherwise what the hook returns.
Status capture_fault_check(int64_t size, size_t segment);

}  // namespace kiln::runtime
