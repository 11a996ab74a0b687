// Registry parity: every op the front end accepts (compiler/ir/op_registry) reaches the GPU —
// through a lowering rule (compiler/backend/lower/lower_rules.h), or because the front end always
// folds or rewrites it away (compiler/ops/op_folds.h) — or is listed, with its reason, in the back
// end's short "not lowered yet" table, which this test prints. The registry is walked, never
// copied: registering an op without a rule or a fold fails here, naming it. The user-facing
// list compiler/ops/supported_ops.md is generated from the same tables and checked here
// (KILN_UPDATE_DOCS=1 rewrites it).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/backend/lower/lower_rules.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ops/op_folds.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

std::string qualified(std::string_view domain, std::string_view op) {
  return domain.empty() ? std::string(op) : fmt::format("{}.{}", domain, op);
}

std::set<std::string> rule_ops() {
  std::set<std::string> out;
  for (const LowerRule& r : lower_rules_all()) out.insert(r.op);
  return out;
}

std::set<std::string> registered_ops() {
  std::set<std::string> out;
  for (const OpDef* d : op_all()) out.insert(qualified(d->domain, d->op));
  return out;
}

// The "not lowered yet" table may hold a few gaps, never a family's worth.
constexpr size_t kMaxUnlowered = 4;

TEST(OpParity, EveryRegisteredOpIsLoweredFoldedOrListed) {
  const std::set<std::string> rules = rule_ops();
  std::vector<std::string> missing;
  for (const OpDef* d : op_all()) {
    const std::string q = qualified(d->domain, d->op);
    if (rules.contains(q) || op_fold_find(d->domain, d->op) || unlowered_op_find(d->domain, d->op))
      continue;
    missing.push_back(q);
  }
  EXPECT_TRUE(missing.empty())
      << "registered ops with neither a lowering rule (compiler/backend/lower/lower_rules.h) nor "
         "a fold (compiler/ops/op_folds.h): "
      << fmt::format("{}", fmt::join(missing, ", "));
}

TEST(OpParity, EveryRuleLowersARegisteredOp) {
  const std::set<std::string> registered = registered_ops();
  std::set<std::string> seen;
  for (const LowerRule& r : lower_rules_all()) {
    EXPECT_TRUE(registered.contains(r.op))
        << "rule for '" << r.op << "', which the front end does not accept";
    EXPECT_TRUE(seen.insert(r.op).second) << "two rules for '" << r.op << "'";
  }
}

TEST(OpParity, FoldsAreRegisteredAndHaveNoRule) {
  const std::set<std::string> rules = rule_ops();
  std::set<std::string> seen;
  for (const OpFold& f : op_folds()) {
    const std::string q = qualified(f.domain, f.op);
    SCOPED_TRACE(q);
    EXPECT_NE(op_find(f.domain, f.op), nullptr) << "fold of an op the registry does not hold";
    EXPECT_FALSE(rules.contains(q)) << "folded and lowered: drop the fold entry";
    EXPECT_EQ(unlowered_op_find(f.domain, f.op), nullptr) << "both folded and not lowered";
    EXPECT_FALSE(f.by.empty());
    EXPECT_FALSE(f.becomes.empty());
    EXPECT_TRUE(seen.insert(q).second) << "listed twice";
  }
}

TEST(OpParity, NotLoweredYetIsShortRegisteredAndReasoned) {
  const std::set<std::string> rules = rule_ops();
  std::string listing;
  for (const UnloweredOp& u : unlowered_ops()) {
    const std::string q = qualified(u.domain, u.op);
    SCOPED_TRACE(q);
    listing += fmt::format("  {}: {}\n", q, u.reason);
    EXPECT_NE(op_find(u.domain, u.op), nullptr) << "listed but not registered";
    EXPECT_FALSE(rules.contains(q)) << "it has a lowering rule now: remove it from the table";
    EXPECT_FALSE(u.reason.empty());
  }
  std::printf("not lowered yet (%zu ops, compiler/backend/lower/lower_rules.cc):\n%s",
              unlowered_ops().size(), listing.c_str());
  EXPECT_LE(unlowered_ops().size(), kMaxUnlowered) << "the not-lowered table must stay short";
}

