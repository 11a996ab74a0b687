// Load-time checks of the loaded kernels against the launch program that uses them: parameter
// count and sizes (cudaFuncGetParamInfo) match each step's argument list, the block size is
// within the kernel's limit, and the dynamic shared memory fits (raising the limit above the
// default 48 KB with cudaFuncSetAttribute where a step needs it).
#pragma once

#include "cache/status.h"
#include "runtime/model_state.h"

namespace kiln::runtime {

Status kernels_prepare(const ModelState& st);

}  // namespace kiln::runtime
