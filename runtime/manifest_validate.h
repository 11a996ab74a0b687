// Validation of an untrusted manifest, before any CUDA call. Pure functions: no CUDA, no files.
//
// Every kernel step's arguments are also checked against the parameter signature its kernel's
// symbol carries (cache/kernel_signature.h): kinds and count, extents, read-only weights.
//
// Besides the checks the schema comments ask for, two readings of the contract are enforced:
// every DimExpr has coef >= 0 (dims never shrink as S grows, so extents are largest at
// config.max_size), and the GEMM operands must fit their buffers at every size the runtime
// may run (checked here at 1, max_size and every capture/compile size, and again per size by
// gemm_step_check_at when a plan is made).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/kernel_signature.h"
#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

// The error every check returns: invalid_argument("manifest: " + message).
Status manifest_invalid(const std::string& message);

// Every field: config, files, buffers, IO bindings, modules, kernels, pieces and their steps.
// The error names the field ("buffer 3 ('h0'): ...") and what disagreed.
Status manifest_validate(const schema::Manifest& m);

// The generation section (absent: OK): the cache geometry within the block manager's limits,
// the named inputs [1, S] of an integer type and the logits [1, S, vocab] of the sampling
// kernel's dtype, the sampling kernel a general kernel with a launchable geometry. Assumes the
// config, IO bindings and kernels already validated.
Status generation_validate(const schema::Manifest& m);

// The pieces and their steps only; assumes config, buffers and kernels already validated.
Status program_validate(const schema::Manifest& m);

// GEMM dims >= 1, batch within int32, operands (batch strides included) inside their buffers,
// D batches not overlapping, bias of at least N elements — all at size `s`.
Status gemm_step_check_at(const schema::Manifest& m, const schema::GemmStep& g, int64_t s);

// Buffer `index` holds at least `e` bytes at every S in [1, max_size] (a kernel's declared
// extent, cache/kernel_signature.h); the error names `where`, the buffer and both sizes.
Status buffer_extent_check(const schema::Manifest& m, uint32_t index, const cache::ParamExtent& e,
                           const std::string& where);

// The sizes at which size-dependent checks run: 1, every capture and compile size, max_size.
std::vector<int64_t> manifest_check_sizes(const schema::Manifest& m);

// "buffer 3 ('h0')" — for messages.
std::string buffer_label(const schema::Manifest& m, uint32_t index);

}  // namespace kiln::runtime
