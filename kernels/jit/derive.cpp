// SPDX-License-Identifier: MIT
#include "kernels/jit/derive.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "runtime/error.h"

namespace mt::jit::expr {

// Note [Deriving a backward]
// A parsed body is a list of single-assignment nodes, so its derivative is one reverse
// sweep, as a tape's backward is: each output's node starts with its incoming gradient,
// and each node, visited last to first, adds its partial derivatives times its own
// gradient to its operands' (d(a*b) gives b g to a and a g to b; d exp(a) gives exp(a) g,
// reusing the forward node). The new nodes are appended to a copy of the forward nodes,
// so a gradient can read any forward value; a builder shares equal nodes and folds what
// is constant (x*1, x+0, --x, a select on a constant), and a last pass drops the forward
// nodes no gradient reads. Only nodes that depend on an input tensor carry a gradient:
// scalars are not differentiated (they are not tensors), and piecewise-constant values
// (comparisons, logic, sign, a select's condition) stop the sweep, as PyTorch's zero
// gradients do. floor and ceil would give a zero gradient everywhere, which is never what
// a user means by differentiating through them, so they are an error that asks for a
// written backward. The result is again a Program, so it has a derivative of its own: an
// mt::pointwise_op differentiates any number of times.

namespace {

bool finite_const(double v) { return std::isfinite(v); }

// Appends nodes to a program, sharing equal ones and folding constants.
class Builder {
 public:
  explicit Builder(Program& p) : p_(p) {
    for (size_t i = 0; i < p_.nodes.size(); ++i) seen_.emplace(key(p_.nodes[i]), int(i));
  }

  int make(Node n) {
    if (const int folded = fold(n); folded >= 0) return folded;
    auto k = key(n);
    if (auto it = seen_.find(k); it != seen_.end()) return it->second;
    p_.nodes.push_back(n);
    const int i = int(p_.nodes.size()) - 1;
    seen_.emplace(k, i);
    return i;
  }

  int constant(double v) { return make(Node{.op = Op::Const, .value = v}); }
  int unary(Op op, int a) { return make(Node{.op = op, .a = a}); }
  int binary(Op op, int a, int b) { return make(Node{.op = op, .a = a, .b = b}); }
  int select(int c, int a, int b) { return make(Node{.op = Op::Select, .a = c, .b = a, .c = b}); }
  int call(Fn f, int a, int b = -1) { return make(Node{.op = Op::Call, .fn = f, .a = a, .b = b}); }
  int neg(int a) { return unary(Op::Neg, a); }
  int add(int a, int b) { return binary(Op::Add, a, b); }
  int sub(int a, int b) { return binary(Op::Sub, a, b); }
  int mul(int a, int b) { return binary(Op::Mul, a, b); }
  int div(int a, int b) { return binary(Op::Div, a, b); }

 private:
  using Key = std::tuple<int, int, int, int, int, int, uint64_t>;
  static Key key(const Node& n) {
    return {int(n.op),
            n.op == Op::Call ? int(n.fn) : 0,
            n.a,
            n.b,
            n.c,
            n.index,
            n.op == Op::Const ? std::bit_cast<uint64_t>(n.value) : 0};
  }

  bool is_const(int i, double* v = nullptr) const {
    if (i < 0 || p_.nodes[size_t(i)].op != Op::Const) return false;
    if (v) *v = p_.nodes[size_t(i)].value;
    return true;
  }
  bool is(int i, double value) const {
    double v;
    return is_const(i, &v) && v == value;
  }
  int folded_const(double v) { return finite_const(v) ? constant(v) : -1; }

