// SPDX-License-Identifier: MIT
#include "kernels/ops/pointwise_op.h"

#include <fmt/format.h>

#include <mutex>

#include "autograd/autograd.h"
#include "dispatcher/dispatcher.h"
#include "dispatcher/library.h"
#include "kernels/jit/derive.h"
#include "kernels/jit/expr.h"
#include "kernels/jit/pointwise.h"
#include "kernels/ops.h"
#include "kernels/ops/pointwise_eval.h"

namespace mt {

// Note [Pointwise ops]
// A pointwise op is four boxed kernels around one jit::Pointwise: CPU and CUDA run it, Fake
// runs it on fake inputs (it then only works out the outputs' shape and dtype), and
// Autograd runs the op below itself and records a node whose backward calls the op's
// backward op, "<name>_backward": a pointwise op again, over the inputs and the output's
// gradient, made on first use from the derivative of the expression (or from the
// backward the user wrote). Being a dispatched op, it records a node of its own when
// create_graph is on, so the second derivative is the derivative of the backward, and so
// on. The backward's outputs have the broadcast shape and are summed down to each input's.
// The kernels hold a weak pointer to their state: a call already on its way through the
// dispatcher when the last handle goes (the dispatcher keeps the old table alive for it)
// gets an error, not a freed state. Nodes hold the state itself, so a backward still runs
// after the handle is gone, and the op stays registered while a graph through it lives.
struct PointwiseOp::State : std::enable_shared_from_this<PointwiseOp::State> {
  std::string name, expression;
  jit::Pointwise kernel;
  size_t n_in = 0, n_sc = 0, n_out = 0;
  bool differentiable = true;
  std::vector<std::string> given_backward;
  std::source_location loc;
  std::unique_ptr<Library> lib;
  OperatorHandle handle;
  std::mutex backward_mu;
  std::shared_ptr<State> backward;

  bool has_formula = false;  // set once this op's fusion formula is registered

  ~State() {
    if (has_formula) ops::set_pointwise_formula(name, nullptr);
    lib.reset();
  }

  const jit::expr::Program& program() const { return jit::expr::program_of(kernel); }
  State& backward_state();
  std::vector<Tensor> call_op(std::span<const Tensor> in, std::span<const double> sc) const;
};

namespace {

using State = PointwiseOp::State;

std::string schema_of(const State& st) {
  const jit::expr::Program& p = st.program();
  std::vector<std::string> args;
  for (const std::string& n : p.inputs) args.push_back("Tensor " + n);
  for (const std::string& n : p.scalars) args.push_back("float " + n);
  std::string ret = "Tensor";
  if (st.n_out > 1) {
    std::vector<std::string> r(st.n_out, "Tensor");
    ret = fmt::format("({})", fmt::join(r, ", "));
  }
  return fmt::format("{}({}) -> {}", st.name.substr(st.name.find("::") + 2), fmt::join(args, ", "),
                     ret);
}

// The tensors and numbers of a call, popped from the stack.
void pop_args(const State& st, Stack* s, std::vector<Tensor>& in, std::vector<double>& sc) {
  const size_t base = s->size() - st.n_in - st.n_sc;
  for (size_t i = 0; i < st.n_in; ++i) in.push_back((*s)[base + i].to_tensor());
  for (size_t j = 0; j < st.n_sc; ++j) sc.push_back((*s)[base + st.n_in + j].to_double());
  s->resize(base);
}

Tensor reduce_to(const Tensor& g, const Tensor& like) {
  if (!g.defined()) return g;
  Tensor r = g.sizes() == like.sizes() ? g : sum_to(g, like.sizes());
  return r.dtype() == like.dtype() ? r : r.to(like.dtype());
}

std::shared_ptr<State> make_state(std::string name, jit::PointwiseSpec spec, bool differentiable,
                                  std::vector<std::string> given_backward,
                                  std::source_location loc) {
  check_operator_name(name);
  auto st = std::make_shared<State>();
  st->name = name;
  st->expression = spec.body;
  spec.name = name;
  st->kernel = jit::pointwise(std::move(spec));
  const jit::expr::Program& p = jit::expr::program_of(st->kernel);
  st->n_in = p.inputs.size();
  st->n_sc = p.scalars.size();
  st->n_out = p.outputs.size();
  st->differentiable = differentiable;
  st->given_backward = std::move(given_backward);
  st->loc = loc;
  if (!st->given_backward.empty())
    MT_CHECK(st->given_backward.size() == st->n_in,
             "[{}] PointwiseOpOptions::backward has {} expression{}, but the op has {} input{} "
             "({}); give one gradient expression per input",
             name, st->given_backward.size(), st->given_backward.size() == 1 ? "" : "s", st->n_in,
             st->n_in == 1 ? "" : "s", fmt::join(p.inputs, ", "));

  const std::string ns = name.substr(0, name.find("::"));
  st->lib = std::make_unique<Library>(Library::Kind::Fragment, ns, std::nullopt, loc);
  st->lib->def(schema_of(*st), loc);
  st->handle = dispatcher().find_or_throw(name);
  std::weak_ptr<State> weak = st;
  auto lock = [weak, name] {
    std::shared_ptr<State> live = weak.lock();
    MT_CHECK(live != nullptr,
             "[{}] was dropped while this call was on its way (its last PointwiseOp handle was "
             "destroyed); keep the handle alive while the op is called",
             name);
    return live;
  };
  auto run = KernelFunction::boxed([lock](const OperatorHandle&, DispatchKeySet, Stack* s) {
    const std::shared_ptr<State> raw = lock();
    std::vector<Tensor> in;
    std::vector<double> sc;
    pop_args(*raw, s, in, sc);
    std::vector<Tensor> outs = raw->kernel.call(in, sc);
    for (const Tensor& t : outs) s->emplace_back(t);
  });
  st->lib->impl(name, DispatchKey::CPU, run, loc);
  st->lib->impl(name, DispatchKey::CUDA, run, loc);
  st->lib->impl(name, DispatchKey::Fake, run, loc);
  st->lib->impl(
      name, DispatchKey::Autograd,
      KernelFunction::boxed([lock](const OperatorHandle& op, DispatchKeySet ks, Stack* s) {
        const std::shared_ptr<State> raw = lock();
        const size_t base = s->size() - raw->n_in - raw->n_sc;
        std::vector<Tensor> in;
        std::vector<double> sc;
        for (size_t i = 0; i < raw->n_in; ++i) in.push_back((*s)[base + i].to_tensor());
        for (size_t j = 0; j < raw->n_sc; ++j) sc.push_back((*s)[base + raw->n_in + j].to_double());
        {
          ExcludeDispatchKeyGuard below(DispatchKey::Autograd);
          op.redispatch_boxed(ks.below(DispatchKey::Autograd), s);
        }
        if (!mt::detail::any_requires_grad(in)) return;
        if (!raw->differentiable) {
          size_t i = 0;
          while (!(in[i].defined() && in[i].requires_grad())) ++i;
          MT_ERROR(
              "[{}] was defined with .differentiable = false, but its input '{}' requires "
              "grad; detach it (x.detach()), or define the op with a backward",
              raw->name, raw->program().inputs[i]);
        }
        auto node = mt::detail::make_node(raw->name, in, raw->n_out);
        std::vector<mt::SavedTensor> saved;
        for (const Tensor& t : in) saved.emplace_back(t, false);
        node->backward = [st = raw, saved = std::move(saved), sc, shapes = in](
                             mt::Node& n, const std::vector<Tensor>& grads) {
          std::vector<Tensor> args;
          for (const mt::SavedTensor& t : saved)
            args.push_back(t.unpack(n.shared_from_this(), st->name));
          args.insert(args.end(), grads.begin(), grads.end());
          std::vector<Tensor> g = st->backward_state().call_op(args, sc);
          for (size_t i = 0; i < g.size(); ++i) g[i] = reduce_to(g[i], shapes[i]);
          return g;
        };
        for (size_t k = 0; k < raw->n_out; ++k)
          mt::detail::set_history((*s)[base + k].to_tensor(), node, uint32_t(k));
      }),
      loc);
  if (st->n_out == 1) {
    auto f = std::make_shared<ops::PointwiseFormula>();
    f->tensors = int(st->n_in);
    f->scalars = int(st->n_sc);
    f->program = p;
    ops::set_pointwise_formula(name, std::move(f));
    st->has_formula = true;
  }
  return st;
}

}  // namespace

State& State::backward_state() {
  std::lock_guard<std::mutex> lock(backward_mu);
  if (backward) return *backward;
  const jit::expr::Program& p = program();
  jit::expr::Program d;
  if (given_backward.empty()) {
    d = jit::expr::derivative(name, p);
  } else {
    // The user's expressions: inputs, then `grad`; one output per input.
    std::vector<std::string> in = p.inputs, out;
    in.push_back("grad");
    std::string body;
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      out.push_back("grad_" + p.inputs[i]);
      body += fmt::format("{} = {};\n", out.back(), given_backward[i]);
    }
    d = jit::expr::parse(name + "_backward", body, in, p.scalars, out, false);
  }
  backward = make_state(
      name + "_backward",
      {.name = {}, .inputs = d.inputs, .scalars = d.scalars, .outputs = d.outputs, .body = d.body},
      true, {}, loc);
  return *backward;
}

