// The tutorial's demo in C++: a hand-written SiLU kernel becomes the op
// triton_demo::silu through custom_op, register_fake and register_autograd, then is
// checked against a reference, by gradcheck and by opcheck.
//   build/examples/silu_custom_op
#include <cmath>
#include <cstdio>

#include "minitensor.h"

using namespace mt;

// Step 1: the kernel. Plain loops over float32 or float64; a strided input is made
// contiguous first (the tutorial's third pitfall: a kernel that assumes contiguity
// gives wrong answers on a transposed tensor).
static Tensor silu_cpu(const Tensor& x) {
  MT_CHECK(x.dtype() == DType::Float32 || x.dtype() == DType::Float64,
           "[triton_demo::silu] supports float32 and float64, got {}", x.dtype());
  Tensor xc = x.contiguous();
  Tensor out = empty(x.sizes(), {.dtype = x.dtype()});
  if (x.dtype() == DType::Float32) {
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] / (1.0f + std::exp(-in[i]));
  } else {
    const double* in = xc.data_ptr<double>();
    double* o = out.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] / (1.0 + std::exp(-in[i]));
  }
  return out;
}

int main() {
  // Step 2: custom_op registers the real implementation under namespace::name.
  auto silu = custom_op("triton_demo::silu", silu_cpu);
  std::printf("registered %s\n", silu.schema().str().c_str());

  // Step 3: register_fake: the shapes, dtype and device of the output, no compute.
  silu.register_fake([](const Tensor& x) { return empty_like(x); });

  // Step 4: register_autograd: setup_context saves x; backward returns one gradient per
  // tensor input. A backward of the wrong shape does not compile.
  silu.register_autograd(
      [](AutogradContext& ctx, const Tensor& grad) { return silu_backward(grad, ctx.saved()[0]); },
      [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward({x}); });

  std::printf("%s", dispatcher().dump_table("triton_demo::silu").c_str());

  // Step 5: check it: forward and gradient against x * sigmoid(x) built from mt ops.
  manual_seed(0);
  Tensor x = randn({1024}, {.requires_grad = true});
  Tensor y = silu(x);
  Tensor x_ref = x.detach().clone().requires_grad_();
  Tensor y_ref = mul(x_ref, sigmoid(x_ref));
  backward(sum(y));
  backward(sum(y_ref));
  double fwd = max_abs_diff(y, y_ref), bwd = max_abs_diff(x.grad(), x_ref.grad());
  std::printf("forward  max |diff| vs x*sigmoid(x): %.3g  %s\n", fwd, fwd < 1e-5 ? "OK" : "MISMATCH");
  std::printf("gradient max |diff| vs x*sigmoid(x): %.3g  %s\n", bwd, bwd < 1e-5 ? "OK" : "MISMATCH");

  Tensor xd = randn({8}, {.dtype = DType::Float64, .requires_grad = true});
  GradcheckResult gc = gradcheck([&](const std::vector<Tensor>& in) { return silu(in[0]); }, {xd});
  std::printf("gradcheck (float64, central differences): %s %s\n", gc.ok ? "PASS" : "FAIL",
              gc.message.c_str());

  OpCheckReport report = opcheck(silu.handle(), {Stack{randn({4, 5})}, Stack{randn({7}).view({7, 1}).t()}});
  std::printf("%s", report.str().c_str());

  // A fake tensor on cuda:0 works without a GPU: only shapes flow.
  Tensor shape_only = silu(fake_empty({2, 3}, {.device = Device("cuda:0")}));
  std::printf("on a fake cuda:0 tensor: %s\n", shape_only.str().c_str());

  bool ok = fwd < 1e-5 && bwd < 1e-5 && gc.ok && report.ok();
  std::printf("%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
}
