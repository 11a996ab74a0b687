#include "compiler/backend/artifact_write.h"

#include <fmt/format.h>

#include <algorithm>

#include "cache/artifact_publish.h"
#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lowering.h"
#include "runtime/graph_mode_schema.h"

namespace kiln::compiler {
namespace {

constexpr char kWeightsFile[] = "weights.bin";

std::string module_cubin_path(size_t module, const std::string& arch) {
  return fmt::format("kernels/module{}.{}.cubin", module, arch);
}

void set_dim(schema::DimExpr* out, const ir::DimExpr& d) {
  out->set_coef(d.coef);
  out->set_offset(d.offset);
}

schema::GemmEpilogue epilogue_to_schema(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return schema::GEMM_EPILOGUE_NONE;
    case Epilogue::kBias:
      return schema::GEMM_EPILOGUE_BIAS;
    case Epilogue::kRelu:
      return schema::GEMM_EPILOGUE_RELU;
    case Epilogue::kBiasRelu:
      return schema::GEMM_EPILOGUE_BIAS_RELU;
    case Epilogue::kGelu:
      return schema::GEMM_EPILOGUE_GELU;
    case Epilogue::kBiasGelu:
      return schema::GEMM_EPILOGUE_BIAS_GELU;
  }
  return schema::GEMM_EPILOGUE_UNSPECIFIED;
}

// The GEMM's compute mode from its data type: 16-bit data accumulates in fp32; f32 data uses
// TF32 tensor cores only when the config says tf32.
schema::GemmCompute gemm_compute(DType data, Precision precision) {
  if (data == DType::kF16) return schema::GEMM_COMPUTE_F16;
  if (data == DType::kBF16) return schema::GEMM_COMPUTE_BF16;
  return precision == Precision::kTF32 ? schema::GEMM_COMPUTE_TF32 : schema::GEMM_COMPUTE_F32;
}

class ManifestBuilder {
 public:
  explicit ManifestBuilder(const ArtifactInputs& in) : in_(in), g_(*in.graph) {}

  Result<schema::Manifest> build() {
    m_.set_model_name(g_.name);
    *m_.mutable_factors() = in_.factors;
    *m_.mutable_config() = config_to_schema(*in_.config);
    m_.set_arena_bytes(in_.memory->arena_bytes);
    m_.set_gemm_workspace_bytes(kGemmWorkspaceBytes);
    m_.set_kernels_wait_for_dependencies(true);  // kernel_codegen's kKernelEnter
    if (!in_.memory->weights.empty()) {
      m_.set_weights_file(kWeightsFile);
      m_.set_weights_bytes(in_.memory->weights.size());
    }
    for (int v : g_.inputs) KILN_RETURN_IF_ERROR(add_io(v, m_.add_inputs()));
    for (int v : g_.outputs) KILN_RETURN_IF_ERROR(add_io(v, m_.add_outputs()));
    KILN_RETURN_IF_ERROR(add_modules());
    if (in_.generation != nullptr) add_generation(*in_.generation);
    const auto& pieces = in_.program->pieces;
    const auto& steps = in_.program->steps;
    for (size_t p = 0; p < std::max<size_t>(pieces.size(), 1); ++p) {
      schema::Piece* piece = m_.add_pieces();
      const size_t first = pieces.empty() ? 0 : pieces[p].first_step;
      const size_t last = p + 1 < pieces.size() ? pieces[p + 1].first_step : steps.size();
      if (!pieces.empty()) piece->set_is_attention(pieces[p].is_attention);
      for (size_t i = first; i < last; ++i) {
        if (const auto* k = std::get_if<KernelLaunch>(&steps[i])) {
          KILN_RETURN_IF_ERROR(add_kernel_step(*k, piece->add_steps()->mutable_kernel()));
        } else {
          schema::GemmStep* gemm = piece->add_steps()->mutable_gemm();
          KILN_RETURN_IF_ERROR(add_gemm_step(std::get<GemmLaunch>(steps[i]), gemm));
          if (auto it = in_.gemm_algos.find(i); it != in_.gemm_algos.end())
            for (const schema::GemmAlgo& a : it->second) *gemm->add_algos() = a;
        }
      }
    }
    return std::move(m_);
  }

