// SPDX-License-Identifier: MIT
// A user's op library, as `minitensor --load` and mt::load_library take one: a shared
// library whose MT_LIBRARY blocks register when it is loaded. Built twice by
// tests/cli/meson.build: as is (libuser_ops.so), and with MT_TEST_BROKEN_BLOCK, where a
// second block fails (libuser_ops_broken.so), for the error load_library must give.
#include <minitensor.h>

namespace {

mt::Tensor twice(const mt::Tensor& x) { return mt::mul(x, 2.0); }

}  // namespace

MT_LIBRARY(user_ops, m) { m.def("twice(Tensor x) -> Tensor"); }

MT_LIBRARY_IMPL(user_ops, CPU, m) { m.impl("twice", twice); }

#ifdef MT_TEST_BROKEN_BLOCK
MT_LIBRARY_FRAGMENT(user_ops, m) {
  m.def("bad_schema(Tensor x -> Tensor");  // no closing parenthesis: this block fails
}
#endif
