// kv_paged: every KV-cache export (tests/models/kv, with and without a position_ids input)
// compiled for generation — the attention of each layer becomes kiln.PagedAttention, the presents
// and the attention mask go, the inputs are input_ids and position_ids, the program's prefill of
// one prompt (the reference's reading of paged attention) still computes onnxruntime's logits,
// and so does its prefill of the prompt and the first generated token (onnxruntime's first decode
// step), with the positions read from position_ids; the artifact carries the generation section
// and validates; and models that cannot generate are refused with a reason.
#include "compiler/passes/kv_paged.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "compiler/backend/artifact_write.h"
#include "compiler/config.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/ops/op_util.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/passes/paged_rotary.h"
#include "compiler/pipeline.h"
#include "compiler/reference/reference_interpreter.h"
#include "onnx/onnx_pb.h"
#include "runtime/manifest_validate.h"
#include "runtime/size_gate.h"
#include "tests/support/greedy_reference.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"
#include "tests/support/temp_dir.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

fs::path kv_root() { return kiln::testing::source_root() / "tests/models/kv"; }

// input_ids' [batch, sequence] dim names.
std::pair<std::string, std::string> ids_dims(const fs::path& model) {
  onnx::ModelProto m;
  std::ifstream in(model, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in)) << model;
  for (const auto& i : m.graph().input())
    if (i.name() == "input_ids") {
      const auto& d = i.type().tensor_type().shape();
      return {d.dim(0).dim_param(), d.dim(1).dim_param()};
    }
  return {};
}

// `decode_append`: kv_cache.decode_append ("separate", the default, or "in_attention").
CompileConfig generation_config(const fs::path& model, const std::string& precision = "fp32",
                                int64_t batch = 1, const std::string& decode_append = "separate") {
  const auto [b, s] = ids_dims(model);
  const std::string yaml = "size_dim: " + s + "\ndims: {" + b + ": " + std::to_string(batch) +
                           "}\nmax_size: 32\nprecision: " + precision +
                           "\ncompilation: {cudagraph_capture_sizes: [1, 8, 32]}\n"
                           "autotune: {enabled: off}\n"
                           "kv_cache: {block_size: 16, max_blocks: 64, max_sequences: 8, "
                           "max_seq_len: 128, decode_append: " +
                           decode_append + "}\n";
  Result<CompileConfig> c = config_parse(yaml, "kiln.yaml");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : CompileConfig{};
}

// The export imported as a generation program's prefill step, before any pass.
Result<ir::Graph> generation_import(const fs::path& model, const CompileConfig& c) {
  ImportOptions opts{c.size_dim, c.dims};
  opts.max_size = c.max_size;
  opts.generation = true;
  return onnx_import_file(model, opts);
}

Result<ir::Graph> generation_graph(const fs::path& model, const CompileConfig& c) {
  KILN_ASSIGN_OR_RETURN(ir::Graph g, generation_import(model, c));
  KILN_RETURN_IF_ERROR(front_end_passes_for(g, c));
  return g;
}

struct Prefill {
  std::vector<int64_t> prompt;
  std::vector<double> last_logits;  // onnxruntime, the prefill step's last position
  int64_t first_token = 0;          // the greedy loop's first token
  std::vector<double> next_logits;  // onnxruntime, the first decode step (that token's logits)
};

std::vector<Prefill> prefills(const fs::path& dir) {
  std::vector<Prefill> out;
  for (const kiln::testing::GreedyReference& r :
       kiln::testing::greedy_references(dir / "greedy.json"))
    if (!r.tokens.empty() && r.step_logits.size() >= 2)
      out.push_back({r.prompt, r.step_logits[0], r.tokens[0], r.step_logits[1]});
  return out;
}

// The reference's run of a generation program over `ids` at `positions`: the last token's logits.
Result<RefTensor> last_logits(const ir::Graph& g, const std::vector<int64_t>& ids,
                              const std::vector<int64_t>& positions) {
  const auto n = static_cast<int64_t>(ids.size());
  std::map<std::string, RefTensor> in;
  in["input_ids"] = ref_make(DType::kI64, {1, n});
  in["position_ids"] = ref_make(DType::kI64, {1, n});
  for (size_t i = 0; i < ids.size(); ++i) {
    in["input_ids"].data[i] = static_cast<double>(ids[i]);
    in["position_ids"].data[i] = static_cast<double>(positions[i]);
  }
  KILN_ASSIGN_OR_RETURN(auto out, reference_run(g, n, in));
  const RefTensor& logits = out.at("logits");
  RefTensor last = ref_make(DType::kF32, {128});
  for (size_t v = 0; v < 128; ++v)
    last.data[v] = logits.data[static_cast<size_t>((n - 1) * 128) + v];
  return last;
}

