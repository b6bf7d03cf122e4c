// SPDX-License-Identifier: MIT
// Mistake: by name, the signature read from setup_context has two Tensor inputs, and
// backward returns one gradient.
#include "tests/compile_fail/op.h"

using namespace mt;

Registration register_it() {
  return register_autograd(
      "compile_fail::mul2", [](AutogradContext&, const Tensor& g) { return g; },
      [](AutogradContext&, const Tensor&, const Tensor&, const Tensor&) {});
}
