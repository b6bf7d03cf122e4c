// SPDX-License-Identifier: MIT
// gradcheck, gradgradcheck and opcheck: torch.autograd.gradcheck and
// torch.library.opcheck for minitensor ops.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dispatcher/dispatcher.h"
#include "runtime/tensor.h"

namespace mt {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = false;
  std::string message;  // empty when ok; else the worst element, numerical vs analytical
  double max_abs_error = 0;
  explicit operator bool() const { return ok; }
};

using DifferentiableFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Compares the tape's gradients with central differences in float64, for every input
// that requires grad (those must be float64).
GradcheckResult gradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                          GradcheckOptions opts = {});
// The same check on the first-order gradients: second derivatives through create_graph.
GradcheckResult gradgradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                              GradcheckOptions opts = {});

template <typename F>
requires std::is_same_v < std::invoke_result_t < F, const std::vector<Tensor>
& >, Tensor > GradcheckResult gradcheck(F fn, const std::vector<Tensor>& inputs,
                                        GradcheckOptions opts = {}) {
  return gradcheck(
      DifferentiableFn([fn](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs)}; }),
      inputs, opts);
}
template <typename F>
requires std::is_same_v < std::invoke_result_t < F, const std::vector<Tensor>
& >, Tensor > GradcheckResult gradgradcheck(F fn, const std::vector<Tensor>& inputs,
                                            GradcheckOptions opts = {}) {
  return gradgradcheck(
      DifferentiableFn([fn](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs)}; }),
      inputs, opts);
}

struct OpCheckReport {
  struct Test {
    std::string name;  // test_schema, test_faketensor, test_autograd_registration, test_gradcheck
    bool passed = false;
    bool skipped = false;
    std::string message;
  };
  std::string op;
  std::vector<Test> tests;
  bool ok() const;
  const Test* find(std::string_view name) const;
  std::string str() const;  // one line a test: "test_schema  PASS", "... FAIL: why"
};

struct OpCheckOptions {
  bool gradcheck = true;
  GradcheckOptions gradcheck_options{};
  bool compile = true;  // test_compile: through mt::compile, against eager
};

// Runs the op on each sample (its boxed arguments) through five checks, as
// torch.library.opcheck does: test_schema (declared mutation and aliasing match what the
// kernel does), test_faketensor (fake outputs match real sizes, strides, dtype and
// device), test_autograd_registration (an autograd formula is registered when inputs
// require grad), test_gradcheck (float64 central differences) and test_compile (torch's
// test_aot_dispatch_dynamic: the op captured and replayed by mt::compile, its outputs and
// gradients against eager's).
OpCheckReport opcheck(const OperatorHandle& op, const std::vector<Stack>& samples,
                      OpCheckOptions opts = {});

namespace detail {
// test_compile needs mt::compile, a layer above autograd: kernels/compile/opcheck_compile.cpp
// installs it at library initialization (Note [Library initialization]); without it the
// test is skipped, saying so.
using OpCheckCompileTest = OpCheckReport::Test (*)(const OperatorHandle& op,
                                                   const std::vector<Stack>& samples);
void set_opcheck_compile_test(OpCheckCompileTest test);
// The tensors of a stack, list elements in order (opcheck's tests and the op harness).
std::vector<Tensor> tensors_of(const Stack& s);
}  // namespace detail

}  // namespace mt