  // A node equal in value to n, or -1. Never drops a NaN or infinity a term would give:
  // x*0 stays (x may be infinite), and a constant that folds to a non-finite value stays
  // an expression.
  int fold(const Node& n) {
    double x = 0, y = 0;
    const bool ca = is_const(n.a, &x), cb = is_const(n.b, &y);
    switch (n.op) {
      case Op::Neg:
        if (ca) return folded_const(-x);
        if (p_.nodes[size_t(n.a)].op == Op::Neg) return p_.nodes[size_t(n.a)].a;
        return -1;
      case Op::Add:
        if (ca && cb) return folded_const(x + y);
        if (is(n.a, 0)) return n.b;
        if (is(n.b, 0)) return n.a;
        if (p_.nodes[size_t(n.b)].op == Op::Neg) return sub(n.a, p_.nodes[size_t(n.b)].a);
        if (p_.nodes[size_t(n.a)].op == Op::Neg) return sub(n.b, p_.nodes[size_t(n.a)].a);
        return -1;
      case Op::Sub:
        if (ca && cb) return folded_const(x - y);
        if (is(n.b, 0)) return n.a;
        if (is(n.a, 0)) return neg(n.b);
        return -1;
      case Op::Mul:
        if (ca && cb) return folded_const(x * y);
        if (is(n.a, 1)) return n.b;
        if (is(n.b, 1)) return n.a;
        if (is(n.a, -1)) return neg(n.b);
        if (is(n.b, -1)) return neg(n.a);
        return -1;
      case Op::Div:
        if (ca && cb && y != 0) return folded_const(x / y);
        if (is(n.b, 1)) return n.a;
        return -1;
      case Op::Lt:
        return ca && cb ? constant(x < y) : -1;
      case Op::Le:
        return ca && cb ? constant(x <= y) : -1;
      case Op::Gt:
        return ca && cb ? constant(x > y) : -1;
      case Op::Ge:
        return ca && cb ? constant(x >= y) : -1;
      case Op::Eq:
        return ca && cb ? constant(x == y) : -1;
      case Op::Ne:
        return ca && cb ? constant(x != y) : -1;
      case Op::Select:
        if (ca) return x != 0 ? n.b : n.c;
        if (n.b == n.c) return n.b;
        return -1;
      default:
        return -1;
    }
  }

  Program& p_;
  std::map<Key, int> seen_;
};

// The line of `body` holding pos, with a caret under pos.
std::string caret(std::string_view body, size_t pos) {
  pos = std::min(pos, body.size());
  size_t start = body.rfind('\n', pos == 0 ? 0 : pos - 1);
  start = start == std::string_view::npos || pos == 0 ? 0 : start + 1;
  size_t end = body.find('\n', start);
  if (end == std::string_view::npos) end = body.size();
  std::string line;
  for (char c : body.substr(start, end - start))
    line += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
  return fmt::format("\n  {}\n  {}^", line, std::string(pos - start, ' '));
}

std::string unique_name(std::string name, const std::set<std::string>& taken) {
  while (taken.count(name)) name += "_";
  return name;
}

}  // namespace

Program simplify(const Program& p) {
  // Rebuild through the builder (folding and sharing), then keep what an output reads.
  Program q;
  q.inputs = p.inputs;
  q.scalars = p.scalars;
  q.outputs = p.outputs;
  std::vector<int> map(p.nodes.size(), -1);
  {
    Builder b(q);
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      Node n = p.nodes[i];
      if (n.a >= 0) n.a = map[size_t(n.a)];
      if (n.b >= 0) n.b = map[size_t(n.b)];
      if (n.c >= 0) n.c = map[size_t(n.c)];
      map[i] = b.make(n);
    }
  }
  std::vector<bool> live(q.nodes.size(), false);
  for (int o : p.output_nodes) live[size_t(map[size_t(o)])] = true;
  for (size_t i = q.nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (int k : {q.nodes[i].a, q.nodes[i].b, q.nodes[i].c})
      if (k >= 0) live[size_t(k)] = true;
  }
  Program r;
  r.inputs = q.inputs;
  r.scalars = q.scalars;
  r.outputs = q.outputs;
  std::vector<int> renum(q.nodes.size(), -1);
  for (size_t i = 0; i < q.nodes.size(); ++i) {
    if (!live[i]) continue;
    Node n = q.nodes[i];
    if (n.a >= 0) n.a = renum[size_t(n.a)];
    if (n.b >= 0) n.b = renum[size_t(n.b)];
    if (n.c >= 0) n.c = renum[size_t(n.c)];
    r.nodes.push_back(n);
    renum[i] = int(r.nodes.size()) - 1;
  }
  for (int o : p.output_nodes) r.output_nodes.push_back(renum[size_t(map[size_t(o)])]);
  r.body = to_text(r);
  return r;
}

