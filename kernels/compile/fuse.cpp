// SPDX-License-Identifier: MIT
// Pointwise fusion: chains of elementwise op calls in a captured graph become one
// generated kernel each, written as a jit::pointwise expression.
#include <algorithm>
#include <cctype>
#include <map>

#include "kernels/compile/compile.h"
#include "runtime/view.h"

namespace mt {

// Note [Pointwise fusion]
// A node is fusable when it is a functional elementwise op with a formula below (the
// elementwise table's unary, scalar and binary ops, silu_backward, and casts between
// floating dtypes), reads and makes floating tensors, writes nothing and returns no view.
// Walking the nodes in order, a fusable node absorbs the group of each fusable producer
// of its arguments whose output (the producer group's result) is used exactly once (by
// it: not twice, not returned, not left as a .grad), so a group is a tree whose root is
// its last node and whose intermediates nobody else sees. The group runs where its root
// was, so a merge is refused when a node in between writes memory that a member reads
// (its alias_root), and when the kernel would pass the pointwise builder's limits (7
// inputs). Every value in a group has one dtype T; the group's inputs may be of other
// floating dtypes only when their promotion is T, since jit::Pointwise converts its
// inputs to the promoted dtype (a cast node in front is then what it did anyway).
// Broadcasting needs no care: elementwise ops commute with it, and the kernel broadcasts
// its inputs to the root's shape. A one-element filled factory (the backward's seed) joins
// a group as a literal. Reductions, matmuls, views and in-place ops stay calls.

namespace {

struct Formula {
  int tensors;       // tensor operands (a, b)
  int scalars;       // scalar operands after them in the schema (s0: the first)
  const char* expr;  // over a, b, s
};

// The expression of each fusable op, with a, b the tensor operands and s the scalar one
// (alpha for add and sub; unused when it is 1).
const std::map<std::string, Formula, std::less<>>& formulas() {
  static const std::map<std::string, Formula, std::less<>> m = {
      {"mt::neg", {1, 0, "-a"}},
      {"mt::exp", {1, 0, "exp(a)"}},
      {"mt::log", {1, 0, "log(a)"}},
      {"mt::sqrt", {1, 0, "sqrt(a)"}},
      {"mt::abs", {1, 0, "abs(a)"}},
      {"mt::sign", {1, 0, "(a > 0 ? 1 : (a < 0 ? -1 : a * 0))"}},
      {"mt::sigmoid", {1, 0, "sigmoid(a)"}},
      {"mt::tanh", {1, 0, "tanh(a)"}},
      {"mt::relu", {1, 0, "(a < 0 ? 0 : a)"}},
      {"mt::silu", {1, 0, "a / (1 + exp(-a))"}},
      {"mt::gelu", {1, 0, "0.5 * a * (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))"}},
      {"mt::pow", {1, 1, "pow(a, s)"}},
      {"mt::add.Scalar", {1, 1, "a + s"}},
      {"mt::sub.Scalar", {1, 1, "a - s"}},
      {"mt::mul.Scalar", {1, 1, "a * s"}},
      {"mt::div.Scalar", {1, 1, "a / s"}},
      {"mt::add", {2, 1, "a + s * b"}},
      {"mt::sub", {2, 1, "a - s * b"}},
      {"mt::mul", {2, 0, "a * b"}},
      {"mt::div", {2, 0, "a / b"}},
      {"mt::silu_backward", {2, 0, "a * sigmoid(b) * (1 + b * (1 - sigmoid(b)))"}},
      {"mt::to.dtype", {1, 0, "a"}},
  };
  return m;
}

// A one-element factory's value (the loss's seed gradient, ones_like(loss)) becomes a
// literal of the expression: F.
constexpr Formula kFill = {0, 0, "F"};

const Formula* formula_of(const GraphNode& n) {
  if (n.is_factory()) return n.fill ? &kFill : nullptr;
  auto it = formulas().find(n.op.name().str());
  return it == formulas().end() ? nullptr : &it->second;
}

bool fusable(const Graph& g, const GraphNode& n) {
  const Formula* f = formula_of(n);
  if (!f || !n.mutated.empty() || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
  const GraphValue& out = g.values[size_t(n.outputs[0])];
  if (!is_floating(out.dtype) || out.alias_root != n.outputs[0]) return false;
  if (n.is_factory() && shape_numel(out.sizes) != 1) return false;  // broadcasts as a literal
  if (int(n.args.size()) < f->tensors + f->scalars) return false;
  for (int k = 0; k < f->tensors; ++k) {
    const GraphArg& a = n.args[size_t(k)];
    if (a.kind != GraphArg::Kind::Tensor) return false;
    const GraphValue& v = g.values[size_t(a.value)];
    if (!is_floating(v.dtype) || v.device != out.device) return false;
  }
  for (int k = 0; k < f->scalars; ++k)
    if (!n.args[size_t(f->tensors + k)].constant.is_double() &&
        !n.args[size_t(f->tensors + k)].constant.is_int())
      return false;
  return true;
}

std::string short_op(const GraphNode& n) {
  if (n.is_factory()) return "full";
  std::string s = n.op.name().name;
  return s == "to" ? "cast" : s;
}

}  // namespace

std::vector<FusionGroup> fusion_groups(const Graph& g) {
  const size_t nn = g.nodes.size();
  const std::vector<int> uses = g.use_counts();
  std::vector<bool> ok(nn);
  for (size_t i = 0; i < nn; ++i) ok[i] = fusable(g, g.nodes[i]);
  std::vector<std::vector<int>> members(nn);  // by root node; empty once absorbed
  for (size_t i = 0; i < nn; ++i)
    if (ok[i]) members[i] = {int(i)};

  // The external tensor inputs of a set of member nodes.
  auto externals = [&](const std::vector<int>& ms) {
    std::vector<int> ext;
    for (int m : ms) {
      const Formula* f = formula_of(g.nodes[size_t(m)]);
      for (int k = 0; k < f->tensors; ++k) {
        const int v = g.nodes[size_t(m)].args[size_t(k)].value;
        const int p = g.values[size_t(v)].producer;
        if (p >= 0 && std::find(ms.begin(), ms.end(), p) != ms.end()) continue;
        if (std::find(ext.begin(), ext.end(), v) == ext.end()) ext.push_back(v);
      }
    }
    return ext;
  };
  // Whether a node strictly between `from` and `to` writes memory that value v shares.
  auto written_between = [&](int v, int from, int to) {
    const int root = g.values[size_t(v)].alias_root;
    for (int k = from + 1; k < to; ++k)
      for (int w : g.nodes[size_t(k)].mutated)
        if (g.values[size_t(w)].alias_root == root) return true;
    return false;
  };

  for (size_t i = 0; i < nn; ++i) {
    if (!ok[i]) continue;
    const GraphNode& n = g.nodes[i];
    const DType t = g.values[size_t(n.outputs[0])].dtype;
    const Formula* f = formula_of(n);
    for (int k = 0; k < f->tensors; ++k) {
      const int v = n.args[size_t(k)].value;
      const int p = g.values[size_t(v)].producer;
      if (p < 0 || !ok[size_t(p)] || members[size_t(p)].empty() || uses[size_t(v)] != 1) continue;
      if (g.values[size_t(v)].dtype != t) continue;
      std::vector<int> merged = members[size_t(p)];
      merged.insert(merged.end(), members[i].begin(), members[i].end());
      std::sort(merged.begin(), merged.end());
      const std::vector<int> ext = externals(merged);
      if (ext.size() > 7) continue;
      if (!ext.empty()) {
        DType promoted = g.values[size_t(ext[0])].dtype;
        for (int e : ext) promoted = promote_types(promoted, g.values[size_t(e)].dtype);
        if (promoted != t) continue;
      }
      bool moved_past_write = false;
      for (int m : merged) {
        const Formula* fm = formula_of(g.nodes[size_t(m)]);
        for (int a = 0; a < fm->tensors && !moved_past_write; ++a) {
          const int e = g.nodes[size_t(m)].args[size_t(a)].value;
          if (std::find(ext.begin(), ext.end(), e) != ext.end())
            moved_past_write = written_between(e, m, int(i));
        }
      }
      if (moved_past_write) continue;
      members[i] = std::move(merged);
      members[size_t(p)].clear();
    }
  }

  std::vector<FusionGroup> groups;
  for (size_t i = 0; i < nn; ++i) {
    if (members[i].size() < 2) continue;
    FusionGroup fg;
    fg.nodes = members[i];
    fg.output = g.nodes[i].outputs[0];
    fg.inputs = externals(fg.nodes);
    if (fg.inputs.empty()) continue;  // nothing gives the kernel its shape: stays op calls
    // The kernel's output has its inputs' broadcast shape; a literal of more dims than
    // they have would be lost.
    Shape shape = g.values[size_t(fg.inputs[0])].sizes;
    for (int v : fg.inputs)
      shape = detail::broadcast_shapes(shape, g.values[size_t(v)].sizes, "fusion");
    if (shape != g.values[size_t(fg.output)].sizes) continue;
    std::vector<std::string> parts;
    std::string body;
    auto operand = [&](int v) {
      const int p = g.values[size_t(v)].producer;
      if (p >= 0 && std::find(fg.nodes.begin(), fg.nodes.end(), p) != fg.nodes.end())
        return fmt::format("t{}", p);
      const auto at = std::find(fg.inputs.begin(), fg.inputs.end(), v) - fg.inputs.begin();
      return fmt::format("i{}", at);
    };
    for (int m : fg.nodes) {
      const GraphNode& n = g.nodes[size_t(m)];
      const Formula* f = formula_of(n);
      parts.push_back(short_op(n));
      std::string pattern = f->expr;
      std::string scalar;
      if (f->scalars) {
        const double s = n.args[size_t(f->tensors)].constant.to_double();
        if (f->tensors == 2 && s == 1.0) {  // alpha 1: a + b reads as written
          pattern = pattern == "a + s * b" ? "a + b" : "a - b";
        } else if (fg.scalars.size() < 8) {
          scalar = fmt::format("s{}", fg.scalars.size());
          fg.scalars.push_back(s);
        } else {
          scalar = fmt::format("({:.17g})", s);
        }
      }
      std::string e;
      for (size_t c = 0; c < pattern.size(); ++c) {
        auto ident = [&](size_t at) {
          return at < pattern.size() &&
                 (std::isalnum((unsigned char)pattern[at]) || pattern[at] == '_');
        };
        const char ch = pattern[c];
        if ((ch == 'a' || ch == 'b' || ch == 's' || ch == 'F') && !(c > 0 && ident(c - 1)) &&
            !ident(c + 1)) {
          if (ch == 'F')
            e += fmt::format("{:.17g}", *n.fill);
          else if (ch == 'a')
            e += operand(n.args[0].value);
          else if (ch == 'b')
            e += operand(n.args[1].value);
          else
            e += scalar;
        } else {
          e += ch;
        }
      }
      body += fmt::format("t{} = {};\n", m, e);
    }
    body += fmt::format("return t{};", fg.nodes.back());
    fg.body = std::move(body);
    fg.name = fmt::format("fused_{}", fmt::join(parts, "_"));
    groups.push_back(std::move(fg));
  }
  return groups;
}

jit::Pointwise FusionGroup::kernel() const {
  std::vector<std::string> ins, sc;
  for (size_t k = 0; k < inputs.size(); ++k) ins.push_back(fmt::format("i{}", k));
  for (size_t k = 0; k < scalars.size(); ++k) sc.push_back(fmt::format("s{}", k));
  return jit::pointwise(
      {.name = name, .inputs = ins, .scalars = sc, .outputs = {"out"}, .body = body});
}

}  // namespace mt