RefTensor vocab_tensor(const std::vector<double>& x) {
  RefTensor t = ref_make(DType::kF32, {128});
  for (size_t v = 0; v < 128 && v < x.size(); ++v) t.data[v] = x[v];
  return t;
}

std::vector<int64_t> iota(size_t n) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i);
  return v;
}

TEST(KvPaged, EveryKvExportBecomesAGenerationProgram) {
  int models = 0;
  for (const std::string& name : kiln::testing::model_names(kv_root())) {
    ++models;
    const fs::path model = kv_root() / name / "model.onnx";
    const CompileConfig c = generation_config(model);
    Result<ir::Graph> g = generation_graph(model, c);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
    int paged = 0, plain = 0;
    for (const ir::Node& n : g->nodes) {
      paged += n.domain == "kiln" && n.op == "PagedAttention";
      plain += n.domain == "kiln" && n.op == "Attention";
    }
    EXPECT_EQ(paged, 2) << name;
    EXPECT_EQ(plain, 0) << name;
    std::vector<std::string> inputs, outputs;
    for (int v : g->inputs) inputs.push_back(g->values[v].name);
    for (int v : g->outputs) outputs.push_back(g->values[v].name);
    EXPECT_EQ(inputs, (std::vector<std::string>{"input_ids", "position_ids"})) << name;
    EXPECT_EQ(outputs, (std::vector<std::string>{"logits"})) << name;
    Result<GenerationShape> shape = generation_shape(*g);
    ASSERT_TRUE(shape.ok()) << name << ": " << shape.status().to_string();
    EXPECT_EQ(shape->layers, 2) << name;
    // GQA: Llama's one KV head (the opset-18 dynamo export's K, repeated by repeat_kv and
    // reshaped to 3-D and back, included: simplify_attention reads it before the repeat).
    // gqa_ort_kv*: onnxruntime's GroupQueryAttention, 2 query heads over 1 KV head.
    const bool gqa = name.starts_with("llama") || name.starts_with("gqa_ort");
    EXPECT_EQ(shape->kv_heads, gqa ? 1 : 2) << name;
    EXPECT_EQ(shape->head_dim, 16) << name;
    EXPECT_EQ(shape->vocab, 128) << name;
    EXPECT_TRUE(shape->attention_mask.empty()) << name;
    // One prompt's prefill from position 0: onnxruntime's logits at its last position.
    const std::vector<Prefill> cases = prefills(kv_root() / name);
    ASSERT_EQ(cases.size(), 2u) << name;
    for (const Prefill& p : cases) {
      Result<RefTensor> last = last_logits(*g, p.prompt, iota(p.prompt.size()));
      ASSERT_TRUE(last.ok()) << name << ": " << last.status().to_string();
      EXPECT_TRUE(
          kiln::testing::tensors_close(*last, vocab_tensor(p.last_logits), 1e-3, 1e-4, name));
    }
  }
  // ts17, dynamo18 and dynamo23 (ONNX Attention), with and without positions; and
  // GroupQueryAttention's two past/present layouts (make_gqa_kv_decoder.py).
  EXPECT_EQ(models, 14);
}

// The first decode step without a GPU: the program's prefill of the prompt and the greedy loop's
// first token, at positions 0..n, computes what onnxruntime's step over the cache computed for
// that token at position n. Other positions change the logits: the program reads position_ids
// (an export without that input included), not the token's index in the step.
TEST(KvPaged, PrefillOfPromptAndFirstTokenIsTheFirstDecodeStep) {
  int models = 0, nopos = 0;
  for (const std::string& name : kiln::testing::model_names(kv_root())) {
    ++models;
    nopos += name.ends_with("_nopos");
    const fs::path model = kv_root() / name / "model.onnx";
    Result<ir::Graph> g = generation_graph(model, generation_config(model));
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
    for (const ir::Node& n : g->nodes) EXPECT_NE(n.op, "Range") << name << ": " << n.name;
    for (const Prefill& p : prefills(kv_root() / name)) {
      std::vector<int64_t> ids = p.prompt;
      ids.push_back(p.first_token);
      const RefTensor want = vocab_tensor(p.next_logits);
      Result<RefTensor> last = last_logits(*g, ids, iota(ids.size()));
      ASSERT_TRUE(last.ok()) << name << ": " << last.status().to_string();
      EXPECT_TRUE(kiln::testing::tensors_close(*last, want, 1e-3, 1e-4, name + " decode"));
      // Every token at position 0: other logits (a program that ignored position_ids would
      // repeat its float64 result exactly; the tiny random Llama's rotary moves them by ~1e-4).
      Result<RefTensor> zero = last_logits(*g, ids, std::vector<int64_t>(ids.size(), 0));
      ASSERT_TRUE(zero.ok()) << name << ": " << zero.status().to_string();
      double diff = 0;
      for (size_t v = 0; v < 128; ++v)
        diff = std::max(diff, std::abs(zero->data[v] - last->data[v]));
      EXPECT_GT(diff, 1e-6) << name << ": the logits do not depend on position_ids";
    }
  }
  EXPECT_EQ(models, 14);
  EXPECT_EQ(nopos, 6);
}

