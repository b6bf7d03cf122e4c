// SPDX-License-Identifier: MIT
#include "kernels/ops/pointwise_eval.h"

#include <cmath>
#include <map>
#include <mutex>

#include "kernels/ops.h"
#include "runtime/error.h"

namespace mt::ops {

using jit::expr::Fn;
using jit::expr::Node;
using jit::expr::Op;
using jit::expr::Program;

namespace {

std::vector<std::string> row_inputs(const ew::Row& r) {
  return r.arity == ew::Arity::Binary ? std::vector<std::string>{"x", "y"}
                                      : std::vector<std::string>{"x"};
}
std::vector<std::string> row_scalars(const ew::Row& r) {
  return r.arity == ew::Arity::Unary ? std::vector<std::string>{} : std::vector<std::string>{"s"};
}

struct RowPrograms {
  Program forward[ew::kNumFns];
  Program backward[ew::kNumFns];
  RowPrograms() {
    for (const ew::Row& r : ew::kRows) {
      const std::string name(r.name);
      forward[int(r.fn)] =
          jit::expr::parse(name, r.forward, row_inputs(r), row_scalars(r), {"out"}, false);
      std::vector<std::string> in = row_inputs(r), out = {"gx"};
      in.push_back("g");
      if (r.arity == ew::Arity::Binary) out.push_back("gy");
      backward[int(r.fn)] =
          jit::expr::parse(name + "_backward", r.backward, in, row_scalars(r), out, false);
    }
  }
};

const RowPrograms& rows() {
  static const RowPrograms r;
  return r;
}

// A value of the evaluation: a tensor, or a number where no tensor was involved.
struct Val {
  Tensor t;
  double d = 0;
  bool tensor() const { return t.defined(); }
};
Val num(double d) {
  Val v;
  v.d = d;
  return v;
}
Val ten(Tensor t) {
  Val v;
  v.t = std::move(t);
  return v;
}

double number_call(Fn f, double x, double y) {
  switch (f) {
    case Fn::Exp:
      return std::exp(x);
    case Fn::Log:
      return std::log(x);
    case Fn::Sqrt:
      return std::sqrt(x);
    case Fn::Rsqrt:
      return 1 / std::sqrt(x);
    case Fn::Tanh:
      return std::tanh(x);
    case Fn::Sin:
      return std::sin(x);
    case Fn::Cos:
      return std::cos(x);
    case Fn::Abs:
      return std::fabs(x);
    case Fn::Erf:
      return std::erf(x);
    case Fn::Floor:
      return std::floor(x);
    case Fn::Ceil:
      return std::ceil(x);
    case Fn::Log1p:
      return std::log1p(x);
    case Fn::Expm1:
      return std::expm1(x);
    case Fn::Sigmoid:
      return 1 / (1 + std::exp(-x));
    case Fn::Max:
      return std::fmax(x, y);
    case Fn::Min:
      return std::fmin(x, y);
    case Fn::Pow:
      return std::pow(x, y);
    case Fn::Sign:
      return x > 0 ? 1 : x < 0 ? -1 : x * 0;
    case Fn::Relu:
      return x < 0 ? 0 : x;
  }
  return x;
}

class OpsEvaluator {
 public:
  OpsEvaluator(std::string_view op, const Program& p, std::span<const Tensor> in,
               std::span<const double> scalars)
      : op_(op),
        p_(p),
        in_(in),
        scalars_(scalars),
        vals_(p.nodes.size()),
        done_(p.nodes.size(), false) {}

  Val get(int i) {
    if (!done_[size_t(i)]) {
      vals_[size_t(i)] = compute(p_.nodes[size_t(i)]);
      done_[size_t(i)] = true;
    }
    return vals_[size_t(i)];
  }

 private:
  [[noreturn]] void no_op(std::string_view what) const {
    MT_ERROR(
        "[{}] the expression '{}' uses {} on tensors, which has no dispatched op to "
        "evaluate it with; write it with + - * /, exp, log, sqrt, tanh, sigmoid, abs, "
        "sign, relu and pow(x, number)",
        op_, p_.body, what);
  }

  Val compute(const Node& n) {
    switch (n.op) {
      case Op::Const:
        return num(n.value);
      case Op::Scalar:
        return num(scalars_[size_t(n.index)]);
      case Op::Input:
        return ten(in_[size_t(n.index)]);
      default:
        break;
    }
    const Val a = n.a >= 0 ? get(n.a) : Val{};
    if (n.op == Op::Select) {
      if (a.tensor()) no_op("a select on a tensor condition");
      return get(a.d != 0 ? n.b : n.c);
    }
    const Val b = n.b >= 0 ? get(n.b) : Val{};
    const bool any = a.tensor() || b.tensor();
    switch (n.op) {
      case Op::Neg:
        return a.tensor() ? ten(neg(a.t)) : num(-a.d);
      case Op::Add:
        if (!any) return num(a.d + b.d);
        if (!a.tensor()) return a.d == 0 ? b : ten(add(b.t, a.d));
        if (!b.tensor()) return b.d == 0 ? a : ten(add(a.t, b.d));
        return ten(add(a.t, b.t));
      case Op::Sub:
        if (!any) return num(a.d - b.d);
        if (!a.tensor()) return ten(a.d == 0 ? neg(b.t) : add(neg(b.t), a.d));
        if (!b.tensor()) return b.d == 0 ? a : ten(sub(a.t, b.d));
        return ten(sub(a.t, b.t));
      case Op::Mul:
        if (!any) return num(a.d * b.d);
        if (!a.tensor()) return a.d == 1 ? b : ten(mul(b.t, a.d));
        if (!b.tensor()) return b.d == 1 ? a : ten(mul(a.t, b.d));
        return ten(mul(a.t, b.t));
      case Op::Div:
        if (!any) return num(a.d / b.d);
        if (!a.tensor()) return ten(a.d == 1 ? pow(b.t, -1.0) : mul(pow(b.t, -1.0), a.d));
        if (!b.tensor()) return b.d == 1 ? a : ten(div(a.t, b.d));
        return ten(div(a.t, b.t));
      case Op::Not:
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
      case Op::Eq:
      case Op::Ne:
      case Op::And:
      case Op::Or:
        if (any) no_op("a comparison or logical operator");
        return num(compare(n.op, a.d, b.d));
      case Op::Call:
        return call(n.fn, a, b);
      default:
        break;
    }
    MT_ASSERT(false, "[{}] unknown expression node {}", op_, int(n.op));
    return {};
  }