 private:
  Result<uint32_t> buffer(int v) {
    v = resolve_alias(*in_.program, v);
    if (auto it = buffer_of_.find(v); it != buffer_of_.end()) return it->second;
    const ir::Value& val = g_.values[v];
    schema::Buffer* b = m_.add_buffers();
    b->set_name(val.name);
    b->set_dtype(static_cast<schema::DType>(val.dtype));
    for (const auto& d : val.shape) set_dim(b->add_dims(), d);
    if (auto it = in_.memory->arena_offset.find(v); it != in_.memory->arena_offset.end()) {
      b->set_location(schema::Buffer::LOCATION_ARENA);
      b->set_offset(it->second);
    } else if (auto w = in_.memory->weight_offset.find(v); w != in_.memory->weight_offset.end()) {
      b->set_location(schema::Buffer::LOCATION_WEIGHTS);
      b->set_offset(w->second);
    } else {
      return internal_error(fmt::format("tensor '{}' has no planned memory", val.name));
    }
    const uint32_t index = static_cast<uint32_t>(m_.buffers_size() - 1);
    buffer_of_[v] = index;
    return index;
  }

  Status add_io(int v, schema::IoBinding* io) {
    const ir::Value& val = g_.values[v];
    io->set_name(val.name);
    io->set_dtype(static_cast<schema::DType>(val.dtype));
    io->set_size_axis(-1);
    for (size_t a = 0; a < val.shape.size(); ++a) {
      set_dim(io->add_dims(), val.shape[a]);
      if (val.shape[a].is_constant()) continue;
      if (io->size_axis() >= 0)
        return unimplemented(fmt::format("tensor '{}' {}: more than one axis depends on the size",
                                         val.name, ir::shape_to_string(val.shape)));
      io->set_size_axis(static_cast<int32_t>(a));
    }
    KILN_ASSIGN_OR_RETURN(uint32_t b, buffer(v));
    io->set_buffer(b);
    return Status::ok_status();
  }

  // Module i holds kernel i of the program (its general entry and specialisations), then each
  // tuned kernel has one (codegen_modules' order).
  Status add_modules() {
    const std::vector<SizedKernel> tuned = tuned_kernels(*in_.program);
    if (in_.modules.size() != in_.program->kernels.size() + tuned.size())
      return internal_error(fmt::format("{} modules for {} kernels and {} tuned kernels",
                                        in_.modules.size(), in_.program->kernels.size(),
                                        tuned.size()));
    for (size_t i = 0; i < in_.modules.size(); ++i) {
      schema::Module* mod = m_.add_modules();
      for (const auto& [arch, cubin] : in_.modules[i].cubins) {
        schema::Module::Cubin* c = mod->add_cubins();
        c->set_arch(arch);
        c->set_path(module_cubin_path(i, arch));
      }
    }
    uint32_t module = 0;
    for (const KernelDef& k : in_.program->kernels) {
      schema::Kernel* general = m_.add_kernels();
      general->set_symbol(k.symbol);
      general->set_module(module);
      for (int64_t s : in_.config->compile_sizes) add_specialised(k.symbol, s, module);
      ++module;
    }
    // Tuned candidates after every general kernel and its specialisations.
    for (const SizedKernel& k : tuned) {
      for (int64_t s : k.sizes) add_specialised(k.def.symbol, s, module);
      ++module;
    }
    return Status::ok_status();
  }

  // The manifest index of general kernel `k` (each is followed by its specialisations).
  uint32_t general_index(int k) const {
    return static_cast<uint32_t>(k) * (1 + static_cast<uint32_t>(in_.config->compile_sizes.size()));
  }

  void add_generation(const GenerationArtifact& a) {
    schema::Generation* g = m_.mutable_generation();
    g->set_num_layers(static_cast<uint32_t>(a.shape.layers));
    g->set_num_kv_heads(static_cast<uint32_t>(a.shape.kv_heads));
    g->set_head_dim(static_cast<uint32_t>(a.shape.head_dim));
    g->set_dtype(static_cast<schema::DType>(a.shape.kv_dtype));
    g->set_block_size(static_cast<uint32_t>(a.kv.block_size));
    g->set_max_blocks(static_cast<uint64_t>(a.kv.max_blocks));
    g->set_memory_fraction(a.kv.memory_fraction);
    g->set_max_sequences(static_cast<uint32_t>(a.kv.max_sequences));
    g->set_max_seq_len(static_cast<uint32_t>(a.kv.max_seq_len));
    g->set_max_blocks_per_seq(
        static_cast<uint32_t>((a.kv.max_seq_len + a.kv.block_size - 1) / a.kv.block_size));
    g->set_input_ids(a.shape.input_ids);
    g->set_position_ids(a.shape.position_ids);
    g->set_attention_mask(a.shape.attention_mask);
    g->set_logits(a.shape.logits);
    g->set_vocab(static_cast<uint32_t>(a.shape.vocab));
    schema::SamplingKernel* k = g->mutable_sampling();
    k->set_kernel(general_index(a.sampling_kernel));
    k->set_block(a.sampling_block);
    k->set_grid(static_cast<uint32_t>(a.sampling_grid));
    k->set_logits_dtype(static_cast<schema::DType>(a.shape.logits_dtype));
  }

