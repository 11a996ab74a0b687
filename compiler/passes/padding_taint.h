// Padding taint: which values may hold padding-derived data in their real rows.
//
// The runtime runs a request of size s padded up to a captured size P: every tensor then has P
// where the model has S, its real rows are those within the extents computed with s, and the
// rest is padding (whatever the padded inputs and kernels leave there). Element-wise work keeps
// real rows real. Some ops make a real row read a padded one; their outputs are "tainted", and
// the taint flows forward through every op that reads a tainted value. Compilation is refused
// only when taint reaches a graph output, and the refusal names the path from the op that
// first read padding to that output.
//
// Taint sources recognised here (the other layout and reduction cases are refused where they
// are lowered, with their reason): a Gather, GatherElements or GatherND along an axis whose
// length depends on S with run-time indices that are not provably within the real rows, and a
// reverse CumSum along such an axis.
#pragma once

#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct PaddingTaint {
  // Per value: the tainted input of its producer that tainted it, -2 at a source, -1 clean.
  std::vector<int> via;
  // Per value: why its producer reads padding (set at sources only).
  std::vector<std::string> why;
  bool tainted(int v) const { return via[static_cast<size_t>(v)] != -1; }
};

PaddingTaint padding_taint(const ir::Graph& g);

// Ok, or an error naming the first graph output whose real rows may read padding and the path
// (source node, then each node the taint went through).
Status padding_taint_check(const ir::Graph& g);

// Whether every real element of integer tensor `indices` is provably below the real extent of
// an axis of `axis_len` elements: it is Range(0, L, 1) (each element its own position), or the
// first L rows of a constant integer table whose row j holds values in [0, j] (a position table
// of passes/size_tables.h: such a Range computed at compile time), with L <= axis_len at every S,
// moved by unsqueezes, squeezes, transposes, broadcasts and
// integer casts, which keep each value at a position that is real exactly when its source is.
bool indices_within_real(const ir::Graph& g, int indices, const ir::DimExpr& axis_len);

}  // namespace kiln::compiler
