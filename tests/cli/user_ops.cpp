// SPDX-License-Identifier: MIT
// A user's op library, as `minitensor --load` and mt::load_library take one: a shared
// library whose MT_LIBRARY blocks register when it is loaded. Built by tests/cli/meson.build
// as is (libuser_ops.so) and with MT_TEST_BROKEN_BLOCK, where a second block fails
// (libuser_ops_broken.so), for the error load_library must give; tests/meson.build builds
// it once more for tests/test_load_library.cpp, which runs opcheck and gradcheck on it.
#include <minitensor.h>

namespace {

mt::Tensor twice(const mt::Tensor& x) { return mt::mul(x, 2.0); }

// scale(x, alpha) = alpha * x: a CPU kernel, a fake kernel and autograd, all registered in
// the block below and owned by its library (so for the life of the process).
mt::Tensor scale(const mt::Tensor& x, double alpha) { return mt::mul(x, alpha); }

}  // namespace

MT_LIBRARY(user_ops, m) {
  m.def("twice(Tensor x) -> Tensor");
  m.def("scale(Tensor x, float alpha) -> Tensor");
  m.impl("scale", mt::DispatchKey::CPU, scale);
  mt::register_fake(m, "user_ops::scale",
                    [](const mt::Tensor& x, double) { return mt::empty_like(x); });
  mt::register_autograd(
      m, "user_ops::scale",
      [](mt::AutogradContext& ctx, const mt::Tensor& grad) {
        return mt::mul(grad, ctx.get<double>("alpha"));
      },
      [](mt::AutogradContext& ctx, const mt::Tensor&, double alpha, const mt::Tensor&) {
        ctx.save("alpha", alpha);
      });
}

MT_LIBRARY_IMPL(user_ops, CPU, m) { m.impl("twice", twice); }

#ifdef MT_TEST_BROKEN_BLOCK
MT_LIBRARY_FRAGMENT(user_ops, m) {
  m.def("bad_schema(Tensor x -> Tensor");  // no closing parenthesis: this block fails
}
#endif
