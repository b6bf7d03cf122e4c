// SPDX-License-Identifier: MIT
// opcheck's test_compile (torch's test_aot_dispatch_dynamic): each sample's op call run
// through mt::compile (captured on fake tensors, replayed) and eagerly, outputs and input
// gradients compared. It lives here, above autograd, and opcheck reaches it through the
// hook this file installs (detail::set_opcheck_compile_test).
#include <algorithm>
#include <cmath>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "kernels/compile/compile.h"
#include "kernels/ops.h"

namespace mt {
namespace detail {
namespace {

using Test = OpCheckReport::Test;

// Fresh copies of the sample's tensor inputs (floating ones require grad when `grads`).
std::vector<Tensor> fresh_inputs(const Stack& sample, const std::vector<size_t>& slots,
                                 bool grads) {
  std::vector<Tensor> xs;
  for (size_t i : slots) {
    Tensor x = sample[i].to_tensor().detach().clone();
    if (grads && is_floating(x.dtype())) x.requires_grad_(true);
    xs.push_back(x);
  }
  return xs;
}

// "" when equal within tolerance, else what differs.
std::string differ(const Tensor& want, const Tensor& got) {
  if (want.defined() != got.defined())
    return fmt::format("eager gave {} tensor, compiled {}", want.defined() ? "a" : "no",
                       got.defined() ? "one" : "none");
  if (!want.defined()) return "";
  if (want.sizes() != got.sizes())
    return fmt::format("expected shape {}, got {}", want.sizes(), got.sizes());
  if (want.dtype() != got.dtype())
    return fmt::format("expected dtype {}, got {}", want.dtype(), got.dtype());
  // A fused kernel keeps a 16-bit group's intermediates in float32 where eager rounds each
  // op's result to the dtype. The difference is a few ulps of the intermediates, which can be
  // larger than the result they cancel to (tanh's g * (1 - y * y) near y = 1): 4 ulps of the
  // dtype relative, and 4 ulps of max(1, the largest |value|) absolute.
  const bool half = want.dtype() == DType::Float16 || want.dtype() == DType::BFloat16;
  const double eps = want.dtype() == DType::Float16 ? 0x1p-10 : 0x1p-7;
  const double rtol = half ? 4 * eps : 1e-5;
  double scale = 1;  // the largest finite |value|, at least 1
  if (half)
    for (double v : want.detach().to_vector<double>())
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
  const double atol = half ? 4 * eps * scale : 1e-6;
  if (want.numel() == 0 || allclose(got.detach(), want.detach(), rtol, atol, true)) return "";
  return fmt::format("expected {}, got {} (largest difference {:.3g})", want.detach().str(),
                     got.detach().str(), max_abs_diff(got.detach(), want.detach()));
}

Test compile_test(const OperatorHandle& op, const std::vector<Stack>& samples) {
  Test t{"test_compile", true, false, ""};
  const FunctionSchema& schema = op.schema();
  bool any = false;
  for (size_t si = 0; si < samples.size(); ++si) {
    const Stack& sample = samples[si];
    std::vector<size_t> slots;
    bool has_float = false;
    for (size_t i = 0; i < sample.size(); ++i) {
      if (!sample[i].is_tensor() || !sample[i].to_tensor().defined()) continue;
      slots.push_back(i);
      has_float = has_float || is_floating(sample[i].to_tensor().dtype());
    }
    if (slots.empty()) continue;  // nothing to capture: no tensor input
    any = true;
    const bool grads = has_float && !schema.is_mutable() &&
                       op.entry()->table().origin[size_t(DispatchKey::Autograd)] == 1;
    GraphFn fn = [&op, &sample, &slots, grads](const std::vector<Tensor>& xs) {
      Stack args = sample;
      for (size_t k = 0; k < slots.size(); ++k) args[slots[k]] = xs[k];
      op.call_boxed(&args);
      std::vector<Tensor> outs = tensors_of(args);
      if (grads) {
        Tensor loss;
        for (const Tensor& o : outs) {
          if (!o.defined() || !o.requires_grad()) continue;
          Tensor term = mt::sum(mt::mul(o, o));
          loss = loss.defined() ? mt::add(loss, term) : term;
        }
        if (loss.defined()) mt::backward(loss);
      }
      return outs;
    };
    const std::vector<Tensor> eager_in = fresh_inputs(sample, slots, grads);
    const std::vector<Tensor> eager_out = fn(eager_in);
    auto fail = [&](std::string what) {
      t.passed = false;
      t.message = fmt::format(
          "sample {}: {}; the compiled call is captured through the Fake "
          "kernel (and the autograd formula): make them agree with the real "
          "kernel",
          si, what);
    };
    std::vector<Tensor> comp_out;
    const std::vector<Tensor> comp_in = fresh_inputs(sample, slots, grads);
    try {
      // The graph's shapes come from the Fake kernel; the replay's values from the real one.
      const Graph g = capture(fn, fresh_inputs(sample, slots, grads));
      for (size_t o = 0; o < g.outputs.size() && o < eager_out.size(); ++o) {
        const GraphValue& v = g.values[size_t(g.outputs[o])];
        if (eager_out[o].defined() &&
            (v.sizes != eager_out[o].sizes() || v.dtype != eager_out[o].dtype())) {
          fail(
              fmt::format("output {}: expected {}{} (eager), got {}{} in the graph mt::compile "
                          "captured",
                          o, eager_out[o].dtype(), eager_out[o].sizes(), v.dtype, v.sizes));
          return t;
        }
      }
      comp_out = compile(fn, {.name = "opcheck " + op.name().str()})(comp_in);
    } catch (const Error& e) {
      t.passed = false;
      t.message = fmt::format(
          "sample {}: mt::compile could not run the op: {}; its Fake kernel "
          "must work on fake inputs and agree with the real kernel",
          si, e.what());
      return t;
    }
    if (comp_out.size() != eager_out.size()) {
      fail(fmt::format("the compiled call returned {} tensors, eager {}", comp_out.size(),
                       eager_out.size()));
      return t;
    }
    for (size_t o = 0; o < eager_out.size(); ++o) {
      if (std::string d = differ(eager_out[o], comp_out[o]); !d.empty()) {
        fail(fmt::format("output {}: {}", o, d));
        return t;
      }
    }
    for (size_t k = 0; k < eager_in.size() && grads; ++k) {
      if (std::string d = differ(eager_in[k].grad(), comp_in[k].grad()); !d.empty()) {
        fail(fmt::format("the gradient of argument '{}': {}",
                         slots[k] < schema.arguments.size() ? schema.arguments[slots[k]].name : "?",
                         d));
        return t;
      }
    }
  }
  if (!any) {
    t.skipped = true;
    t.message = "no sample has a tensor input";
  }
  return t;
}

}  // namespace

void install_opcheck_compile_test() { set_opcheck_compile_test(&compile_test); }

}  // namespace detail
}  // namespace mt
