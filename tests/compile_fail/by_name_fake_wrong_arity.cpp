// SPDX-License-Identifier: MIT
// Mistake: by name, with the op's signature stated, the fake function takes one argument.
#include "tests/compile_fail/op.h"

using namespace mt;

Registration register_it() {
  return register_fake<Tensor(const Tensor&, const Tensor&)>(
      "compile_fail::mul2", [](const Tensor& a) { return mt::empty_like(a); });
}