// passes/paged_rotary (run by front_end_passes_for after kv_paged): the Llama exports' rotary
// moves into their attention — each layer's kiln.PagedAttention takes cos and sin, no kiln.Rotary
// is left — and the program computes what it computed before the fold; GPT-2 has no rotary and
// keeps three-input attention.
TEST(KvPaged, RotaryFoldsIntoPagedAttention) {
  int folded_models = 0;
  for (const std::string& name : kiln::testing::model_names(kv_root())) {
    const fs::path model = kv_root() / name / "model.onnx";
    const CompileConfig c = generation_config(model);
    Result<ir::Graph> before = generation_import(model, c);
    ASSERT_TRUE(before.ok()) << name << ": " << before.status().to_string();
    ASSERT_TRUE(front_end_passes(*before, c.max_size).ok()) << name;
    ASSERT_TRUE(kv_paged_rewrite(*before).ok()) << name;
    ir::Graph after = *before;
    ASSERT_TRUE(fold_paged_rotary(after).ok()) << name;
    int with_tables = 0;
    for (const ir::Node& n : after.nodes)
      with_tables += n.domain == "kiln" && n.op == "PagedAttention" && n.inputs.size() == 5;
    const int rotaries = kiln::testing::count_ops(*before, "Rotary", "kiln");
    if (name.starts_with("gpt2")) {
      EXPECT_EQ(rotaries, 0) << name;
      EXPECT_EQ(with_tables, 0) << name;
      continue;
    }
    if (name.starts_with("gqa_ort")) continue;  // no rotary in these decoders
    EXPECT_EQ(rotaries, 4) << name;
    EXPECT_EQ(with_tables, 2) << name;
    // Both layers read the same tables through one pair of views (reshaped, and later cast,
    // once per step rather than once per layer).
    std::set<std::pair<int, int>> tables;
    for (const ir::Node& n : after.nodes)
      if (n.op == "PagedAttention" && n.inputs.size() == 5)
        tables.insert({n.inputs[3], n.inputs[4]});
    EXPECT_EQ(tables.size(), 1u) << name;
    EXPECT_EQ(kiln::testing::count_ops(after, "Rotary", "kiln"), 0) << name;
    EXPECT_TRUE(kiln::testing::graphs_equivalent(*before, after, {1, 3, 7})) << name;
    folded_models += with_tables == 2;
    // The whole front end then fuses each layer's Q, K and V projections (passes/fuse_qkv):
    // the attention reads all three through views of one Split.
    Result<ir::Graph> full = generation_graph(model, c);
    ASSERT_TRUE(full.ok()) << name << ": " << full.status().to_string();
    for (const ir::Node& n : full->nodes) {
      if (n.op != "PagedAttention") continue;
      std::set<int> sources;
      for (int i = 0; i < 3; ++i) {
        int v = n.inputs[static_cast<size_t>(i)];
        while (full->values[v].producer >= 0 &&
               (full->nodes[full->values[v].producer].op == "Reshape" ||
                full->nodes[full->values[v].producer].op == "Transpose"))
          v = full->nodes[full->values[v].producer].inputs[0];
        const int p = full->values[v].producer;
        EXPECT_TRUE(p >= 0 && full->nodes[p].op == "Split") << name << " input " << i;
        sources.insert(full->values[v].producer);
      }
      EXPECT_EQ(sources.size(), 1u) << name << ": Q, K and V from one Split";
      EXPECT_GE(*sources.begin(), 0) << name;
    }
  }
  // ts17, dynamo18 and dynamo23 (ONNX RotaryEmbedding, whose Q and K tables are computed
  // separately), with and without position_ids.
  EXPECT_EQ(folded_models, 6);
}

