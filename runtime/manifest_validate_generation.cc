// manifest_validate, part 3: the generation section of a KV-cache decoder compiled for
// generation (schemas/manifest.proto, Generation). The Generator trusts these fields to size
// its device buffers and bind its step inputs, so each is checked here, before any CUDA call.
#include <string>

#include "cache/dtype.h"
#include "cache/kernel_signature.h"
#include "runtime/manifest_validate.h"

namespace kiln::runtime {
namespace {

using schema::Manifest;

Status generation_invalid(const std::string& message) {
  return invalid_argument("manifest: generation: " + message);
}

const schema::IoBinding* find_io(const google::protobuf::RepeatedPtrField<schema::IoBinding>& list,
                                 const std::string& name) {
  for (const auto& io : list)
    if (io.name() == name) return &io;
  return nullptr;
}

bool is_tokens(const schema::IoBinding& io) {
  return io.dims_size() == 2 && io.dims(0).coef() == 0 && io.dims(0).offset() == 1 &&
         io.dims(1).coef() == 1 && io.dims(1).offset() == 0 && io.size_axis() == 1;
}

// input_ids / position_ids / attention_mask: an input [1, S] of an integer type (the mask may
// also be bool or float: the runtime writes ones).
Status token_input_validate(const Manifest& m, const std::string& name, const char* field,
                            bool mask) {
  const schema::IoBinding* io = find_io(m.inputs(), name);
  if (io == nullptr)
    return generation_invalid(std::string(field) + " names '" + name + "', not an input");
  if (!is_tokens(*io))
    return generation_invalid(std::string(field) + " '" + name +
                              "' must be [1, S] on the size axis");
  const auto t = static_cast<DType>(io->dtype());
  const bool integer = t == DType::kI64 || t == DType::kI32;
  const bool mask_type =
      t == DType::kBool || t == DType::kU8 || t == DType::kI8 || t == DType::kF32;
  if (!integer && !(mask && mask_type))
    return generation_invalid(std::string(field) + " '" + name + "' is " +
                              std::string(dtype_name(t)) + ", expected int64 or int32");
  return Status::ok_status();
}

}  // namespace

Status generation_validate(const Manifest& m) {
  if (!m.has_generation()) return Status::ok_status();
  const schema::Generation& g = m.generation();
  if (g.num_layers() < 1 || g.num_layers() > 1024)
    return generation_invalid("num_layers " + std::to_string(g.num_layers()) +
                              " is outside [1, 1024]");
  if (g.num_kv_heads() < 1 || g.num_kv_heads() > 1024 || g.head_dim() < 1 || g.head_dim() > 1024)
    return generation_invalid("num_kv_heads and head_dim must be in [1, 1024]");
  const auto dt = static_cast<DType>(g.dtype());
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16)
    return generation_invalid("cache dtype " + std::string(dtype_name(dt)) +
                              " is not f32, f16 or bf16");
  const uint32_t bs = g.block_size();
  if (bs < 1 || bs > 256 || (bs & (bs - 1)) != 0)
    return generation_invalid("block_size " + std::to_string(bs) +
                              " is not a power of two in [1, 256]");
  if (g.max_sequences() < 1 || g.max_seq_len() < 1)
    return generation_invalid("max_sequences and max_seq_len must be >= 1");
  if (g.max_blocks_per_seq() != (g.max_seq_len() + bs - 1) / bs)
    return generation_invalid("max_blocks_per_seq " + std::to_string(g.max_blocks_per_seq()) +
                              " is not ceil(max_seq_len / block_size)");
  if (g.max_blocks() == 0 && !(g.memory_fraction() > 0 && g.memory_fraction() <= 1))
    return generation_invalid("neither max_blocks nor a memory_fraction in (0, 1] is set");
  if (g.max_blocks() > 0 && g.max_blocks() < g.max_blocks_per_seq())
    return generation_invalid("max_blocks " + std::to_string(g.max_blocks()) +
                              " cannot hold one max_seq_len sequence");
  if (g.max_blocks() > 0x7fffffffull)
    return generation_invalid("max_blocks exceeds int32 block ids");
  KILN_RETURN_IF_ERROR(token_input_validate(m, g.input_ids(), "input_ids", false));
  KILN_RETURN_IF_ERROR(token_input_validate(m, g.position_ids(), "position_ids", false));
  if (!g.attention_mask().empty())
    KILN_RETURN_IF_ERROR(token_input_validate(m, g.attention_mask(), "attention_mask", true));
  const schema::IoBinding* logits = find_io(m.outputs(), g.logits());
  if (logits == nullptr)
    return generation_invalid("logits names '" + g.logits() + "', not an output");
  if (logits->dims_size() != 3 || logits->size_axis() != 1 || logits->dims(0).coef() != 0 ||
      logits->dims(0).offset() != 1 || logits->dims(1).coef() != 1 ||
      logits->dims(1).offset() != 0 || logits->dims(2).coef() != 0 ||
      logits->dims(2).offset() != static_cast<int64_t>(g.vocab()) || g.vocab() < 1)
    return generation_invalid("logits '" + g.logits() + "' must be [1, S, vocab " +
                              std::to_string(g.vocab()) + "]");
  const schema::SamplingKernel& k = g.sampling();
  if (k.logits_dtype() != logits->dtype())
    return generation_invalid("the sampling kernel reads " +
                              std::string(dtype_name(static_cast<DType>(k.logits_dtype()))) +
                              " logits, the output is " +
                              std::string(dtype_name(static_cast<DType>(logits->dtype()))));
  if (k.kernel() >= static_cast<uint32_t>(m.kernels_size()) ||
      m.kernels(static_cast<int>(k.kernel())).specialised_size() != 0)
    return generation_invalid("sampling kernel index " + std::to_string(k.kernel()) +
                              " is not a general kernel of the module");
  if (k.block() < 32 || k.block() > 1024 || k.block() % 32 != 0)
    return generation_invalid("sampling block " + std::to_string(k.block()) +
                              " is not a multiple of 32 in "
                              "[32, 1024]");
  if (k.grid() < 1 || k.grid() > 65535 || k.grid() > m.config().max_size())
    return generation_invalid("sampling grid " + std::to_string(k.grid()) +
                              " is outside [1, max_size]");
  // The parameters the runtime passes (schemas/manifest.proto, SamplingKernel), against the
  // signature the kernel's symbol carries; the logits extent against the logits buffer.
  const std::string& symbol = m.kernels(static_cast<int>(k.kernel())).symbol();
  Result<cache::KernelSymbolParts> parts = cache::kernel_symbol_parse(symbol);
  if (!parts.ok()) return generation_invalid("sampling kernel: " + parts.status().message());
  const std::string got = cache::kernel_signature_encode(parts->signature);
  std::string kinds;
  for (const auto& p : parts->signature.params) kinds += static_cast<char>(p.kind);
  if (kinds != "rlrrrrrrwl" || !parts->candidate.empty())
    return generation_invalid(
        "sampling kernel '" + symbol + "' has parameters '" + got +
        "'; the runtime passes 'rlrrrrrrwl' (logits, row_stride, temperature, top_k, "
        "top_p, seed, step, active_rows, tokens, S)");
  if (parts->signature.params[0].extent)
    return buffer_extent_check(m, logits->buffer(), *parts->signature.params[0].extent,
                               "generation: sampling kernel '" + symbol + "': logits");
  return Status::ok_status();
}

}  // namespace kiln::runtime