  void add_specialised(const std::string& symbol, int64_t size, uint32_t module) {
    schema::Kernel* spec = m_.add_kernels();
    spec->set_symbol(specialised_symbol(symbol, size));
    spec->set_module(module);
    spec->set_specialised_size(static_cast<uint32_t>(size));
    kernel_index_[spec->symbol()] = static_cast<uint32_t>(m_.kernels_size() - 1);
  }

  // The decisions of `k`, one TunedLaunch per decided compile size.
  Status add_tuned(const KernelLaunch& k, schema::KernelStep* out) {
    const KernelDef& def = in_.program->kernels[static_cast<size_t>(k.kernel)];
    for (const auto& [size, choice] : k.tuned) {
      schema::TunedLaunch* t = out->add_tuned();
      t->set_size(static_cast<uint32_t>(size));
      std::string symbol = specialised_symbol(def.symbol, size);
      ir::DimExpr work = k.work, grid_y = k.grid_y;
      uint32_t work_per_block = k.work_per_block, block = k.block, shared = k.shared_bytes;
      t->set_config(k.config);
      if (choice.candidate >= 0) {
        if (choice.candidate >= static_cast<int>(k.candidates.size()))
          return internal_error(fmt::format("step '{}': tuned candidate {} of {}", k.nodes,
                                            choice.candidate, k.candidates.size()));
        const LaunchCandidate& c = k.candidates[static_cast<size_t>(choice.candidate)];
        symbol = specialised_symbol(candidate_symbol(def, c), size);
        work = c.work;
        grid_y = c.grid_y;
        work_per_block = c.work_per_block;
        block = c.block;
        shared = c.shared_bytes;
        t->set_config(c.config);
      }
      auto it = kernel_index_.find(symbol);
      if (it == kernel_index_.end())
        return internal_error(fmt::format("step '{}': tuned kernel '{}' for size {} is not in "
                                          "the module (is {} a compile size?)",
                                          k.nodes, symbol, size, size));
      t->set_kernel(it->second);
      set_dim(t->mutable_grid()->mutable_work(), work);
      t->mutable_grid()->set_work_per_block(work_per_block);
      if (grid_y != ir::DimExpr::constant(1)) set_dim(t->mutable_grid()->mutable_y(), grid_y);
      t->set_block(block);
      t->set_shared_bytes(shared);
      t->set_source(choice.source);
      t->set_ms(choice.ms);
      t->set_default_ms(choice.default_ms);
    }
    return Status::ok_status();
  }

  Status add_kernel_step(const KernelLaunch& k, schema::KernelStep* out) {
    out->set_node(k.nodes);
    out->set_kernel(general_index(k.kernel));
    for (size_t i = 0; i < in_.config->compile_sizes.size(); ++i)
      (*out->mutable_specialised())[static_cast<uint32_t>(in_.config->compile_sizes[i])] =
          general_index(k.kernel) + 1 + static_cast<uint32_t>(i);
    set_dim(out->mutable_grid()->mutable_work(), k.work);
    out->mutable_grid()->set_work_per_block(k.work_per_block);
    if (k.grid_y != ir::DimExpr::constant(1)) set_dim(out->mutable_grid()->mutable_y(), k.grid_y);
    out->set_block(k.block);
    out->set_shared_bytes(k.shared_bytes);
    KILN_RETURN_IF_ERROR(add_tuned(k, out));
    if (k.run_sizes) {
      out->set_gated(true);
      for (int64_t s : *k.run_sizes) out->add_run_sizes(static_cast<uint32_t>(s));
    }
    out->set_after_cublaslt(k.after_cublaslt);
    out->set_before_cublaslt(k.before_cublaslt);
    out->set_skip_on_decode(k.skip_on_decode);
    out->set_decode_only(k.decode_only);
    for (int64_t s : k.route_sizes) out->add_route_sizes(static_cast<uint32_t>(s));
    for (const KernelArgRef& a : k.args) {
      schema::KernelArg* arg = out->add_args();
      switch (a.kind) {
        case KernelArgRef::Kind::kSize:
          arg->set_size(true);
          break;
        case KernelArgRef::Kind::kRealSize:
          arg->set_real_size_ptr(true);
          break;
        case KernelArgRef::Kind::kKv:
          arg->mutable_kv()->set_kind(static_cast<schema::KvArg::Kind>(a.kv));
          if (a.kv == KvRef::kKeyCache || a.kv == KvRef::kValueCache)
            arg->mutable_kv()->set_layer(static_cast<uint32_t>(a.i64));
          break;
        case KernelArgRef::Kind::kI64:
          arg->set_i64(a.i64);
          break;
        case KernelArgRef::Kind::kF32:
          arg->set_f32(a.f32);
          break;
        case KernelArgRef::Kind::kValue: {
          KILN_ASSIGN_OR_RETURN(uint32_t b, buffer(a.value));
          arg->set_buffer(b);
          break;
        }
      }
    }
    return Status::ok_status();
  }