// The runtime's validation refuses a generation section or KV argument that was tampered with,
// naming the field.
void expect_tampering_refused(const schema::Manifest& good) {
  const auto refused = [&](const char* what, const std::function<void(schema::Manifest&)>& edit,
                           const std::string& says, bool program) {
    schema::Manifest m = good;
    edit(m);
    const Status s = program ? runtime::program_validate(m) : runtime::generation_validate(m);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find(says), std::string::npos) << what << ": " << s.message();
  };
  const auto g = [](schema::Manifest& m) { return m.mutable_generation(); };
  refused(
      "block size", [&](schema::Manifest& m) { g(m)->set_block_size(24); }, "block_size 24", false);
  refused(
      "table width", [&](schema::Manifest& m) { g(m)->set_max_blocks_per_seq(1); },
      "max_blocks_per_seq 1", false);
  refused(
      "input name", [&](schema::Manifest& m) { g(m)->set_input_ids("nope"); },
      "input_ids names 'nope'", false);
  refused(
      "vocabulary", [&](schema::Manifest& m) { g(m)->set_vocab(129); }, "vocab 129", false);
  refused(
      "sampling kernel",
      [&](schema::Manifest& m) { g(m)->mutable_sampling()->set_kernel(1u << 20); },
      "sampling kernel index", false);
  refused(
      "logits dtype",
      [&](schema::Manifest& m) { g(m)->mutable_sampling()->set_logits_dtype(schema::DTYPE_F16); },
      "the sampling kernel reads", false);
  const auto first_kv = [](schema::Manifest& m) -> schema::KvArg* {
    for (auto& piece : *m.mutable_pieces())
      for (auto& step : *piece.mutable_steps()) {
        if (!step.has_kernel()) continue;  // mutable_kernel() would make a GEMM step a kernel
        for (auto& a : *step.mutable_kernel()->mutable_args())
          if (a.value_case() == schema::KernelArg::kKv) return a.mutable_kv();
      }
    return nullptr;
  };
  refused(
      "layer",
      [&](schema::Manifest& m) {
        schema::KvArg* kv = first_kv(m);
        kv->set_kind(schema::KvArg::KIND_KEY_CACHE);
        kv->set_layer(2);
      },
      "KV-cache layer 2 is out of range (2 layers)", true);
  refused(
      "kind",
      [&](schema::Manifest& m) { first_kv(m)->set_kind(static_cast<schema::KvArg::Kind>(9)); },
      "unknown KV-cache pointer kind 9", true);
  refused(
      "no section", [&](schema::Manifest& m) { m.clear_generation(); },
      "without a generation section", true);
  // Route gating: the append and plain split steps skipped on the decode route, and the
  // decode_only split that does their work there, at the same sizes.
  const auto steps_where = [](schema::Manifest& m, auto pred) {
    std::vector<schema::KernelStep*> out;
    for (auto& piece : *m.mutable_pieces())
      for (auto& step : *piece.mutable_steps())
        if (step.has_kernel() && pred(step.kernel())) out.push_back(step.mutable_kernel());
    return out;
  };
  const auto skipped = [](const schema::KernelStep& s) { return s.skip_on_decode(); };
  const auto decode_only = [](const schema::KernelStep& s) { return s.decode_only(); };
  schema::Manifest copy = good;
  ASSERT_EQ(steps_where(copy, skipped).size(), 4u) << "the append and plain split of each layer";
  ASSERT_EQ(steps_where(copy, decode_only).size(), 2u) << "the fresh split of each layer";
  ASSERT_GE(steps_where(copy, decode_only)[0]->route_sizes_size(), 2);
  refused(
      "no decode_only step",
      [&](schema::Manifest& m) {
        for (auto* k : steps_where(m, decode_only)) k->set_decode_only(false);
      },
      "no later decode_only step of the piece has the same route_sizes", true);
  refused(
      "route sizes differ",
      [&](schema::Manifest& m) {
        for (auto* k : steps_where(m, decode_only)) k->mutable_route_sizes()->RemoveLast();
      },
      "no later decode_only step of the piece has the same route_sizes", true);
  refused(
      "no route sizes",
      [&](schema::Manifest& m) { steps_where(m, skipped)[0]->clear_route_sizes(); },
      "skip_on_decode without route_sizes", true);
  refused(
      "route sizes out of order",
      [&](schema::Manifest& m) {
        steps_where(m, skipped)[0]->mutable_route_sizes()->SwapElements(0, 1);
      },
      "route_sizes: sizes are not ascending and unique", true);
  refused(
      "both flags", [&](schema::Manifest& m) { steps_where(m, skipped)[0]->set_decode_only(true); },
      "skip_on_decode and decode_only on one step", true);
  refused(
      "sizes without a flag",
      [&](schema::Manifest& m) {
        for (auto& piece : *m.mutable_pieces())
          for (auto& step : *piece.mutable_steps())
            if (!piece.is_attention() && step.has_kernel()) {
              step.mutable_kernel()->add_route_sizes(1);
              return;
            }
      },
      "route_sizes without skip_on_decode or decode_only", true);
  refused(
      "skip in a compute piece",
      [&](schema::Manifest& m) {
        for (auto& piece : *m.mutable_pieces())
          for (auto& step : *piece.mutable_steps())
            if (!piece.is_attention() && step.has_kernel()) {
              step.mutable_kernel()->set_skip_on_decode(true);
              step.mutable_kernel()->add_route_sizes(1);
              return;
            }
      },
      "skip_on_decode on a step of a compute piece", true);
  refused(
      "route gating without generation", [&](schema::Manifest& m) { m.clear_generation(); },
      "skip_on_decode in a manifest without a generation section", true);
}