Program derivative(std::string_view op, const Program& p) {
  Program d;
  d.scalars = p.scalars;
  d.inputs = p.inputs;
  d.nodes = p.nodes;
  std::set<std::string> taken(p.inputs.begin(), p.inputs.end());
  taken.insert(p.scalars.begin(), p.scalars.end());
  taken.insert(p.outputs.begin(), p.outputs.end());
  std::vector<std::string> grad_in;
  for (const std::string& o : p.outputs) {
    grad_in.push_back(unique_name(p.outputs.size() == 1 ? "grad" : "grad_" + o, taken));
    taken.insert(grad_in.back());
  }
  for (const std::string& in : p.inputs) {
    d.outputs.push_back(unique_name("grad_" + in, taken));
    taken.insert(d.outputs.back());
  }
  d.inputs.insert(d.inputs.end(), grad_in.begin(), grad_in.end());

  Builder b(d);
  const size_t n = p.nodes.size();
  // Which nodes carry a gradient: those whose value changes smoothly with an input.
  std::vector<bool> dep(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = p.nodes[i];
    auto d_of = [&](int k) { return k >= 0 && dep[size_t(k)]; };
    switch (nd.op) {
      case Op::Input:
        dep[i] = true;
        break;
      case Op::Const:
      case Op::Scalar:
        break;
      case Op::Not:
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
      case Op::Eq:
      case Op::Ne:
      case Op::And:
      case Op::Or:
        break;  // piecewise constant
      case Op::Select:
        dep[i] = d_of(nd.b) || d_of(nd.c);
        break;
      case Op::Call:
        if (nd.fn == Fn::Sign) break;
        if ((nd.fn == Fn::Floor || nd.fn == Fn::Ceil) && d_of(nd.a))
          MT_ERROR(
              "[{}] {}() has no derivative to differentiate through (it is flat almost "
              "everywhere); give the backward yourself (PointwiseOpOptions::backward) or "
              "make the op non-differentiable (.differentiable = false){}",
              op, fn_name(nd.fn), caret(p.body, size_t(std::max(nd.pos, 0))));
        dep[i] = d_of(nd.a) || d_of(nd.b);
        break;
      default:
        dep[i] = d_of(nd.a) || d_of(nd.b);
        break;
    }
  }
  std::vector<int> adj(n, -1);
  auto acc = [&](int k, int g) {
    if (k < 0 || !dep[size_t(k)]) return;
    adj[size_t(k)] = adj[size_t(k)] < 0 ? g : b.add(adj[size_t(k)], g);
  };
  for (size_t k = 0; k < p.output_nodes.size(); ++k)
    acc(p.output_nodes[k], b.make(Node{.op = Op::Input, .index = int(p.inputs.size() + k)}));

  for (size_t i = n; i-- > 0;) {
    if (adj[i] < 0) continue;
    const Node nd = p.nodes[i];  // a copy: the builder appends to d.nodes
    const int g = adj[i], v = int(i), a = nd.a, c2 = nd.b;
    const int zero = b.constant(0), one = b.constant(1);
    switch (nd.op) {
      case Op::Neg:
        acc(a, b.neg(g));
        break;
      case Op::Add:
        acc(a, g);
        acc(c2, g);
        break;
      case Op::Sub:
        acc(a, g);
        acc(c2, b.neg(g));
        break;
      case Op::Mul:
        acc(a, b.mul(g, c2));
        acc(c2, b.mul(g, a));
        break;
      case Op::Div:
        acc(a, b.div(g, c2));
        acc(c2, b.neg(b.div(b.mul(g, a), b.mul(c2, c2))));
        break;
      case Op::Select:
        acc(nd.b, b.select(nd.a, g, zero));
        acc(nd.c, b.select(nd.a, zero, g));
        break;
      case Op::Call:
        switch (nd.fn) {
          case Fn::Exp:
            acc(a, b.mul(g, v));
            break;
          case Fn::Log:
            acc(a, b.div(g, a));
            break;
          case Fn::Sqrt:
            acc(a, b.div(g, b.mul(v, b.constant(2))));
            break;
          case Fn::Rsqrt:
            acc(a, b.mul(g, b.div(b.mul(b.constant(-0.5), v), a)));
            break;
          case Fn::Tanh:
            acc(a, b.mul(g, b.sub(one, b.mul(v, v))));
            break;
          case Fn::Sin:
            acc(a, b.mul(g, b.call(Fn::Cos, a)));
            break;
          case Fn::Cos:
            acc(a, b.neg(b.mul(g, b.call(Fn::Sin, a))));
            break;
          case Fn::Abs:
            acc(a, b.mul(g, b.call(Fn::Sign, a)));
            break;
          case Fn::Erf:  // 2/sqrt(pi) exp(-a^2)
            acc(a, b.mul(g, b.mul(b.constant(1.1283791670955126),
                                  b.call(Fn::Exp, b.neg(b.mul(a, a))))));
            break;
          case Fn::Log1p:
            acc(a, b.div(g, b.add(one, a)));
            break;
          case Fn::Expm1:
            acc(a, b.mul(g, b.add(v, one)));
            break;
          case Fn::Sigmoid:
            acc(a, b.mul(g, b.sub(v, b.mul(v, v))));
            break;
          case Fn::Relu:
            acc(a, b.select(b.binary(Op::Gt, a, zero), g, zero));
            break;
          case Fn::Max:
          case Fn::Min: {
            // fmax/fmin return the other operand when one is NaN
            const int pick_a = b.binary(Op::Or, b.binary(nd.fn == Fn::Max ? Op::Ge : Op::Le, a, c2),
                                        b.binary(Op::Ne, c2, c2));
            acc(a, b.select(pick_a, g, zero));
            acc(c2, b.select(pick_a, zero, g));
            break;
          }
          case Fn::Pow:
            // d/da a^e = e a^(e-1), exactly 0 for e == 0 (not 0 * a^-1, NaN at a = 0)
            acc(a, b.select(b.binary(Op::Eq, c2, zero), zero,
                            b.mul(g, b.mul(c2, b.call(Fn::Pow, a, b.sub(c2, one))))));
            // d/de a^e = a^e log(a); exactly 0 at a = 0 for e >= 0 (not 0 * -inf)
            acc(c2,
                b.select(b.binary(Op::And, b.binary(Op::Eq, a, zero), b.binary(Op::Ge, c2, zero)),
                         zero, b.mul(g, b.mul(v, b.call(Fn::Log, a)))));
            break;
          case Fn::Floor:
          case Fn::Ceil:
          case Fn::Sign:
            break;  // no gradient flows (dep)
        }
        break;
      default:
        break;  // leaves and piecewise-constant nodes
    }
  }
  // An input's gradient: the adjoint of its leaf (one leaf per input), or zero.
  d.output_nodes.assign(p.inputs.size(), -1);
  for (size_t i = 0; i < n; ++i)
    if (p.nodes[i].op == Op::Input && adj[i] >= 0) {
      int& slot = d.output_nodes[size_t(p.nodes[i].index)];
      slot = slot < 0 ? adj[i] : b.add(slot, adj[i]);
    }
  for (int& o : d.output_nodes)
    if (o < 0) o = b.constant(0);
  return simplify(d);
}

