// SPDX-License-Identifier: MIT

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "autograd/autograd.h"
#include "dispatcher/dispatcher.h"
#include "dispatcher/library.h"
#include "kernels/jit/derive.h"
#include "kernels/jit/expr.h"
#include "kernels/ops.h"
#include "kernels/ops/pointwise_op.h"
#include "runtime/view.h"

namespace mt {

// Note [Reduction ops]
// A reduction op is four boxed kernels around one jit::Reduction, as a pointwise op is
// around a jit::Pointwise (Note [Pointwise ops]): CPU, CUDA and Fake run it (on fake inputs
// it only works out the output's shape and dtype), Autograd runs the op below itself and
// records a node. For out = post(acc, n), acc = sum over the reduced dims of map(x...),
//   d out / d x_i = d post / d acc (broadcast back over the reduced dims) * d map / d x_i,
// so the backward is: acc again (a second reduction op, "<name>_acc", the same map without
// post; skipped when post is acc itself), the gradient through post (a pointwise op
// "<name>_grad_post" over acc, grad and the scalar n), that broadcast back to the inputs'
// broadcast shape, and for each input a pointwise op "<name>_grad_<input>" over the inputs
// and that gradient, derived from the map (Note [Deriving a backward]), summed down to the
// input's shape. Every step is an op with a backward of its own, so with create_graph the
// second derivative is the derivative of these (for maps of up to 2 inputs: the pointwise
// kernels take 8 operands).
// Note [Reduction ops: max, min, prod]
// For the other reduce ops, d acc / d m_j (m = map(x...) over the broadcast shape) is a
// weight w_j that multiplies the broadcast gradient before d map / d x_i, as in PyTorch:
//   max, min: w = [m == acc] / (how many values of the group equal acc): ties split the
//     gradient evenly (torch's amax/amin and max() of everything). w is piecewise constant,
//     so it is computed without grad and the second derivative comes from d map / d x_i.
//     A group whose acc is NaN gets NaN gradients, as in PyTorch.
//   prod: w_j = the product of the group's other values: acc / m_j when the group has no
//     zero; with one zero, the product of the nonzero values at the zero and 0 elsewhere;
//     with more, 0 everywhere (torch's prod_backward). The product of the nonzero values nz
//     is a second reduction op "<name>_nz" over m (map "m == 0 ? 1 : m", whose own weight is
//     acc / m: it has no zeros) and w a pointwise op "<name>_w" over (m, nz, zero count),
//     nz / m without a zero (nz is acc there); both are differentiable, so a second
//     derivative is exact where the group has no zero (with a zero it misses the cross
//     terms; torch's is exact).
// The map as a pointwise op is "<name>_map", the weight "<name>_w".
struct ReductionOp::State {
  std::string name;
  jit::Reduction kernel;
  size_t n_in = 0;
  bool differentiable = true;
  std::source_location loc;
  std::unique_ptr<Library> lib;
  OperatorHandle handle;
  // the backward's ops, made with the op
  std::shared_ptr<State> acc_op;  // map without post, when post is not acc
  std::optional<PointwiseOp> grad_post;
  std::vector<PointwiseOp> grad_map;  // one per input
  // max, min, prod (Note [Reduction ops: max, min, prod])
  std::optional<PointwiseOp> map_op;    // m = map(x...)
  std::optional<PointwiseOp> weight;    // d acc / d m
  std::optional<PointwiseOp> is_zero;   // prod: m == 0
  std::shared_ptr<State> nonzero_prod;  // prod: the product of the nonzero m
  bool no_zeros = false;                // prod whose map is never 0 (the nonzero product)

