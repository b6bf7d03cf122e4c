// SPDX-License-Identifier: MIT
// The tutorial's demo in C++: a hand-written SiLU kernel becomes the op
// triton_demo::silu through custom_op, register_fake and register_autograd, then is
// checked against a reference, by gradcheck and by opcheck. Its CUDA kernel is the
// user's own, written two ways (a pointwise expression and a raw kernel); on a machine
// with a GPU the same checks run on cuda:0, and the user's kernels are timed against the
// built-in mt::silu and the unfused x * sigmoid(x).
//   build/examples/silu_custom_op
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

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

// Step 1, on the GPU: the same SiLU as one expression (the one-line Triton kernel's role):
// NVRTC compiles it for each dtype and layout it meets; on CPU tensors the same expression
// is evaluated on the host. And the fused backward, with a temporary.
static const jit::Pointwise silu_expr = jit::pointwise("triton_demo_silu", "x / (1.0f + expf(-x))");
static const jit::Pointwise silu_grad_expr = jit::pointwise(
    {.name = "triton_demo_silu_bwd",
     .inputs = {"g", "x"},
     .body = "float s = 1.0f / (1.0f + expf(-x)); return g * s * (1.0f + x * (1.0f - s));"});

// Or a raw CUDA kernel: the launch turns tensors into device pointers and checks each
// argument against the kernel's signature (a float64 tensor for a float* is an error).
static const char* kSiluSource = R"(
#include "common.cuh"
template <typename T>
__global__ void triton_demo_silu_raw(const T* x, T* y, long long n) {
  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {
    const float v = mt::load_compute(x[i]);
    y[i] = mt::store_compute<T>(v / (1.0f + expf(-v)));
  }
}
)";
static const jit::UserKernel silu_raw_f32 = jit::kernel(kSiluSource, "triton_demo_silu_raw<float>");

static Tensor silu_cuda_raw(const Tensor& x) {
  MT_CHECK(x.dtype() == DType::Float32, "[triton_demo::silu_raw] takes float32, got {}", x.dtype());
  Tensor xc = x.contiguous();  // the kernel indexes x[i]: pitfall 3 again
  Tensor y = empty_like(xc);
  const int64_t n = xc.numel();
  if (n > 0) silu_raw_f32.launch({.grid = jit::grid_stride_for(n, x.device().index)}, xc, y, n);
  return y;
}