// The manifest of kv export `name` compiled GPU-less for generation (fp16 unless given).
Result<schema::Manifest> generation_manifest(const std::string& name,
                                             const std::string& decode_append = "separate",
                                             const std::string& precision = "fp16") {
  const fs::path model = kv_root() / name / "model.onnx";
  kiln::testing::TempDir cache;
  CompileRequest req{model, generation_config(model, precision, 1, decode_append), cache.path()};
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<CompiledModel> cm, compile_unpublished(req));
  return manifest_build(cm->inputs);
}

// A decode step's layer (from one attention piece to the next, at one token) runs in at most 7
// launches: the fused QKV GEMM (its RMSNorm or LayerNorm a prologue), the KV append, split +
// combine attention with the rotary inside, the O projection (+ residual), the gate/up GEMM
// with its gating (or the FC GEMM with its GELU), the down projection (+ residual). Where
// kv_cache.decode_append puts the append in the attention, the decode route's split kernel
// appends itself: 6 there (7 on the mixed route) — at every size with in_attention, at batches
// up to 4 with auto. Before the rotary fold, QKV fusion and the elementwise sink it was 18.
TEST(KvPaged, DecodeLayerRunsInAtMostSevenLaunchesSixWithTheAppendInTheAttention) {
  for (const char* name : {"llama_ts17_kv", "llama_dynamo23_kv_nopos", "gpt2_ts17_kv"})
    for (const std::string append : {"separate", "in_attention", "auto"}) {
      Result<schema::Manifest> m = generation_manifest(name, append);
      ASSERT_TRUE(m.ok()) << name << ": " << m.status().to_string();
      ASSERT_EQ(m->pieces_size(), 5) << name;  // compute, attention, compute, attention, compute
      ASSERT_TRUE(m->pieces(1).is_attention() && m->pieces(3).is_attention()) << name;
      const Status valid = runtime::program_validate(*m);
      ASSERT_TRUE(valid.ok()) << name << ": " << valid.to_string();
      // Launches at size p, gated steps as the runtime runs them (runtime/size_gate.h).
      const auto launches_in = [&](int from, int to, int64_t p, bool decode_route) {
        int launches = 0;
        for (int piece = from; piece < to; ++piece) {
          const auto& steps = m->pieces(piece).steps();
          for (int i = 0; i < steps.size(); ++i)
            launches +=
                steps.Get(i).has_gemm()
                    ? !runtime::gemm_step_is_skinny_at(steps.Get(i).gemm(), p)
                    : runtime::kernel_step_runs_at(steps, i, p) &&
                          runtime::kernel_step_on_route(steps.Get(i).kernel(), decode_route, p);
        }
        return launches;
      };
      const int layer = launches_in(1, 3, 1, true),
                step = launches_in(0, m->pieces_size(), 1, true);
      const int mixed_layer = launches_in(1, 3, 1, false);
      const bool inside = append != "separate";
      EXPECT_EQ(mixed_layer, 7) << name << " " << append;
      EXPECT_EQ(layer, inside ? 6 : 7)
          << name << " " << append << ": the append runs on the mixed route only";
      // The whole step: the two layers, plus the embedding, the rotary tables (a Llama's cos and
      // sin, each gathered from a compile-time table: passes/position_tables; GPT-2's position
      // embedding), the LM head with the final norm in it and the logits cast. It was 2 · layer
      // + 12 before the position tables (six launches computing the rotary tables, two casting
      // them) and the casts to the same dtype went.
      EXPECT_LE(step, 2 * layer + 5) << name;
      // At 8 and 32 rows: one launch less on the decode route where the append is inside.
      for (const int64_t p : {8, 32}) {
        const bool fresh_at_p = append == "in_attention";
        EXPECT_EQ(launches_in(1, 3, p, true), launches_in(1, 3, p, false) - (fresh_at_p ? 1 : 0))
            << name << " " << append << " at size " << p;
      }
      std::printf(
          "[ info     ] %s fp16 decode, decode_append %s: %d launches per layer (%d on the mixed "
          "route), %d per step\n",
          name, append.c_str(), layer, mixed_layer, step);
    }
}