// How each lowered op runs, by rule family.
std::map<std::string, std::string> family_of_rule() {
  const std::pair<std::vector<LowerRule>, const char*> families[] = {
      {gemm_rules(),
       "GEMM: cuBLASLt with bias / activation / residual epilogues, or a generated skinny-GEMM "
       "kernel at small M"},
      {elementwise_rules(), "fused elementwise kernel (chains of such ops are one kernel)"},
      {reduce_rules(), "reduction kernel (norms with a fused residual, softmax, reductions)"},
      {scan_rules(), "scan kernel"},
      {layout_rules(), "layout kernel, or a view with no kernel (reshapes and the like)"},
      {attention_rules(), "attention kernel (prefill, decode, paged KV cache)"}};
  std::map<std::string, std::string> out;
  for (const auto& [rules, what] : families)
    for (const LowerRule& r : rules) out[r.op] = what;
  return out;
}

// The page compiler/ops/supported_ops.md, from the registry and the three tables.
std::string supported_ops_page() {
  const std::map<std::string, std::string> family = family_of_rule();
  std::string onnx, internal;
  size_t n_onnx = 0;
  for (const OpDef* d : op_all()) {
    const std::string q = qualified(d->domain, d->op);
    std::string how;
    if (auto it = family.find(q); it != family.end()) {
      how = it->second;
    } else if (const OpFold* f = op_fold_find(d->domain, d->op)) {
      how = fmt::format("removed before the back end by {}: {}", f->by, f->becomes);
    } else if (const UnloweredOp* u = unlowered_op_find(d->domain, d->op)) {
      how = fmt::format("**not on the GPU yet**: {}", u->reason);
    } else {
      how = "**none** (op_parity_test fails)";
    }
    const std::string domain = d->domain.empty() ? "ai.onnx" : std::string(d->domain);
    std::string row = fmt::format("| {} | {} | {} |\n", domain, d->op, how);
    if (d->domain == "kiln") {
      internal += row;
    } else {
      onnx += row;
      ++n_onnx;
    }
  }
  return fmt::format(
      "# Supported ops\n\n"
      "The {} ONNX (`ai.onnx`) and onnxruntime contrib (`com.microsoft`) ops that `kiln compile` "
      "accepts, and how each runs on the GPU. Generated from the op registry "
      "(`compiler/ir/op_registry.h`), the lowering rules (`compiler/backend/lower/lower_rules.h`) "
      "and the front end's folds (`compiler/ops/op_folds.h`) by "
      "`tests/compiler/backend/op_parity_test.cc`, which fails when this page drifts from them; "
      "`KILN_UPDATE_DOCS=1 meson test -C build compiler_backend_op_parity` rewrites it. An op "
      "missing here is rejected at import with a message naming the node. Opset coverage: "
      "`tests/e2e/onnx_node_exclusions.txt` lists ONNX's node tests that are not run, with the "
      "reason for each.\n\n"
      "| domain | op | on the GPU |\n|---|---|---|\n{}\n"
      "## Internal ops\n\n"
      "What the passes rewrite ONNX patterns into (specified in `compiler/ops/kiln_ops.md`); "
      "models may not use them directly.\n\n"
      "| domain | op | on the GPU |\n|---|---|---|\n{}",
      n_onnx, onnx, internal);
}

TEST(OpParity, SupportedOpsPageMatchesTheRegistry) {
  const std::filesystem::path path = kiln::testing::source_root() / "compiler/ops/supported_ops.md";
  const std::string want = supported_ops_page();
  if (const char* update = std::getenv("KILN_UPDATE_DOCS"); update && std::string(update) == "1") {
    std::ofstream(path) << want;
  }
  std::ifstream f(path);
  std::stringstream got;
  got << f.rdbuf();
  EXPECT_EQ(got.str(), want) << path << " is out of date: rerun this test with KILN_UPDATE_DOCS=1";
}

}  // namespace
}  // namespace kiln::compiler
