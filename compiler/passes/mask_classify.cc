#include "compiler/passes/mask_classify.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/ops/op_util.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

namespace {

enum class Cell : uint8_t { kKept, kMasked, kOther };

// Masks are evaluated at sizes whose [B, H, Sq, Skv] grid stays below this many elements.
constexpr int64_t kMaxCells = int64_t{1} << 22;
// Random attention_mask draws per size.
constexpr int kPaddingTrials = 3;

// The graph inputs the mask terms depend on (symbolic and real constants are not inputs).
std::vector<int> input_ancestors(const ir::Graph& g, const MaskSite& site) {
  std::vector<char> seen(g.values.size(), 0), is_input(g.values.size(), 0);
  for (int i : g.inputs) is_input[i] = 1;
  std::vector<int> stack, found;
  for (const MaskTerm& t : site.terms) stack.push_back(t.value);
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (id < 0 || seen[id]) continue;
    seen[id] = 1;
    if (is_input[id]) found.push_back(id);
    const int p = g.values[id].producer;
    if (p < 0 || p >= static_cast<int>(g.nodes.size())) continue;
    for (int in : g.nodes[p].inputs) stack.push_back(in);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::optional<std::vector<int64_t>> eval_shape(const ir::Shape& shape, int64_t s) {
  std::vector<int64_t> dims;
  for (const ir::DimExpr& d : shape) {
    if (d.eval(s) < 1) return std::nullopt;
    dims.push_back(d.eval(s));
  }
  return dims;
}

int64_t cells_at(const ir::Shape& scores, int64_t s) {
  int64_t n = 1;
  for (const ir::DimExpr& d : scores)
    if (__builtin_mul_overflow(n, std::max<int64_t>(d.eval(s), 0), &n)) return kMaxCells + 1;
  return n;
}

// Small sizes catch off-by-one patterns; the largest affordable one (max_size itself when it
// fits) catches windows that only start masking at long lengths.
std::vector<int64_t> eval_sizes(const ir::Shape& scores, int64_t max_size) {
  std::vector<int64_t> sizes;
  for (int64_t s : {1, 2, 3, 5, 8, 13})
    if (s <= max_size && cells_at(scores, s) <= kMaxCells) sizes.push_back(s);
  int64_t big = max_size;
  while (big > 13 && cells_at(scores, big) > kMaxCells) big = big * 3 / 4;
  if (big > 13) sizes.push_back(big);
  return sizes;
}

Cell cell_of(const MaskTerm& term, double x) {
  if (term.condition) return (x != 0.0) == term.keep_when_true ? Cell::kKept : Cell::kMasked;
  if (x == 0.0) return Cell::kKept;
  if (x <= kMaskedBelow) return Cell::kMasked;  // -inf included; NaN is not
  return Cell::kOther;
}

// A score after two steps: masked when either masks it, else "other" when either changes it.
Cell combine(Cell a, Cell b) {
  if (a == Cell::kMasked || b == Cell::kMasked) return Cell::kMasked;
  if (a == Cell::kOther || b == Cell::kOther) return Cell::kOther;
  return Cell::kKept;
}

// The mask terms broadcast to the scores' dims at size s and combined, as cells; an error says
// why they cannot be evaluated or do not broadcast.
Result<std::vector<Cell>> eval_cells(const ir::Graph& g, const MaskSite& site, int64_t s,
                                     const std::map<std::string, RefTensor>& inputs,
                                     const std::vector<int64_t>& out) {
  std::vector<int> wanted;
  for (const MaskTerm& t : site.terms) wanted.push_back(t.value);
  Result<std::map<int, RefTensor>> r = reference_run_values(g, s, inputs, wanted);
  if (!r.ok()) return r.status();
  std::vector<Cell> cells;
  for (const MaskTerm& term : site.terms) {
    const RefTensor& t = r->at(term.value);
    bool fits = t.dims.size() <= out.size() && static_cast<int64_t>(t.data.size()) == t.numel();
    for (size_t i = 0; fits && i < t.dims.size(); ++i) {
      const int64_t d = t.dims[i], o = out[out.size() - t.dims.size() + i];
      fits = d == o || d == 1;
    }
    if (!fits)
      return invalid_argument(fmt::format("'{}' is {} at size {}, which does not broadcast to the "
                                          "scores {}",
                                          g.values[term.value].name, dims_to_string(t.dims), s,
                                          dims_to_string(out)));
    const std::vector<int64_t> idx = ref_broadcast_index(out, t.dims);
    if (cells.empty()) cells.assign(idx.size(), Cell::kKept);
    for (size_t k = 0; k < idx.size(); ++k)
      cells[k] = combine(cells[k], cell_of(term, t.data[idx[k]]));
  }
  return cells;
}

// The first cell that is not what "causal" and/or "padding by pad [B, Skv]" predict, as
// "[b, h, i, j] is kept, expected masked"; empty when every cell matches.
std::string cells_mismatch(const std::vector<Cell>& cells, const std::vector<int64_t>& dims,
                           bool causal, const RefTensor* pad) {
  const int64_t B = dims[0], H = dims[1], Sq = dims[2], Skv = dims[3];
  size_t k = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t j = 0; j < Skv; ++j, ++k) {
          bool kept = !causal || j <= i + (Skv - Sq);
          if (pad) kept = kept && pad->data[static_cast<size_t>(b * Skv + j)] != 0.0;
          const Cell want = kept ? Cell::kKept : Cell::kMasked;
          if (cells[k] == want) continue;
          const char* got = cells[k] == Cell::kKept     ? "kept (0)"
                            : cells[k] == Cell::kMasked ? "masked"
                                                        : "neither 0 nor <= -1e4";
          return fmt::format("score [{}, {}, {}, {}] is {}, expected {}", b, h, i, j, got,
                             kept ? "kept" : "masked");
        }
  return {};
}

bool cells_match(const std::vector<Cell>& cells, const std::vector<int64_t>& dims, bool causal,
                 const RefTensor* pad) {
  return cells_mismatch(cells, dims, causal, pad).empty();
}

MaskClass general(std::string reason) { return {.general = true, .reason = std::move(reason)}; }

// Random 0/1 rows with the first key kept (a fully masked row is not a case to classify).
RefTensor random_padding(const ir::Value& m, const std::vector<int64_t>& dims, std::mt19937& rng) {
  RefTensor t = ref_make(m.dtype, dims);
  for (int64_t b = 0; b < dims[0]; ++b)
    for (int64_t j = 0; j < dims[1]; ++j)
      t.data[static_cast<size_t>(b * dims[1] + j)] = j == 0 ? 1.0 : static_cast<double>(rng() & 1);
  return t;
}

MaskClass classify_static(const ir::Graph& g, const MaskSite& site, int64_t max_size) {
  const std::vector<int64_t> sizes = eval_sizes(site.scores, max_size);
  if (sizes.empty()) return general("no size has a scores grid small enough to evaluate");
  bool none = true, causal = true;
  std::string why_not_causal;
  for (int64_t s : sizes) {
    std::optional<std::vector<int64_t>> dims = eval_shape(site.scores, s);
    if (!dims) return general(fmt::format("the scores have an empty dim at size {}", s));
    Result<std::vector<Cell>> cells = eval_cells(g, site, s, {}, *dims);
    if (!cells.ok())
      return general(fmt::format("evaluating it at size {}: {}", s, cells.status().message()));
    none = none && cells_match(*cells, *dims, false, nullptr);
    if (causal) {
      why_not_causal = cells_mismatch(*cells, *dims, true, nullptr);
      if (!why_not_causal.empty()) why_not_causal += fmt::format(" at size {}", s);
    }
    causal = causal && why_not_causal.empty();
  }
  if (none) return MaskClass{};
  if (causal) return {.causal = true, .reason = {}};
  return general("it depends on no input, and is neither all-kept nor causal: " + why_not_causal);
}

MaskClass classify_padding(const ir::Graph& g, const MaskSite& site, int m, int64_t max_size) {
  const ir::Value& mv = g.values[m];
  const bool is_numeric =
      dtype_is_float(mv.dtype) || dtype_is_integer(mv.dtype) || mv.dtype == DType::kBool;
  if (!is_numeric || mv.shape.size() != 2 || mv.shape[0] != site.scores[0] ||
      mv.shape[1] != site.scores[3])
    return general(fmt::format("it depends on input '{}' {}, which is not a [batch, keys] {} "
                               "padding mask",
                               mv.name, ir::shape_to_string(mv.shape),
                               ir::shape_to_string({site.scores[0], site.scores[3]})));
  const std::vector<int64_t> sizes = eval_sizes(site.scores, max_size);
  if (sizes.empty()) return general("no size has a scores grid small enough to evaluate");
  bool pad = true, causal_pad = true;
  std::string why;
  std::mt19937 rng(20240611u);
  for (int64_t s : sizes) {
    std::optional<std::vector<int64_t>> dims = eval_shape(site.scores, s);
    std::optional<std::vector<int64_t>> mdims = eval_shape(mv.shape, s);
    if (!dims || !mdims) return general(fmt::format("an empty dim at size {}", s));
    for (int trial = 0; trial < kPaddingTrials; ++trial) {
      std::map<std::string, RefTensor> inputs{{mv.name, random_padding(mv, *mdims, rng)}};
      Result<std::vector<Cell>> cells = eval_cells(g, site, s, inputs, *dims);
      if (!cells.ok())
        return general(fmt::format("evaluating it at size {}: {}", s, cells.status().message()));
      const RefTensor& mt = inputs.at(mv.name);
      pad = pad && cells_match(*cells, *dims, false, &mt);
      if (causal_pad) {
        why = cells_mismatch(*cells, *dims, true, &mt);
        causal_pad = why.empty();
      }
      if (!pad && !causal_pad)
        return general(fmt::format("it depends on input '{}' but is neither its key padding nor "
                                   "causal + key padding (at size {}, {})",
                                   mv.name, s, why));
    }
  }
  if (pad) return {.key_padding = m, .reason = {}};
  return {.causal = true, .key_padding = m, .reason = {}};
}

}  // namespace

MaskClass mask_classify(const ir::Graph& g, const MaskSite& site, int64_t max_size) {
  if (site.scores.size() != 4 || max_size < 1)
    return general("the scores are not [B, H, Sq, Skv]");
  if (site.terms.empty()) return general("no mask terms");
  for (const MaskTerm& t : site.terms)
    if (t.value < 0 || t.value >= static_cast<int>(g.values.size()))
      return general("a mask term is not a value of the graph");
  const std::vector<int> inputs = input_ancestors(g, site);
  if (inputs.empty()) return classify_static(g, site, max_size);
  if (inputs.size() == 1) return classify_padding(g, site, inputs[0], max_size);
  std::string names;
  for (int i : inputs) names += (names.empty() ? "'" : ", '") + g.values[i].name + "'";
  return general("it depends on " + std::to_string(inputs.size()) + " inputs (" + names +
                 "), a key-padding mask on one");
}

}  // namespace kiln::compiler
