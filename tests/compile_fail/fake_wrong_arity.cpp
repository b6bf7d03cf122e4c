// SPDX-License-Identifier: MIT
// Mistake: the fake function takes one argument, the op two.
#include "tests/compile_fail/op.h"

using namespace mt;

void register_it() {
  make_mul2().register_fake([](const Tensor& a) { return mt::empty_like(a); });
}