  ~State() { lib.reset(); }
  Tensor call_op(std::span<const Tensor> in, const std::vector<int64_t>& dims, bool keepdim) const;
  std::vector<Tensor> backward(std::span<const Tensor> in, const Tensor& grad,
                               const std::vector<int64_t>& dims, bool keepdim) const;
  jit::ReduceOp reduce_op() const { return kernel.reduce_op(); }
  Tensor weight_of(std::span<const Tensor> in, const Tensor& acc,
                   const std::vector<int64_t>& dims) const;
};

namespace {

// Names differ from pointwise_op.cpp's: a unity build compiles the two files as one.
using RdState = ReductionOp::State;

// A call's arguments on the stack (the tensors, dim, keepdim), read without popping them:
// the Autograd kernel redispatches with the stack as it is.
struct RdArgs {
  size_t base;  // where the arguments start
  std::vector<Tensor> in;
  std::vector<int64_t> dims;
  bool keepdim;
};
RdArgs read_args(const RdState& st, const Stack& s) {
  RdArgs a{s.size() - st.n_in - 2, {}, {}, false};
  for (size_t i = 0; i < st.n_in; ++i) a.in.push_back(s[a.base + i].to_tensor());
  a.dims = s[a.base + st.n_in].to_int_list();
  a.keepdim = s[a.base + st.n_in + 1].to_bool();
  return a;
}

std::string reduction_schema_of(const RdState& st) {
  std::vector<std::string> args;
  for (const std::string& n : jit::expr::map_program_of(st.kernel).inputs)
    args.push_back("Tensor " + n);
  return fmt::format("{}({}, int[] dim=[], bool keepdim=False) -> Tensor",
                     st.name.substr(st.name.find("::") + 2), fmt::join(args, ", "));
}

// Output `which` of p alone, renamed `out`, as a body: `_t0 = ...; out = ...;`.
std::string single_output_body(const jit::expr::Program& p, size_t which) {
  jit::expr::Program q = p;
  q.outputs = {"out"};
  q.output_nodes = {p.output_nodes[which]};
  return jit::expr::to_text(jit::expr::simplify(q));
}

std::shared_ptr<RdState> make_reduction_state(std::string name, jit::ReductionSpec spec,
                                              bool differentiable, std::source_location loc,
                                              bool no_zeros = false) {
  check_operator_name(name);
  auto st = std::make_shared<RdState>();
  st->name = name;
  spec.name = name;
  st->kernel = jit::reduction(spec);
  const jit::expr::Program& map = jit::expr::map_program_of(st->kernel);
  st->n_in = map.inputs.size();
  st->differentiable = differentiable;
  st->loc = loc;
  if (differentiable) {
    MT_CHECK(st->n_in <= 6,
             "[{}] a differentiable reduction takes at most 6 inputs (a gradient kernel takes "
             "them all, the output's gradient and its result: 8 operands), got {}; combine "
             "inputs, or define it with mt::ReductionOpOptions{{.differentiable = false}}",
             name, st->n_in);
    // d map / d x_i: the derivative's inputs are the map's and `grad`. A gradient op's own
    // backward (a second derivative) takes n + 2 inputs and gives n + 1 outputs, which fit
    // the pointwise kernels' 8 operands for up to 2 inputs; past that the gradient ops are
    // not differentiable (a second derivative is an error saying so).
    const jit::expr::Program dm = jit::expr::derivative(name, map);
    const bool twice = 2 * st->n_in + 3 <= 8;
    for (size_t i = 0; i < st->n_in; ++i)
      st->grad_map.push_back(pointwise_op(fmt::format("{}_grad_{}", name, map.inputs[i]),
                                          single_output_body(dm, i),
                                          {.inputs = dm.inputs, .differentiable = twice}, loc));
    const jit::expr::Program& post = jit::expr::post_program_of(st->kernel);
    const jit::expr::Node& out = post.nodes[size_t(post.output_nodes[0])];
    if (!(out.op == jit::expr::Op::Input && out.index == 0)) {
      const jit::expr::Program dp = jit::expr::derivative(name, post);  // (acc, n, grad)
      // n is a number of the call, not a tensor: a scalar of the pointwise op.
      st->grad_post = pointwise_op(name + "_grad_post", single_output_body(dp, 0),
                                   {.inputs = {dp.inputs[0], dp.inputs[2]}, .scalars = {"n"}}, loc);
      jit::ReductionSpec acc = spec;
      acc.post = "";
      st->acc_op = make_reduction_state(name + "_acc", acc, true, loc, no_zeros);
    }
    // Note [Reduction ops: max, min, prod]
    const jit::ReduceOp rop = st->kernel.reduce_op();
    if (rop != jit::ReduceOp::Sum) {
      st->map_op = pointwise_op(name + "_map", single_output_body(map, 0),
                                {.inputs = map.inputs, .differentiable = true}, loc);
      if (rop != jit::ReduceOp::Prod) {
        st->weight = pointwise_op(name + "_w", "m == acc",
                                  {.inputs = {"m", "acc"}, .differentiable = false}, loc);
      } else if (no_zeros) {
        st->no_zeros = true;
        st->weight = pointwise_op(name + "_w", "acc / m", {.inputs = {"m", "acc"}}, loc);
      } else {
        st->is_zero = pointwise_op(name + "_is_zero", "m == 0",
                                   {.inputs = {"m"}, .differentiable = false}, loc);
        // without a zero the nonzero product is acc itself
        st->weight = pointwise_op(name + "_w", "z == 0 ? nz / m : (z == 1 && m == 0 ? nz : 0)",
                                  {.inputs = {"m", "nz", "z"}}, loc);
        st->nonzero_prod = make_reduction_state(
            name + "_nz", {.map = "m == 0 ? 1 : m", .reduce = "prod", .inputs = {"m"}}, true, loc,
            true);
      }
    }
  }

  const std::string ns = name.substr(0, name.find("::"));
  st->lib = std::make_unique<Library>(Library::Kind::Fragment, ns, std::nullopt, loc);
  st->lib->def(reduction_schema_of(*st), loc);
  st->handle = dispatcher().find_or_throw(name);
  std::weak_ptr<RdState> weak = st;
  auto lock = [weak, name] {
    std::shared_ptr<RdState> live = weak.lock();
    MT_CHECK(live != nullptr,
             "[{}] was dropped while this call was on its way (its last ReductionOp handle was "
             "destroyed); keep the handle alive while the op is called",
             name);
    return live;
  };
  auto run = KernelFunction::boxed([lock](const OperatorHandle&, DispatchKeySet, Stack* s) {
    const std::shared_ptr<RdState> raw = lock();
    const RdArgs a = read_args(*raw, *s);
    s->resize(a.base);
    s->emplace_back(raw->kernel.call(a.in, a.dims, a.keepdim));
  });
  st->lib->impl(name, DispatchKey::CPU, run, loc);
  st->lib->impl(name, DispatchKey::CUDA, run, loc);
  st->lib->impl(name, DispatchKey::Fake, run, loc);
  st->lib->impl(
      name, DispatchKey::Autograd,
      KernelFunction::boxed([lock](const OperatorHandle& op, DispatchKeySet ks, Stack* s) {
        const std::shared_ptr<RdState> raw = lock();
        const RdArgs a = read_args(*raw, *s);
        const std::vector<Tensor>& in = a.in;
        const std::vector<int64_t>& dims = a.dims;
        const bool keepdim = a.keepdim;
        const size_t base = a.base;
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
              "grad; detach it (x.detach()), or define the op without that option to get a "
              "derived backward",
              raw->name, jit::expr::map_program_of(raw->kernel).inputs[i]);
        }
        auto node = mt::detail::make_node(raw->name, in, 1);
        std::vector<mt::SavedTensor> saved;
        for (const Tensor& t : in) saved.emplace_back(t, false);
        node->backward = [st = raw, saved = std::move(saved), dims, keepdim](
                             mt::Node& n, const std::vector<Tensor>& grads) {
          std::vector<Tensor> args;
          for (const mt::SavedTensor& t : saved)
            args.push_back(t.unpack(n.shared_from_this(), st->name));
          return st->backward(args, grads[0], dims, keepdim);
        };
        mt::detail::set_history((*s)[base].to_tensor(), node, 0);
      }),
      loc);
  return st;
}

}  // namespace