  static double compare(Op op, double x, double y) {
    switch (op) {
      case Op::Not:
        return x == 0;
      case Op::Lt:
        return x < y;
      case Op::Le:
        return x <= y;
      case Op::Gt:
        return x > y;
      case Op::Ge:
        return x >= y;
      case Op::Eq:
        return x == y;
      case Op::Ne:
        return x != y;
      case Op::And:
        return x != 0 && y != 0;
      case Op::Or:
        return x != 0 || y != 0;
      default:
        return 0;
    }
  }

  Val call(Fn f, const Val& a, const Val& b) {
    if (!a.tensor() && !b.tensor()) return num(number_call(f, a.d, b.d));
    if (b.tensor() || !a.tensor()) {
      if (f == Fn::Pow) no_op("pow with a tensor exponent");
      no_op(fmt::format("{}() with a tensor second argument", jit::expr::fn_name(f)));
    }
    const Tensor& x = a.t;
    switch (f) {
      case Fn::Exp:
        return ten(exp(x));
      case Fn::Log:
        return ten(log(x));
      case Fn::Sqrt:
        return ten(sqrt(x));
      case Fn::Rsqrt:
        return ten(pow(x, -0.5));
      case Fn::Tanh:
        return ten(tanh(x));
      case Fn::Abs:
        return ten(abs(x));
      case Fn::Sigmoid:
        return ten(sigmoid(x));
      case Fn::Sign:
        return ten(sign(x));
      case Fn::Relu:
        return ten(relu(x));
      case Fn::Pow:
        return ten(pow(x, b.d));
      default:
        no_op(fmt::format("{}()", jit::expr::fn_name(f)));
    }
  }

  std::string_view op_;
  const Program& p_;
  std::span<const Tensor> in_;
  std::span<const double> scalars_;
  std::vector<Val> vals_;
  std::vector<bool> done_;
};

struct FormulaRegistry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const PointwiseFormula>, std::less<>> user;
  std::map<std::string, std::shared_ptr<const PointwiseFormula>, std::less<>> rows;
  FormulaRegistry() {
    for (const ew::Row& r : ew::kRows) {
      const std::string name = ew::op_name(r);
      if (name.empty()) continue;
      auto f = std::make_shared<PointwiseFormula>();
      f->tensors = r.tensor_operands();
      f->scalars =
          r.arity == ew::Arity::Scalar || (r.arity == ew::Arity::Binary && r.reads_scalar());
      f->program = row_forward(r.fn);
      this->rows.emplace(name, std::move(f));
    }
  }
};

FormulaRegistry& formulas() {
  static FormulaRegistry r;
  return r;
}

}  // namespace

const Program& row_forward(ew::Fn fn) { return rows().forward[int(fn)]; }
const Program& row_backward(ew::Fn fn) { return rows().backward[int(fn)]; }

bool reads_input(const Program& p, int input) {
  std::vector<bool> live(p.nodes.size(), false);
  for (int o : p.output_nodes) live[size_t(o)] = true;
  for (size_t i = p.nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    const Node& n = p.nodes[i];
    if (n.op == Op::Input && n.index == input) return true;
    for (int k : {n.a, n.b, n.c})
      if (k >= 0) live[size_t(k)] = true;
  }
  return false;
}

std::vector<Tensor> eval_with_ops(std::string_view op, const Program& p, std::span<const Tensor> in,
                                  std::span<const double> scalars, std::span<const bool> wanted) {
  MT_ASSERT(in.size() == p.inputs.size() && scalars.size() == p.scalars.size(),
            "[{}] eval_with_ops: {} inputs and {} scalars for a program of {} and {}", op,
            in.size(), scalars.size(), p.inputs.size(), p.scalars.size());
  OpsEvaluator ev(op, p, in, scalars);
  std::vector<Tensor> out(p.outputs.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (!wanted.empty() && !wanted[k]) continue;
    Val v = ev.get(p.output_nodes[k]);
    // A number (a zero gradient written as g * 0 folds to no tensor only when g is not
    // read): broadcast it over the first input.
    out[k] = v.tensor() ? v.t : add(mul(in[0], 0.0), v.d);
  }
  return out;
}

std::shared_ptr<const PointwiseFormula> pointwise_formula(std::string_view op) {
  FormulaRegistry& r = formulas();
  if (auto it = r.rows.find(op); it != r.rows.end()) return it->second;
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.user.find(op);
  return it == r.user.end() ? nullptr : it->second;
}

void set_pointwise_formula(std::string_view op, std::shared_ptr<const PointwiseFormula> f) {
  FormulaRegistry& r = formulas();
  std::lock_guard<std::mutex> lock(r.mu);
  if (f)
    r.user[std::string(op)] = std::move(f);
  else if (auto it = r.user.find(op); it != r.user.end())
    r.user.erase(it);
}

}  // namespace mt::ops