// The decode attention's split and combine steps carry, for each compile size whose row count
// calls for another split configuration (paged_decode_config), that configuration as a
// decision: the same one for both steps of a layer, never timed ("heuristic"), and its kernel
// specialised for the size.
TEST(KvPaged, DecodeAttentionConfigurationFollowsTheBatch) {
  for (const char* name : {"llama_ts17_kv", "gpt2_ts17_kv"}) {
    Result<schema::Manifest> m = generation_manifest(name);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status().to_string();
    const Status valid = runtime::program_validate(*m);
    ASSERT_TRUE(valid.ok()) << name << ": " << valid.to_string();
    int layers = 0;
    for (const schema::Piece& piece : m->pieces()) {
      if (!piece.is_attention()) continue;
      // The steps reading the block tables: the split, then the combine.
      std::vector<std::map<uint32_t, std::string>> decided;
      for (const schema::Step& step : piece.steps()) {
        if (!step.has_kernel()) continue;
        const auto& args = step.kernel().args();
        if (std::none_of(args.begin(), args.end(), [](const schema::KernelArg& a) {
              return a.has_kv() && a.kv().kind() == schema::KvArg::KIND_BLOCK_TABLES;
            }))
          continue;
        std::map<uint32_t, std::string> by_size;
        for (const schema::TunedLaunch& t : step.kernel().tuned()) {
          EXPECT_EQ(t.source(), "heuristic") << name;
          EXPECT_EQ(m->kernels(static_cast<int>(t.kernel())).specialised_size(), t.size());
          by_size[t.size()] = t.config();
        }
        decided.push_back(by_size);
      }
      ASSERT_EQ(decided.size(), 2u) << name << ": a split and a combine step";
      EXPECT_EQ(decided[0], decided[1]) << name;
      // Size 1 keeps the default; 32 rows take another configuration.
      EXPECT_EQ(decided[0].count(1), 0u) << name;
      EXPECT_EQ(decided[0].count(32), 1u) << name;
      for (const auto& [size, config] : decided[0])
        std::printf("[ info     ] %s size %u: %s\n", name, size, config.c_str());
      ++layers;
    }
    EXPECT_EQ(layers, 2) << name;
  }
}