Tensor ReductionOp::State::call_op(std::span<const Tensor> in, const std::vector<int64_t>& dims,
                                   bool keepdim) const {
  MT_CHECK(in.size() == n_in, "[{}] takes {} tensor{} ({}), got {}", name, n_in,
           n_in == 1 ? "" : "s", fmt::join(jit::expr::map_program_of(kernel).inputs, ", "),
           in.size());
  Stack s;
  for (const Tensor& t : in) s.emplace_back(t);
  s.emplace_back(dims);
  s.emplace_back(keepdim);
  handle.call_boxed(&s);
  return s[0].to_tensor();
}

std::vector<Tensor> ReductionOp::State::backward(std::span<const Tensor> in, const Tensor& grad,
                                                 const std::vector<int64_t>& dims_in,
                                                 bool keepdim) const {
  std::vector<Tensor> out(n_in);
  if (!grad.defined()) return out;
  Shape shape = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i)
    shape = mt::detail::broadcast_shapes(shape, in[i].sizes(), name.c_str());
  const std::vector<int64_t> dims = jit::reduction_dims(name, shape, dims_in);
  int64_t n = 1;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d)
    if (dims.empty() || std::binary_search(dims.begin(), dims.end(), d)) n *= shape[size_t(d)];
  const Shape kept = jit::reduction_shape(shape, dims, true);
  Tensor g = grad, acc;
  if (grad_post || (reduce_op() != jit::ReduceOp::Sum && !nonzero_prod))
    acc = (acc_op ? acc_op.get() : this)->call_op(in, dims_in, keepdim);
  if (grad_post)
    g = grad_post->call(std::vector<Tensor>{acc, grad}, std::vector<double>{double(n)});
  // back over the reduced dims: the keepdim shape, then expanded
  g = g.reshape(kept).expand(shape);
  if (reduce_op() != jit::ReduceOp::Sum)
    g = mul(g, weight_of(in, acc.defined() ? acc.reshape(kept) : acc, dims));
  for (size_t i = 0; i < n_in; ++i) {
    if (!in[i].requires_grad()) continue;  // the engine takes no gradient for it
    std::vector<Tensor> args(in.begin(), in.end());
    args.push_back(g);
    Tensor gi = grad_map[i].call(args);
    if (gi.sizes() != in[i].sizes()) gi = sum_to(gi, in[i].sizes());
    out[i] = gi.dtype() == in[i].dtype() ? gi : gi.to(in[i].dtype());
  }
  return out;
}