std::vector<Tensor> State::call_op(std::span<const Tensor> in, std::span<const double> sc) const {
  MT_CHECK(in.size() == n_in, "[{}] takes {} tensor{} ({}), got {}", name, n_in,
           n_in == 1 ? "" : "s", fmt::join(program().inputs, ", "), in.size());
  MT_CHECK(sc.size() == n_sc, "[{}] takes {} float argument{}{}{}, got {}", name, n_sc,
           n_sc == 1 ? "" : "s", n_sc ? " (" : "",
           n_sc ? fmt::format("{})", fmt::join(program().scalars, ", ")) : "", sc.size());
  Stack s;
  for (const Tensor& t : in) s.emplace_back(t);
  for (double d : sc) s.emplace_back(d);
  handle.call_boxed(&s);
  std::vector<Tensor> out;
  for (const Value& v : s) out.push_back(v.to_tensor());
  return out;
}

Tensor PointwiseOp::call(std::span<const Tensor> inputs, std::span<const double> scalars) const {
  MT_CHECK(state_ != nullptr,
           "[pointwise_op] this PointwiseOp is empty (default-constructed); "
           "make one with mt::pointwise_op(name, expression)");
  return state_->call_op(inputs, scalars)[0];
}

const std::string& PointwiseOp::name() const { return state_->name; }
std::string PointwiseOp::schema() const { return state_->handle.schema().str(); }
const std::string& PointwiseOp::expression() const { return state_->expression; }
std::string PointwiseOp::backward_body() const { return state_->backward_state().expression; }

PointwiseOp pointwise_op(std::string_view name, std::string_view expression,
                         PointwiseOpOptions options, std::source_location loc) {
  PointwiseOp op;
  op.state_ = make_state(std::string(name),
                         {.name = {},
                          .inputs = options.inputs,
                          .scalars = options.scalars,
                          .outputs = {"out"},
                          .body = std::string(expression)},
                         options.differentiable, options.backward, loc);
  // The backward now, so an expression with no derivative is an error here, not at the
  // first backward. Its own backward waits until a second derivative is asked for.
  if (options.differentiable) op.state_->backward_state();
  return op;
}

}  // namespace mt