// The whole compile, GPU-less: the manifest has the generation section and KV-cache arguments
// and passes the runtime's validation; in fp16 the cache holds f16.
TEST(KvPaged, CompiledArtifactCarriesTheGenerationContract) {
  for (const char* name : {"gpt2_ts17_kv", "llama_dynamo18_kv", "gpt2_ts17_kv_nopos",
                           "llama_dynamo18_kv_nopos", "gqa_ort_kv", "gqa_ort_kv_shared"}) {
    for (const char* precision : {"fp32", "fp16"}) {
      const fs::path model = kv_root() / name / "model.onnx";
      kiln::testing::TempDir cache;
      // fp32 with the append in the attention (the decode route's flag and skip_on_decode),
      // fp16 with the default.
      const bool inside = std::string(precision) == "fp32";
      CompileRequest req{
          model, generation_config(model, precision, 1, inside ? "in_attention" : "separate"),
          cache.path()};
      Result<std::unique_ptr<CompiledModel>> cm = compile_unpublished(req);
      ASSERT_TRUE(cm.ok()) << name << ": " << cm.status().to_string();
      Result<schema::Manifest> m = manifest_build((*cm)->inputs);
      ASSERT_TRUE(m.ok()) << name << ": " << m.status().to_string();
      ASSERT_TRUE(m->has_generation()) << name;
      const schema::Generation& g = m->generation();
      EXPECT_EQ(g.num_layers(), 2u);
      EXPECT_EQ(g.head_dim(), 16u);
      EXPECT_EQ(g.vocab(), 128u);
      EXPECT_EQ(g.block_size(), 16u);
      EXPECT_EQ(g.max_blocks_per_seq(), 8u);
      EXPECT_EQ(g.sampling().grid(), 8u);  // min(max_size, max_sequences)
      EXPECT_EQ(static_cast<DType>(g.dtype()),
                std::string(precision) == "fp16" ? DType::kF16 : DType::kF32);
      std::map<int, int> kinds;
      for (const auto& piece : m->pieces())
        for (const auto& step : piece.steps())
          for (const auto& a : step.kernel().args())
            if (a.value_case() == schema::KernelArg::kKv) ++kinds[a.kv().kind()];
      // Per layer the append and, in_attention, the split (which appends itself on the decode
      // route).
      EXPECT_EQ(kinds[schema::KvArg::KIND_SLOT_MAPPING], inside ? 4 : 2) << name;
      EXPECT_GE(kinds[schema::KvArg::KIND_BLOCK_TABLES], 2) << name;
      EXPECT_GE(kinds[schema::KvArg::KIND_KEY_CACHE], 4) << name;
      // The runtime's validation, minus the files (publishing adds them).
      Status v = runtime::generation_validate(*m);
      EXPECT_TRUE(v.ok()) << name << ": " << v.to_string();
      v = runtime::program_validate(*m);
      EXPECT_TRUE(v.ok()) << name << ": " << v.to_string();
      if (std::string(precision) == "fp32" && std::string(name) == "gpt2_ts17_kv")
        expect_tampering_refused(*m);
    }
  }
}

TEST(KvPaged, ModelsThatCannotGenerateSayWhy) {
  // No KV cache at all.
  const fs::path plain = kiln::testing::exported_models_dir() / "gpt2_ts17_eager" / "model.onnx";
  CompileConfig c = generation_config(plain);
  Result<ir::Graph> g = generation_graph(plain, c);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("no KV cache"), std::string::npos) << g.status().message();
  // The batch not bound to 1.
  const fs::path kv = kv_root() / "gpt2_ts17_kv" / "model.onnx";
  g = generation_graph(kv, generation_config(kv, "fp32", 2));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("input 'input_ids' is [2, S]"), std::string::npos)
      << g.status().message();
  // A graph without position_ids.
  ir::Graph none;
  none.kv_presents = {"present.0.key"};
  Status s = kv_paged_rewrite(none);
  EXPECT_NE(s.message().find("input 'input_ids'"), std::string::npos) << s.message();
}

// A one-layer toy decoder: `body` computes h [1, S, 4] from the token embeddings e (a lookup of
// input_ids in `table` [8, 4]) and the inputs; its attention is a causal kiln.Attention over h as
// [1, 1, S, 4], whose output is the graph's.
ir::Graph toy_decoder(const std::string& body) {
  std::string table;
  for (int i = 0; i < 32; ++i) table += (i ? ", " : "") + std::to_string(0.05 * i - 0.8);
  const std::string text =
      R"(<ir_version: 8, opset_import: ["" : 17]>
      g (int64[1, S] input_ids, int64[1, S] attention_mask) => (float[1, 1, S, 4] q)
      <float[8, 4] table = {)" +
      table + R"(}, int64 zero = {0}, int64 one = {1}, int64[1] ax1 = {1}, int64[1] ax2 = {2}>
      { e = Gather(table, input_ids) )" +
      body + " q = Unsqueeze(h, ax1) }";
  ImportOptions opts{"S", {}};
  opts.max_size = 16;
  ir::Graph g = kiln::testing::import_text_ok(text, opts);
  const int q = g.find_value("q");
  if (q < 0) return g;
  const int y = graph_new_value(g, "y", DType::kF32, g.values[q].shape);
  ir::Node attn;
  attn.name = "attention";
  attn.op = "Attention";
  attn.domain = "kiln";
  attn.inputs = {q, q, q};
  attn.outputs = {y};
  attn.attrs = {{"causal", int64_t{1}}, {"scale", 0.5}};
  graph_insert_node(g, g.nodes.size(), std::move(attn));
  g.outputs = {y};
  g.kv_presents = {"present.0.key"};
  return g;
}

