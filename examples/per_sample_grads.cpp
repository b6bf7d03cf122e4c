// SPDX-License-Identifier: MIT
// Per-sample gradients, the functorch showcase: the norm of each sample's gradient of the
// 64/32/64 MLP (examples/mlp.h) through mt::vmap over mt::grad, checked against a loop of
// one grad call per sample; then the MLP trained in float32 and under autocast bfloat16
// from the same start, to the same loss band.
//   build/examples/per_sample_grads [--device cpu|cuda] [--steps N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/per_sample.h"
#include "minitensor.h"

using namespace mt;

namespace {

double largest_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.to(DType::Float64).cpu().to_vector<double>();
  const auto y = b.to(DType::Float64).cpu().to_vector<double>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

double train(const mlp::Shape& shape, Device device, int64_t steps, bool autocast) {
  manual_seed(7);
  const mlp::Task task = mlp::teacher_task(shape, device);
  mlp::Model m = mlp::init(shape, device);
  double last = 0;
  for (int64_t s = 0; s < steps; ++s) {
    std::optional<AutocastGuard> guard;
    if (autocast) guard.emplace(device.type, DType::BFloat16);
    last = mlp::train_step(m, task.x, task.target, 0.05).to(DType::Float32).cpu().item<float>();
  }
  for (const Tensor& p : m.params())  // the update keeps each parameter's dtype
    if (p.dtype() != DType::Float32) std::exit(1);
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  int64_t steps = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      device_name = v;
    else if (k == "--steps")
      steps = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "per_sample_grads: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const Device device(device_name);
  const mlp::Shape shape{.batch = 64, .in = 32, .hidden = 64, .out = 1};
  manual_seed(0);
  const mlp::Task task = mlp::teacher_task(shape, device);
  const mlp::Model m = mlp::init(shape, device);

  const std::vector<Tensor> batched = mlp::per_sample_grads_vmap(m, task.x, task.target);
  const auto loop = mlp::per_sample_grads_loop(m, task.x, task.target);
  double worst = 0;
  for (int64_t i = 0; i < shape.batch; ++i)
    for (size_t p = 0; p < batched.size(); ++p)
      worst = std::max(worst, largest_difference(batched[p].select(0, i), loop[size_t(i)][p]));
  std::printf(
      "per-sample gradients of the %lld/%lld/%lld MLP on %s: vmap(grad) against a loop "
      "of %lld grad calls, largest difference %.3g\n",
      (long long)shape.batch, (long long)shape.in, (long long)shape.hidden, device.str().c_str(),
      (long long)shape.batch, worst);
  // each sample's gradient norm over all parameters, for the first few samples
  Tensor sq;
  for (const Tensor& g : batched) {
    const Tensor s = mt::sum(mt::mul(g, g).reshape({shape.batch, -1}), {1});
    sq = sq.defined() ? mt::add(sq, s) : s;
  }
  const auto norms = mt::sqrt(sq).to(DType::Float64).cpu().to_vector<double>();
  std::printf("gradient norms of samples 0-4:");
  for (int i = 0; i < 5; ++i) std::printf(" %.4f", norms[size_t(i)]);
  std::printf("\n");
  if (!(worst < 1e-4)) {
    std::printf("FAILED: vmap(grad) differs from the loop\n");
    return 1;
  }

  const double f32 = train(shape, device, steps, false), bf16 = train(shape, device, steps, true);
  std::printf("after %lld SGD steps: loss %.4f in float32, %.4f under autocast bfloat16\n",
              (long long)steps, f32, bf16);
  if (!(std::abs(bf16 - f32) <= 0.1 * f32 + 0.02)) {
    std::printf("FAILED: the autocast loss is out of float32's band\n");
    return 1;
  }
  return 0;
}
