// Registry parity: every op the front end accepts (compiler/ir/op_registry) reaches the GPU —
// through a lowering rule (compiler/backend/lower/lower_rules.h), or because the front end always
// folds or rewrites it away (compiler/ops/op_folds.h) — or is listed, with its reason, in the back
// end's short "not lowered yet" table, which this test prints. The registry is walked, never
// copied: registering an op without a rule or a fold fails here, naming it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "compiler/backend/lower/lower_rules.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ops/op_folds.h"

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

}  // namespace
}  // namespace kiln::compiler