// Median milliseconds of fn on cuda:0 over 20 runs after 3 warm-ups (events).
template <typename F>
static double median_ms(F&& fn) {
  cuda::EventTimer t(0);
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    t.start();
    fn();
    t.stop();
    if (i >= 3) ms.push_back(t.elapsed_ms());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The same checks on cuda:0, and the user's kernels timed against the built-ins.
template <typename Op>
static bool cuda_steps(const Op& silu, const Op& silu_raw) {
  const Device gpu("cuda:0");
  bool ok = true;
  Tensor x = randn({1 << 20}).to(gpu).requires_grad_();
  Tensor y = silu(x);
  backward(sum(y));
  const double fwd = max_abs_diff(y.detach().cpu(), mt::silu(x.detach()).cpu());
  const double bwd = max_abs_diff(x.grad().cpu(), silu_backward(ones_like(x), x.detach()).cpu());
  const double raw = max_abs_diff(silu_raw(x.detach()).cpu(), mt::silu(x.detach()).cpu());
  std::printf("cuda:0 forward / gradient / raw kernel max |diff| vs mt::silu: %.3g / %.3g / %.3g\n",
              fwd, bwd, raw);
  ok = ok && fwd < 1e-5 && bwd < 1e-5 && raw < 1e-5;

  Tensor xd = randn({8}, {.dtype = DType::Float64}).to(gpu).requires_grad_();
  GradcheckResult gc = gradcheck([&](const std::vector<Tensor>& in) { return silu(in[0]); }, {xd});
  std::printf("gradcheck on cuda:0 (float64): %s %s\n", gc.ok ? "PASS" : "FAIL",
              gc.message.c_str());
  OpCheckReport report = opcheck(
      silu.handle(), {Stack{randn({4, 5}).to(gpu)}, Stack{randn({7}).view({7, 1}).t().to(gpu)}});
  std::printf("opcheck on cuda:0:\n%s", report.str().c_str());
  ok = ok && gc.ok && report.ok();

  // Pitfall 3 on the GPU: the raw launch refuses a transposed view instead of misreading it.
  try {
    Tensor t = randn({4, 3}).to(gpu).t(), out = empty({12}, {.device = gpu});
    silu_raw_f32.launch({.grid = 1}, t, out, int64_t(12));
    ok = false;
  } catch (const Error& e) {
    std::printf("a raw launch on a transposed view: %s\n", e.what());
  }

  const int64_t n = int64_t(1) << 24;
  Tensor big = randn({n}).to(gpu);
  const double t_builtin = median_ms([&] { mt::silu(big); });
  const double t_expr = median_ms([&] { silu(big); });
  const double t_raw = median_ms([&] { silu_raw(big); });
  const double t_unfused = median_ms([&] { mul(big, sigmoid(big)); });
  std::printf(
      "float32 SiLU forward, 2^24 elements, median ms: mt::silu %.4f, the user's "
      "pointwise %.4f (%.2fx), raw %.4f (%.2fx), x * sigmoid(x) %.4f (%.2fx)\n",
      t_builtin, t_expr, t_expr / t_builtin, t_raw, t_raw / t_builtin, t_unfused,
      t_unfused / t_builtin);
  return ok;
}

int main() {
  // Step 2: custom_op registers the real implementation under namespace::name, and
  // register_kernel adds the user's GPU kernel for CUDA tensors.
  auto silu = custom_op("triton_demo::silu", silu_cpu);
  silu.register_kernel(DeviceType::CUDA, [](const Tensor& x) { return silu_expr(x); });
  std::printf("registered %s\n", silu.schema().str().c_str());
  // The backward is an op of the user's too: one pointwise expression serves CPU and CUDA.
  auto silu_bwd = custom_op("triton_demo::silu_bwd",
                            [](const Tensor& g, const Tensor& x) { return silu_grad_expr(g, x); });
  silu_bwd.register_kernel(DeviceType::CUDA,
                           [](const Tensor& g, const Tensor& x) { return silu_grad_expr(g, x); });
  silu_bwd.register_fake([](const Tensor& g, const Tensor&) { return empty_like(g); });
  auto silu_raw = custom_op("triton_demo::silu_raw", silu_cpu);
  silu_raw.register_kernel(DeviceType::CUDA, silu_cuda_raw);

  // Step 3: register_fake: the shapes, dtype and device of the output, no compute.
  silu.register_fake([](const Tensor& x) { return empty_like(x); });

  // Step 4: register_autograd: setup_context saves x; backward returns one gradient per
  // tensor input. A backward of the wrong shape does not compile.
  silu.register_autograd(
      [silu_bwd](AutogradContext& ctx, const Tensor& grad) {
        return silu_bwd(grad, ctx.saved()[0]);
      },
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
  std::printf("forward  max |diff| vs x*sigmoid(x): %.3g  %s\n", fwd,
              fwd < 1e-5 ? "OK" : "MISMATCH");
  std::printf("gradient max |diff| vs x*sigmoid(x): %.3g  %s\n", bwd,
              bwd < 1e-5 ? "OK" : "MISMATCH");

  Tensor xd = randn({8}, {.dtype = DType::Float64, .requires_grad = true});
  GradcheckResult gc = gradcheck([&](const std::vector<Tensor>& in) { return silu(in[0]); }, {xd});
  std::printf("gradcheck (float64, central differences): %s %s\n", gc.ok ? "PASS" : "FAIL",
              gc.message.c_str());

  OpCheckReport report =
      opcheck(silu.handle(), {Stack{randn({4, 5})}, Stack{randn({7}).view({7, 1}).t()}});
  std::printf("%s", report.str().c_str());

  // A fake tensor on cuda:0 works without a GPU: only shapes flow.
  Tensor shape_only = silu(fake_empty({2, 3}, {.device = Device("cuda:0")}));
  std::printf("on a fake cuda:0 tensor: %s\n", shape_only.str().c_str());

  bool ok = fwd < 1e-5 && bwd < 1e-5 && gc.ok && report.ok();
  if (cuda::is_available())
    ok = cuda_steps(silu, silu_raw) && ok;
  else
    std::printf("CUDA steps skipped: %s\n", cuda::unavailable_reason().c_str());
  std::printf("%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
}
