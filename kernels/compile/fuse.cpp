// SPDX-License-Identifier: MIT
// Pointwise fusion: chains of elementwise op calls in a captured graph become one
// generated kernel each, written as a jit::pointwise expression, or as the map of a
// jit::reduction when the sum or mean that reads the chain's result joins it.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "kernels/compile/compile.h"
#include "kernels/jit/derive.h"
#include "kernels/ops/pointwise_eval.h"
#include "runtime/view.h"

namespace mt {

// Note [Pointwise fusion]
// A node is fusable when it is a functional elementwise op with a formula (the
// elementwise table's unary, scalar and binary ops, users' pointwise ops, an op folder's
// elementwise op such as mt::silu_backward, and casts between floating dtypes), reads and makes
// floating tensors, writes nothing and returns no view. Walking the nodes in order, a fusable node
// absorbs the group of each fusable producer of its arguments whose output (the producer group's
// result) is used exactly once (by it: not twice, not returned, not left as a .grad), so a group is
// a tree whose root is its last node and whose intermediates nobody else sees. The group runs where
// its root was, so a merge is refused when a node in between writes memory that a member reads (its
// alias_root), and when the kernel would pass the pointwise builder's limits (7 inputs). Every
// value in a group has one dtype T; the group's inputs may be of other floating dtypes only when
// their promotion is T, since jit::Pointwise converts its inputs to the promoted dtype (a cast node
// in front is then what it did anyway). Broadcasting needs no care: elementwise ops commute with
// it, and the kernel broadcasts its inputs to the root's shape. A one-element filled factory (the
// backward's seed) joins a group as a literal. Matmuls, views, in-place ops and the other
// reductions stay calls; an mt::sum or mt::mean can end a group (Note [Reduction fusion]).

// Note [Reduction fusion]
// After the pointwise groups have formed, an mt::sum or mt::mean node (every dim, or a
// dims list, with keepdim) whose input is the root of a group, or a lone fusable node, used
// by it alone joins that group, and the group runs as one jit::reduction at the
// reduction's place: map = the group's expression, reduce = sum, post = "acc / n" for a
// mean. The rules are the group merge's: single use, no member moved past a write to
// memory it reads or past an op tagged side_effect, the group's inputs promoting to its
// dtype T. The reduction's own dtype rules are eager's: sum and mean of a floating T give T,
// accumulated in float for float16, bfloat16 and float32 and in double for float64
// (jit::reduction's rule too), so no dtype is refused. The map's values are not rounded to
// T before they are summed (a fused group never rounds between its members), and the
// summation order is jit::reduction's (Note [Reductions]) rather than mt::sum's (Note
// [Reduction plan]), so results equal eager's within float tolerance, not bitwise. The
// reduction has no scalar slots, so the group's scalars become literals of its map. A
// reduction whose input is no fusable node, or is read by something else too, stays a call.

namespace {

using Formula = ops::PointwiseFormula;

// The formula of the one fusable op that has none of its own: a cast between floating
// dtypes (the kernel converts its inputs anyway).
std::shared_ptr<const Formula> extra_formula(std::string_view op) {
  auto make = [](std::vector<std::string> in, const char* body) {
    auto f = std::make_shared<Formula>();
    f->tensors = int(in.size());
    f->program = jit::expr::parse("fusion", body, std::move(in), {}, {"out"}, false);
    return std::shared_ptr<const Formula>(std::move(f));
  };
  static const auto cast = make({"x"}, "x");
  if (op == "mt::to.dtype") return cast;
  return nullptr;
}

// The formula of a node: its op's, from the elementwise rows, users' pointwise ops and
// the op folders (ops::pointwise_formula), or the cast above; null for a factory (a fill, a
// literal) and for every other op.
std::shared_ptr<const Formula> formula_of(const GraphNode& n) {
  if (n.is_factory()) return nullptr;
  const std::string name = n.op.name().str();
  if (auto f = ops::pointwise_formula(name)) return f;
  return extra_formula(name);
}

// How many tensor operands a member reads: a fill reads none.
int tensor_operands(const GraphNode& n) {
  const auto f = formula_of(n);
  return f ? f->tensors : 0;
}

bool fusable(const Graph& g, const GraphNode& n) {
  if (n.is_factory()) {  // a one-element fill joins as a literal
    if (!n.fill || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
    const GraphValue& out = g.values[size_t(n.outputs[0])];
    return is_floating(out.dtype) && out.alias_root == n.outputs[0] && shape_numel(out.sizes) == 1;
  }
  const auto f = formula_of(n);
  if (!f || !n.mutated.empty() || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
  const GraphValue& out = g.values[size_t(n.outputs[0])];
  if (!is_floating(out.dtype) || out.alias_root != n.outputs[0]) return false;
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

// The dims and keepdim of an mt::sum or mt::mean node (self, int[] dim, bool keepdim);
// nullopt for any other node.
struct ReductionArgs {
  bool mean = false;
  std::vector<int64_t> dims;
  bool keepdim = false;
};
std::optional<ReductionArgs> reduction_args(const GraphNode& n) {
  if (n.is_factory() || !n.mutated.empty() || n.outputs.size() != 1 || n.outputs[0] < 0)
    return std::nullopt;
  const std::string name = n.op.name().str();
  if (name != "mt::sum" && name != "mt::mean") return std::nullopt;
  if (n.args.empty() || n.args.size() > 3 || n.args[0].kind != GraphArg::Kind::Tensor)
    return std::nullopt;
  ReductionArgs r;
  r.mean = name == "mt::mean";
  if (n.args.size() > 1) {
    const GraphArg& d = n.args[1];
    if (d.kind != GraphArg::Kind::Constant || !d.constant.is_int_list()) return std::nullopt;
    r.dims = d.constant.to_int_list();
  }
  if (n.args.size() > 2) {
    const GraphArg& k = n.args[2];
    if (k.kind != GraphArg::Kind::Constant || !k.constant.is_bool()) return std::nullopt;
    r.keepdim = k.constant.to_bool();
  }
  return r;
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
      const int nt = tensor_operands(g.nodes[size_t(m)]);
      for (int k = 0; k < nt; ++k) {
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
  // Whether running the members `ms` (sorted) at node `at` moves one past an op tagged
  // side_effect (Note [Tags in compile] in replay.cpp).
  auto crosses_side_effect = [&](const std::vector<int>& ms, int at) {
    for (int k = ms.front() + 1; k < at; ++k) {
      const OperatorEntry* e = g.nodes[size_t(k)].op.entry();
      if (e != nullptr && e->tags().has(Tag::side_effect)) return true;
    }
    return false;
  };
  // Whether running the members `ms` at node `at` moves a read of one of their external
  // inputs `ext` past a write to its memory.
  auto moves_past_write = [&](const std::vector<int>& ms, const std::vector<int>& ext, int at) {
    for (int m : ms) {
      const int nm = tensor_operands(g.nodes[size_t(m)]);
      for (int a = 0; a < nm; ++a) {
        const int e = g.nodes[size_t(m)].args[size_t(a)].value;
        if (std::find(ext.begin(), ext.end(), e) != ext.end() && written_between(e, m, at))
          return true;
      }
    }
    return false;
  };

  for (size_t i = 0; i < nn; ++i) {
    if (!ok[i]) continue;
    const GraphNode& n = g.nodes[i];
    const DType t = g.values[size_t(n.outputs[0])].dtype;
    const int nt = tensor_operands(n);
    for (int k = 0; k < nt; ++k) {
      const int v = n.args[size_t(k)].value;
      const int p = g.values[size_t(v)].producer;
      if (p < 0 || !ok[size_t(p)] || members[size_t(p)].empty() || uses[size_t(v)] != 1) continue;
      if (g.values[size_t(v)].dtype != t) continue;
      std::vector<int> merged = members[size_t(p)];
      merged.insert(merged.end(), members[i].begin(), members[i].end());
      std::sort(merged.begin(), merged.end());
      // A group runs at its root: never move a member past an op tagged side_effect.
      if (crosses_side_effect(merged, int(i))) continue;
      const std::vector<int> ext = externals(merged);
      if (ext.size() > 7) continue;
      if (!ext.empty()) {
        DType promoted = g.values[size_t(ext[0])].dtype;
        for (int e : ext) promoted = promote_types(promoted, g.values[size_t(e)].dtype);
        if (promoted != t) continue;
      }
      if (moves_past_write(merged, ext, int(i))) continue;
      members[i] = std::move(merged);
      members[size_t(p)].clear();
    }
  }

  // Note [Reduction fusion]: a sum or mean absorbs the group whose root it alone reads.
  std::vector<int> reduction_of(nn, -1);  // by the reduction node: the root it absorbed
  for (size_t i = 0; i < nn; ++i) {
    const GraphNode& n = g.nodes[i];
    const auto r = reduction_args(n);
    if (!r) continue;
    const int v = n.args[0].value, out = n.outputs[0];
    const int p = g.values[size_t(v)].producer;
    if (p < 0 || !ok[size_t(p)] || members[size_t(p)].empty() || uses[size_t(v)] != 1) continue;
    if (g.nodes[size_t(p)].is_factory()) continue;
    const DType t = g.values[size_t(v)].dtype;
    if (g.values[size_t(out)].dtype != t ||
        g.values[size_t(out)].device != g.values[size_t(v)].device)
      continue;
    const std::vector<int>& ms = members[size_t(p)];
    if (crosses_side_effect(ms, int(i))) continue;
    const std::vector<int> ext = externals(ms);
    if (ext.empty() || ext.size() > 7) continue;
    DType promoted = g.values[size_t(ext[0])].dtype;
    Shape shape = g.values[size_t(ext[0])].sizes;  // the map runs over the inputs' shape
    for (int e : ext) {
      promoted = promote_types(promoted, g.values[size_t(e)].dtype);
      shape = detail::broadcast_shapes(shape, g.values[size_t(e)].sizes, "fusion");
    }
    if (promoted != t || shape != g.values[size_t(v)].sizes) continue;
    if (moves_past_write(ms, ext, int(i))) continue;
    members[i] = ms;
    members[i].push_back(int(i));
    members[size_t(p)].clear();
    reduction_of[i] = p;
  }

  std::vector<FusionGroup> groups;
  for (size_t i = 0; i < nn; ++i) {
    if (members[i].size() < 2) continue;
    FusionGroup fg;
    const bool reduce = reduction_of[i] >= 0;
    fg.nodes = members[i];
    fg.output = g.nodes[i].outputs[0];
    const std::vector<int> map_nodes(fg.nodes.begin(), fg.nodes.end() - (reduce ? 1 : 0));
    const int root = reduce ? g.nodes[size_t(reduction_of[i])].outputs[0] : fg.output;
    fg.inputs = externals(map_nodes);
    if (fg.inputs.empty()) continue;  // nothing gives the kernel its shape: stays op calls
    // The kernel's output has its inputs' broadcast shape; a literal of more dims than
    // they have would be lost.
    Shape shape = g.values[size_t(fg.inputs[0])].sizes;
    for (int v : fg.inputs)
      shape = detail::broadcast_shapes(shape, g.values[size_t(v)].sizes, "fusion");
    if (shape != g.values[size_t(root)].sizes) continue;
    if (reduce) {
      const auto r = reduction_args(g.nodes[i]);
      fg.reduce = r->mean ? "mean" : "sum";
      fg.reduced = root;
      fg.dims = r->dims;
      fg.keepdim = r->keepdim;
    }
    std::vector<std::string> parts;
    std::string body;
    auto operand = [&](int v) {
      const int p = g.values[size_t(v)].producer;
      if (p >= 0 && std::find(fg.nodes.begin(), fg.nodes.end(), p) != fg.nodes.end())
        return fmt::format("t{}", p);
      const auto at = std::find(fg.inputs.begin(), fg.inputs.end(), v) - fg.inputs.begin();
      return fmt::format("i{}", at);
    };
    for (int m : map_nodes) {
      const GraphNode& n = g.nodes[size_t(m)];
      parts.push_back(short_op(n));
      if (n.is_factory()) {
        body += fmt::format("t{} = {:.17g};\n", m, *n.fill);
        continue;
      }
      const auto f = formula_of(n);
      // The member's program with its scalars bound: a 1 (add's alpha, and the alpha a
      // schema leaves out) folds away as a literal, others take one of the kernel's
      // scalar slots while there are any left.
      jit::expr::Program p = f->program;
      std::vector<std::string> in, sc(p.scalars.size());
      for (int k = 0; k < f->tensors; ++k) in.push_back(operand(n.args[size_t(k)].value));
      for (size_t k = 0; k < p.scalars.size(); ++k) {
        const double v =
            int(k) < f->scalars ? n.args[size_t(f->tensors) + k].constant.to_double() : 1.0;
        if (v != 1.0 && fg.scalars.size() < 8 && !reduce) {
          sc[k] = fmt::format("s{}", fg.scalars.size());
          fg.scalars.push_back(v);
          continue;
        }
        for (jit::expr::Node& node : p.nodes)
          if (node.op == jit::expr::Op::Scalar && node.index == int(k))
            node = jit::expr::Node{.op = jit::expr::Op::Const, .value = v};
      }
      p = jit::expr::simplify(p);
      const std::string e = jit::expr::inline_text(p, in, sc, fmt::format("t{}", m), body);
      body += fmt::format("t{} = {};\n", m, e);
    }
    body += fmt::format("return t{};", map_nodes.back());
    if (reduce) parts.push_back(fg.reduce);
    fg.body = std::move(body);
    fg.name = fmt::format("fused_{}", fmt::join(parts, "_"));
    groups.push_back(std::move(fg));
  }
  return groups;
}

jit::Pointwise FusionGroup::kernel() const {
  MT_CHECK(reduce.empty(),
           "[compile] fusion group {} ends in a reduction ({}); its kernel is reduction(), not "
           "kernel()",
           mt::quoted(name), reduce);
  std::vector<std::string> ins, sc;
  for (size_t k = 0; k < inputs.size(); ++k) ins.push_back(fmt::format("i{}", k));
  for (size_t k = 0; k < scalars.size(); ++k) sc.push_back(fmt::format("s{}", k));
  return jit::pointwise(
      {.name = name, .inputs = ins, .scalars = sc, .outputs = {"out"}, .body = body});
}

jit::Reduction FusionGroup::reduction() const {
  MT_CHECK(!reduce.empty(),
           "[compile] fusion group {} is pointwise; its kernel is kernel(), not reduction()",
           mt::quoted(name));
  std::vector<std::string> ins;
  for (size_t k = 0; k < inputs.size(); ++k) ins.push_back(fmt::format("i{}", k));
  return jit::reduction({.name = name,
                         .map = body,
                         .reduce = "sum",
                         .post = reduce == "mean" ? "acc / n" : "",
                         .inputs = ins});
}

}  // namespace mt