// d acc / d map over the broadcast shape (Note [Reduction ops: max, min, prod]); acc in the
// keepdim shape.
Tensor ReductionOp::State::weight_of(std::span<const Tensor> in, const Tensor& acc,
                                     const std::vector<int64_t>& dims) const {
  if (reduce_op() != jit::ReduceOp::Prod) {  // max, min: ties split evenly
    NoGradGuard constant;
    std::vector<Tensor> plain;
    for (const Tensor& t : in) plain.push_back(t.detach());
    const Tensor hit = weight->call(std::vector<Tensor>{map_op->call(plain), acc.detach()});
    return div(hit, sum(hit, dims, true));
  }
  const Tensor m = map_op->call(in);
  if (no_zeros) return weight->call(std::vector<Tensor>{m, acc});
  Tensor zeros;
  {
    NoGradGuard constant;
    zeros = sum(is_zero->call(std::vector<Tensor>{m.detach()}), dims, true);
  }
  const Tensor nz = nonzero_prod->call_op(std::vector<Tensor>{m}, dims, true);
  return weight->call(std::vector<Tensor>{m, nz, zeros});
}

Tensor ReductionOp::call(std::span<const Tensor> inputs, std::vector<int64_t> dims,
                         bool keepdim) const {
  MT_CHECK(state_ != nullptr,
           "[reduction_op] this ReductionOp is empty (default-constructed); "
           "make one with mt::reduction_op(name, spec)");
  return state_->call_op(inputs, dims, keepdim);
}

const std::string& ReductionOp::name() const { return state_->name; }
std::string ReductionOp::schema() const { return state_->handle.schema().str(); }
const jit::Reduction& ReductionOp::kernel() const { return state_->kernel; }
std::vector<std::string> ReductionOp::backward_bodies() const {
  std::vector<std::string> out;
  for (const PointwiseOp& op : state_->grad_map) out.push_back(op.expression());
  return out;
}

ReductionOp reduction_op(std::string_view name, jit::ReductionSpec spec, ReductionOpOptions options,
                         std::source_location loc) {
  ReductionOp op;
  op.state_ = make_reduction_state(std::string(name), std::move(spec), options.differentiable, loc);
  return op;
}

}  // namespace mt
