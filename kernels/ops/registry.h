// SPDX-License-Identifier: MIT
// How the built-in op files register: each defines register_<family>(), called once
// from kernels/register_builtins.cpp (Note [Library initialization] in runtime/init.h), and
// keeps its custom_op handles alive here.
#pragma once

#include <memory>
#include <source_location>
#include <vector>

#include "autograd/custom_op.h"
#include "kernels/ops.h"

namespace mt::ops {

// Keeps a built-in op's registrations for the life of the process.
void keep_alive(std::shared_ptr<void> registrations);
template <typename Op>
void keep(const Op& op) {
  keep_alive(std::make_shared<Op>(op));
}

// Registers fn as the op's CPU, CUDA and Fake kernel (fn must work on all three: views,
// and ops built from other ops or from factories that are fake under FakeMode), with the
// given backward and setup_context.
//
// A registration helper takes the caller's location and passes it to every registration,
// so that `minitensor dump mt::view` names the op's own line, not the helper's.
template <typename F, typename Backward, typename Setup>
void register_everywhere(const char* name, const char* schema, F fn, Backward bw, Setup setup,
                         std::source_location loc = std::source_location::current()) {
  auto op = custom_op(name, fn, {.schema = schema}, loc);
  op.register_kernel(DeviceType::CUDA, fn, loc);
  op.register_fake(fn, loc);
  op.register_autograd(bw, setup, loc);
  keep(op);
}

// A typed handle to a built-in op, looked up once per call site.
#define MT_BUILTIN_OP(name, Sig) \
  static const auto op = ::mt::dispatcher().find_or_throw(name).typed<Sig>()

// The family registrations (one per file in kernels/ops/; the op folders' are listed in
// kernels/ops/folders.def).
void register_binary();
void register_unary();
void register_views();
void register_copy();

// Helpers shared by op files.
DType float_result(DType t);  // int64/bool inputs of float ops compute in float32
void check_floating(const Tensor& t, const char* op);

}  // namespace mt::ops
