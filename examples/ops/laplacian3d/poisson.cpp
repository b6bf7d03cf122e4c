// SPDX-License-Identifier: MIT
// A PINN-style fit with pde::laplacian3d: find u on a 16^3 grid of the unit cube (zero
// boundary, h = 1/17) with laplacian3d(u) = f, by plain gradient descent on the residual's
// mean square, loss = mean((L u - f)^2), every gradient through the op's registered
// backward. f is the Laplacian of a known field, so the fit can be checked against it.
// On the CPU, and on cuda:0 when there is one.
//   build/examples/ops/laplacian3d/laplacian3d_poisson
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include "laplacian3d.h"

using namespace mt;

namespace {

constexpr int64_t kSide = 16;
constexpr double kH = 1.0 / (kSide + 1);

// The field to recover: two products of sines (modes (3, 4, 5) and (6, 6, 7)), 0 on the
// boundary like the zero-boundary grid.
Tensor known_field() {
  std::vector<double> v(size_t(kSide * kSide * kSide));
  const double pi = std::numbers::pi;
  for (int64_t i = 0; i < kSide; ++i)
    for (int64_t j = 0; j < kSide; ++j)
      for (int64_t k = 0; k < kSide; ++k) {
        const double x = double(i + 1) * kH, y = double(j + 1) * kH, z = double(k + 1) * kH;
        v[size_t((i * kSide + j) * kSide + k)] =
            std::sin(3 * pi * x) * std::sin(4 * pi * y) * std::sin(5 * pi * z) +
            0.5 * std::sin(6 * pi * x) * std::sin(6 * pi * y) * std::sin(7 * pi * z);
      }
  return from_vector(v, {kSide, kSide, kSide}, {.dtype = DType::Float64}).to(DType::Float32);
}

// Gradient descent from u = 0; returns whether the loss fell below 1% of its start.
bool fit(const Device& device) {
  Tensor target = known_field().to(device);
  Tensor f = pde::laplacian3d(target, kH, "zero");
  Tensor u = zeros({kSide, kSide, kSide}, {.device = device}).requires_grad_();
  // The stencil's largest eigenvalue is below 12 / h^2, and d loss / d u = (2 / M) L (L u - f)
  // for M points, so a step of M / (2 (12 / h^2)^2) shrinks every mode of the residual.
  const double lambda_max = 12 / (kH * kH);
  const double lr = double(u.numel()) / (2 * lambda_max * lambda_max);
  double first = 0, last = 0;
  int steps = 0;
  for (; steps < 1000; ++steps) {
    Tensor r = sub(pde::laplacian3d(u, kH, "zero"), f);
    Tensor loss = mean(mul(r, r));
    last = loss.item<float>();
    if (steps == 0) first = last;
    if (steps % 50 == 0)
      std::printf("[%s] step %4d  loss %.6g  (%.3g%% of the start)\n", device.str().c_str(), steps,
                  last, 100 * last / first);
    if (last < 0.01 * first) break;
    backward(loss);
    {
      NoGradGuard no_grad;
      sub_(u, u.grad(), lr);
    }
    u.set_grad(Tensor());
  }
  const double err = max_abs_diff(u.detach().cpu(), target.cpu());
  const bool ok = last < 0.01 * first;
  std::printf("[%s] %s after %d steps: loss %.4g -> %.4g (%.3g%%), max |u - u*| %.3g\n",
              device.str().c_str(), ok ? "converged" : "DID NOT CONVERGE", steps, first, last,
              100 * last / first, err);
  return ok;
}

}  // namespace

int main() {
  bool ok = fit(kCPU);
  if (cuda::is_available())
    ok = fit(Device("cuda:0")) && ok;
  else
    std::printf("cuda:0 skipped: %s\n", cuda::unavailable_reason().c_str());
  std::printf("%s\n", ok ? "poisson: every fit converged" : "poisson: FAILED");
  return ok ? 0 : 1;
}
