// SPDX-License-Identifier: MIT
// An app embedding minitensor: defines an op with custom_op, gives it a fake kernel and
// a backward, calls it, and checks the result and the gradient. Prints one line.
#include <minitensor/minitensor.h>

#include <cmath>
#include <cstdio>
#include <string>

// y = x * x + 1, elementwise (the app's own kernel, float32 only).
static mt::Tensor square_plus_one(const mt::Tensor& x) {
  MT_CHECK(x.dtype() == mt::DType::Float32, "[embed::square_plus_one] float32 only, got {}",
           x.dtype());
  mt::Tensor xc = x.contiguous();
  mt::Tensor out = mt::empty(x.sizes());
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] * in[i] + 1.0f;
  return out;
}

int main() {
  try {
    auto op = mt::custom_op("embed::square_plus_one", square_plus_one);
    op.register_fake([](const mt::Tensor& x) { return mt::empty_like(x); });
    op.register_autograd(
        [](mt::AutogradContext& ctx, const mt::Tensor& g) { return g * ctx.saved()[0] * 2.0; },
        [](mt::AutogradContext& ctx, const mt::Tensor& x, const mt::Tensor&) {
          ctx.save_for_backward({x});
        });

    mt::Tensor x = mt::from_vector<float>({1, 2, 3}).requires_grad_();
    mt::Tensor y = op(x);      // {2, 5, 10}
    mt::backward(mt::sum(y));  // dy/dx = 2x = {2, 4, 6}
    float total = mt::sum(y).item<float>();
    std::vector<float> grad = x.grad().to_vector<float>();
    mt::Tensor shape_only = op(mt::fake_empty({2, 3}));  // the fake kernel: no compute

    // The library it runs with is the one its headers describe.
    const bool same_version = mt::version() == std::to_string(MT_VERSION_MAJOR) + "." +
                                                   std::to_string(MT_VERSION_MINOR) + "." +
                                                   std::to_string(MT_VERSION_PATCH);
    bool ok = total == 17.0f && grad == std::vector<float>{2, 4, 6} &&
              shape_only.sizes() == mt::Shape{2, 3} && same_version;
    std::printf("embed: %s(x) sums to %g, grad [%g, %g, %g]: %s\n", op.name().c_str(), total,
                grad[0], grad[1], grad[2], ok ? "OK" : "WRONG");
    return ok ? 0 : 1;
  } catch (const mt::Error& e) {
    std::printf("embed: error: %s\n", e.what());
    return 1;
  }
}