std::vector<std::string> input_names(const ir::Graph& g) {
  std::vector<std::string> names;
  for (int v : g.inputs) names.push_back(g.values[v].name);
  return names;
}

// The toy's inputs at size s: input_ids, and attention_mask (ones) or position_ids.
std::map<std::string, RefTensor> toy_inputs(int64_t s, const std::vector<int64_t>& positions) {
  std::map<std::string, RefTensor> in;
  in["input_ids"] = ref_make(DType::kI64, {1, s});
  for (size_t i = 0; i < static_cast<size_t>(s); ++i)
    in["input_ids"].data[i] = static_cast<double>((3 * i + 1) % 8);
  const char* other = positions.empty() ? "attention_mask" : "position_ids";
  in[other] = ref_make(DType::kI64, {1, s});
  for (size_t i = 0; i < static_cast<size_t>(s); ++i)
    in[other].data[i] = positions.empty() ? 1.0 : static_cast<double>(positions[i]);
  return in;
}

// transformers' positions without a position_ids input: Range(0, S) once the past is empty.
TEST(KvPaged, PositionsComputedFromTheStepReadPositionIds) {
  ir::Graph g = toy_decoder(R"(
    s = Shape(input_ids)
    n = Gather(s, one)
    r = Range(zero, n, one)
    pe = Gather(table, r)
    h = Add(e, pe))");
  const ir::Graph before = g;
  Status st = kv_paged_rewrite(g);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(input_names(g), (std::vector<std::string>{"input_ids", "position_ids"}));
  EXPECT_EQ(kiln::testing::count_ops(g, "Range"), 0);
  EXPECT_EQ(kiln::testing::count_ops(g, "PagedAttention", "kiln"), 1);
  for (const int64_t s : {1, 3, 5}) {
    Result<std::map<std::string, RefTensor>> want = reference_run(before, s, toy_inputs(s, {}));
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    Result<std::map<std::string, RefTensor>> got =
        reference_run(g, s, toy_inputs(s, iota(static_cast<size_t>(s))));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_TRUE(kiln::testing::tensors_close(got->at("y"), want->at("y"), 1e-12, 1e-12, "y"));
    // Other positions, other embeddings.
    got = reference_run(g, s, toy_inputs(s, std::vector<int64_t>(static_cast<size_t>(s), 7)));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_NE(got->at("y").data, want->at("y").data);
  }
}

// A mask read for something else than attention is fed as ones: fine where that is the same for
// every token (here: zeroing padding tokens' embeddings).
TEST(KvPaged, AMaskTheGraphStillReadsIsFedAsOnes) {
  ir::Graph g = toy_decoder(R"(
    m = Cast<to = 1>(attention_mask)
    u = Unsqueeze(m, ax2)
    h = Mul(e, u))");
  Status st = kv_paged_rewrite(g);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(input_names(g),
            (std::vector<std::string>{"input_ids", "position_ids", "attention_mask"}));
}

// Positions (or anything) computed from the step in a way kiln cannot feed are refused, naming
// the node: a cumulative sum of the mask (Optimum's older exports), a Range that does not start
// at 0, the number of tokens in the step.
TEST(KvPaged, ValuesOfTheStepThatDifferPerTokenAreRefused) {
  struct Case {
    const char* body;
    const char* node;
    const char* why;
  };
  const Case cases[] = {
      {"c = CumSum(attention_mask, one) p = Sub(c, one) pe = Gather(table, p) h = Add(e, pe)",
       "(CumSum)", "differs from token to token"},
      {"s = Shape(input_ids) n = Gather(s, one) n1 = Add(n, one) r = Range(one, n1, one) "
       "pe = Gather(table, r) h = Add(e, pe)",
       "(Range)", "differs from token to token"},
      {"c = ReduceSum<keepdims = 0>(attention_mask) f = Cast<to = 1>(c) h = Add(e, f)",
       "(ReduceSum)", "changes with the number of tokens in the step"},
  };
  for (const Case& c : cases) {
    ir::Graph g = toy_decoder(c.body);
    ASSERT_FALSE(g.nodes.empty()) << c.body;
    Status st = kv_paged_rewrite(g);
    ASSERT_FALSE(st.ok()) << c.body;
    EXPECT_NE(st.message().find(c.node), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.why), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("export the decoder with a position_ids input"), std::string::npos)
        << st.message();
  }
}

}  // namespace
}  // namespace kiln::compiler