namespace {

// An expression without its outer parentheses, where they enclose all of it.
std::string strip_parens(std::string e) {
  if (e.size() < 2 || e.front() != '(' || e.back() != ')') return e;
  int depth = 0;
  for (size_t i = 0; i + 1 < e.size(); ++i) {
    depth += e[i] == '(' ? 1 : e[i] == ')' ? -1 : 0;
    if (depth == 0) return e;  // the first '(' closes before the end
  }
  return e.substr(1, e.size() - 2);
}

// Writes p's nodes as text: a node read more than once becomes a statement `NAME = ...;`
// appended to body (NAME from temp(i)), the others are inlined. Returns each output's
// expression.
template <typename Temp>
std::vector<std::string> emit(const Program& p, const std::vector<std::string>& in,
                              const std::vector<std::string>& sc, Temp&& temp, std::string& body) {
  std::vector<int> uses(p.nodes.size(), 0);
  for (const Node& nd : p.nodes)
    for (int k : {nd.a, nd.b, nd.c})
      if (k >= 0) ++uses[size_t(k)];
  std::vector<std::string> text(p.nodes.size());
  auto number = [](double v) -> std::string {
    if (std::isnan(v)) return "(0.0 / 0.0)";
    if (std::isinf(v)) return v > 0 ? "(1.0 / 0.0)" : "(-1.0 / 0.0)";
    std::string s = fmt::format("{:.17g}", v);
    return v < 0 || (v == 0 && std::signbit(v)) ? "(" + s + ")" : s;
  };
  static const std::map<Op, const char*> kBin = {{Op::Add, "+"}, {Op::Sub, "-"},  {Op::Mul, "*"},
                                                 {Op::Div, "/"}, {Op::Lt, "<"},   {Op::Le, "<="},
                                                 {Op::Gt, ">"},  {Op::Ge, ">="},  {Op::Eq, "=="},
                                                 {Op::Ne, "!="}, {Op::And, "&&"}, {Op::Or, "||"}};
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& nd = p.nodes[i];
    auto t = [&](int k) { return text[size_t(k)]; };
    std::string e;
    switch (nd.op) {
      case Op::Const:
        e = number(nd.value);
        break;
      case Op::Input:
        e = in[size_t(nd.index)];
        break;
      case Op::Scalar:
        e = sc[size_t(nd.index)];
        break;
      case Op::Neg:
        e = fmt::format("(-{})", t(nd.a));
        break;
      case Op::Not:
        e = fmt::format("(!{})", t(nd.a));
        break;
      case Op::Select:
        e = fmt::format("({} ? {} : {})", t(nd.a), t(nd.b), t(nd.c));
        break;
      case Op::Call:
        e = nd.b < 0 ? fmt::format("{}({})", fn_name(nd.fn), strip_parens(t(nd.a)))
                     : fmt::format("{}({}, {})", fn_name(nd.fn), strip_parens(t(nd.a)),
                                   strip_parens(t(nd.b)));
        break;
      default:
        e = fmt::format("({} {} {})", t(nd.a), kBin.at(nd.op), t(nd.b));
        break;
    }
    const bool leaf = nd.op == Op::Const || nd.op == Op::Input || nd.op == Op::Scalar;
    if (!leaf && uses[i] > 1) {
      std::string name = temp(i);
      body += fmt::format("{} = {};\n", name, strip_parens(e));
      text[i] = std::move(name);
    } else {
      text[i] = std::move(e);
    }
  }
  std::vector<std::string> outs;
  for (int o : p.output_nodes) outs.push_back(strip_parens(text[size_t(o)]));
  return outs;
}

}  // namespace

std::string to_text(const Program& p) {
  std::set<std::string> taken(p.inputs.begin(), p.inputs.end());
  taken.insert(p.scalars.begin(), p.scalars.end());
  taken.insert(p.outputs.begin(), p.outputs.end());
  std::string body;
  auto temp = [&](size_t i) {
    std::string name = unique_name(fmt::format("_t{}", i), taken);
    taken.insert(name);
    return name;
  };
  const auto outs = emit(p, p.inputs, p.scalars, temp, body);
  for (size_t k = 0; k < p.outputs.size(); ++k)
    body += fmt::format("{} = {};\n", p.outputs[k], outs[k]);
  return body;
}

std::string inline_text(const Program& p, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& scalars, std::string_view prefix,
                        std::string& body) {
  auto temp = [&](size_t i) { return fmt::format("{}_{}", prefix, i); };
  return emit(p, inputs, scalars, temp, body)[0];
}

}  // namespace mt::jit::expr
