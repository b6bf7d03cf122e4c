// SPDX-License-Identifier: MIT
#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/autograd.h"
#include "runtime/tensor.h"

namespace mt {
namespace {

struct Prepared {
  std::vector<Tensor> inputs;  // contiguous float64 clones for the differentiated ones
  std::vector<size_t> diff;    // which inputs are differentiated
};

Prepared prepare(const std::vector<Tensor>& inputs) {
  Prepared p;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.defined() && t.requires_grad()) {
      MT_CHECK(t.dtype() == DType::Float64,
               "[gradcheck] input {} is {}; finite differences need float64 inputs to be "
               "accurate: pass x.to(mt::DType::Float64)",
               i, t.dtype());
      Tensor c = t.detach().clone();
      c.requires_grad_(true);
      p.inputs.push_back(c);
      p.diff.push_back(i);
    } else {
      p.inputs.push_back(t);
    }
  }
  MT_CHECK(!p.diff.empty(),
           "[gradcheck] no input requires grad; call .requires_grad_() on the "
           "inputs to check");
  return p;
}

}  // namespace

GradcheckResult gradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                          GradcheckOptions opts) {
  Prepared p = prepare(inputs);
  std::vector<Tensor> outs = fn(p.inputs);
  GradcheckResult res;
  res.ok = true;
  double worst = -1;
  for (size_t o = 0; o < outs.size(); ++o) {
    const Tensor& out = outs[o];
    if (!out.defined() || !is_floating(out.dtype())) continue;
    for (size_t di = 0; di < p.diff.size(); ++di) {
      Tensor x = p.inputs[p.diff[di]];
      int64_t n_in = x.numel(), n_out = out.numel();
      // numerical Jacobian column by column
      std::vector<double> numeric(size_t(n_in * n_out));
      {
        NoGradGuard no_grad;
        // Perturb a host copy, and write it to the device for inputs that live there; the
        // raw copy leaves the version counter alone, as the host write does, so tensors
        // the first call saved stay valid for the analytical pass.
        const bool on_host = x.device().is_cpu();
        Tensor xh = on_host ? x : x.cpu();
        double* xp = xh.data_ptr<double>();
        auto set = [&](int64_t j, double v) {
          xp[j] = v;
          if (!on_host) detail::copy_impl(x, xh);
        };
        for (int64_t j = 0; j < n_in; ++j) {
          double orig = xp[j];
          set(j, orig + opts.eps);
          auto plus = fn(p.inputs)[o].to_vector<double>();
          set(j, orig - opts.eps);
          auto minus = fn(p.inputs)[o].to_vector<double>();
          set(j, orig);
          for (int64_t k = 0; k < n_out; ++k)
            numeric[size_t(k * n_in + j)] = (plus[size_t(k)] - minus[size_t(k)]) / (2 * opts.eps);
        }
      }
      // analytical Jacobian row by row (one vector-Jacobian product per output element)
      std::vector<double> analytic(size_t(n_in * n_out), 0.0);
      if (out.requires_grad()) {
        for (int64_t k = 0; k < n_out; ++k) {
          Tensor v = zeros(out.sizes(), {.dtype = out.dtype(), .device = out.device()});
          v.view({-1}).select(0, k).fill_(1);
          auto g = grad({out}, {x}, {v}, {.retain_graph = true, .allow_unused = true});
          if (!g[0].defined()) continue;
          auto gv = g[0].to_vector<double>();
          for (int64_t j = 0; j < n_in; ++j) analytic[size_t(k * n_in + j)] = gv[size_t(j)];
        }
      }
      for (int64_t k = 0; k < n_out; ++k) {
        for (int64_t j = 0; j < n_in; ++j) {
          double a = analytic[size_t(k * n_in + j)], nu = numeric[size_t(k * n_in + j)];
          double err = std::abs(a - nu);
          bool bad = !(err <= opts.atol + opts.rtol * std::abs(nu));
          res.max_abs_error = std::max(res.max_abs_error, std::isnan(err) ? INFINITY : err);
          if (bad && (err > worst || std::isnan(err))) {
            worst = std::isnan(err) ? INFINITY : err;
            res.ok = false;
            res.message = fmt::format(
                "[gradcheck] Jacobian mismatch for output {} with respect to input {}: at "
                "output element {} and input element {}, numerical {} but analytical {} "
                "(|difference| {:.3g} > atol {} + rtol {} * |numerical|)",
                o, p.diff[di], k, j, nu, a, err, opts.atol, opts.rtol);
          }
        }
      }
    }
  }
  return res;
}

GradcheckResult gradgradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                              GradcheckOptions opts) {
  Prepared p = prepare(inputs);
  // Fixed random output gradients, so the first derivative is a function of the inputs only.
  std::vector<Tensor> probe = fn(p.inputs);
  Generator gen(1234);
  std::vector<Tensor> vs;
  for (const Tensor& o : probe)
    vs.push_back(randn(o.sizes(), {.dtype = o.dtype(), .device = o.device()}, &gen));
  std::vector<size_t> diff = p.diff;
  DifferentiableFn first = [fn, vs, diff](const std::vector<Tensor>& xs) {
    EnableGradGuard
        with_grad;  // gradcheck evaluates under no_grad; the first derivative needs the tape
    std::vector<Tensor> outs = fn(xs);
    std::vector<Tensor> ins, used_outs, used_vs;
    for (size_t i : diff) ins.push_back(xs[i]);
    for (size_t o = 0; o < outs.size(); ++o) {
      if (!outs[o].defined() || !outs[o].requires_grad()) continue;
      used_outs.push_back(outs[o]);
      used_vs.push_back(vs[o]);
    }
    auto gs = grad(used_outs, ins, used_vs, {.create_graph = true, .allow_unused = true});
    for (size_t i = 0; i < gs.size(); ++i)
      if (!gs[i].defined()) gs[i] = zeros_like(ins[i]);
    return gs;
  };
  return gradcheck(first, p.inputs, opts);
}

}  // namespace mt