  Status add_gemm_step(const GemmLaunch& gm, schema::GemmStep* out) {
    out->set_node(gm.nodes);
    KILN_ASSIGN_OR_RETURN(uint32_t a, buffer(gm.a));
    KILN_ASSIGN_OR_RETURN(uint32_t b, buffer(gm.b));
    KILN_ASSIGN_OR_RETURN(uint32_t d, buffer(gm.d));
    out->set_a(a);
    out->set_b(b);
    out->set_d(d);
    if (gm.bias >= 0) {
      KILN_ASSIGN_OR_RETURN(uint32_t bias, buffer(gm.bias));
      out->set_has_bias(true);
      out->set_bias(bias);
    }
    set_dim(out->mutable_m(), gm.m);
    set_dim(out->mutable_n(), gm.n);
    set_dim(out->mutable_k(), gm.k);
    out->set_trans_a(gm.trans_a);
    out->set_trans_b(gm.trans_b);
    out->set_alpha(gm.alpha);
    out->set_epilogue(epilogue_to_schema(gm.epilogue));
    if (gm.c >= 0) {
      KILN_ASSIGN_OR_RETURN(uint32_t c, buffer(gm.c));
      out->set_has_c(true);
      out->set_c(c);
      out->set_beta(gm.beta);
    }
    out->set_compute(gemm_compute(g_.values[gm.a].dtype, in_.config->precision));
    set_dim(out->mutable_batch(), gm.batch);
    set_dim(out->mutable_stride_a(), gm.stride_a);
    set_dim(out->mutable_stride_b(), gm.stride_b);
    set_dim(out->mutable_stride_d(), gm.stride_d);
    for (int64_t s : gm.skinny_sizes) out->add_skinny_sizes(static_cast<uint32_t>(s));
    return Status::ok_status();
  }

  const ArtifactInputs& in_;
  const ir::Graph& g_;
  schema::Manifest m_;
  std::map<int, uint32_t> buffer_of_;
  std::map<std::string, uint32_t> kernel_index_;  // manifest kernel index by symbol
};

}  // namespace

schema::CompileConfig config_to_schema(const CompileConfig& c) {
  schema::CompileConfig out;
  out.set_size_dim(c.size_dim);
  for (const auto& [k, v] : c.dims) (*out.mutable_dims())[k] = v;
  out.set_max_size(static_cast<uint32_t>(c.max_size));
  out.set_precision(std::string(precision_name(c.precision)));
  for (const auto& t : c.targets) out.add_targets(t);
  out.set_mode(runtime::graph_mode_to_schema(c.mode));
  for (int64_t s : c.compile_sizes) out.add_compile_sizes(static_cast<uint32_t>(s));
  for (int64_t s : c.capture_sizes) out.add_cudagraph_capture_sizes(static_cast<uint32_t>(s));
  out.set_compilation_level(static_cast<uint32_t>(c.level));
  return out;
}

Result<schema::Manifest> manifest_build(const ArtifactInputs& in) {
  return ManifestBuilder(in).build();
}

Result<std::filesystem::path> artifact_write(const ArtifactInputs& in,
                                             const std::filesystem::path& cache_root,
                                             const std::string& key, std::string* index_warning) {
  KILN_ASSIGN_OR_RETURN(schema::Manifest manifest, manifest_build(in));
  KILN_ASSIGN_OR_RETURN(auto stage, cache::ArtifactStage::begin(cache_root, key));
  if (in.signing_key != nullptr) stage->sign_with(*in.signing_key);
  if (!in.memory->weights.empty())
    KILN_RETURN_IF_ERROR(
        stage->add_file(kWeightsFile, in.memory->weights, schema::FILE_ROLE_WEIGHTS));
  for (size_t i = 0; i < in.modules.size(); ++i) {
    for (const auto& [arch, bytes] : in.modules[i].cubins)
      KILN_RETURN_IF_ERROR(
          stage->add_file(module_cubin_path(i, arch), bytes, schema::FILE_ROLE_CUBIN));
    if (in.dump_sources) {
      const std::string& source = in.modules[i].source;
      std::span<const uint8_t> text(reinterpret_cast<const uint8_t*>(source.data()), source.size());
      KILN_RETURN_IF_ERROR(
          stage->add_file(fmt::format("sources/module{}.cu", i), text, schema::FILE_ROLE_SOURCE));
    }
  }
  KILN_ASSIGN_OR_RETURN(std::filesystem::path dir, stage->publish(std::move(manifest)));
  if (index_warning != nullptr) *index_warning = stage->index_warning();
  return dir;
}

}  // namespace kiln::compiler
