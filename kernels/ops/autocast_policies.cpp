// SPDX-License-Identifier: MIT
// The built-in autocast policies (Note [Autocast] in autograd/autocast.h), one row an op:
// matmul in lower precision; reductions, softmax, losses and the ops that lose range in
// 16 bits (exp, log, pow) in float32; every binary row of the elementwise table promotes.
// `minitensor autocast` prints the table.
#include "autograd/autocast.h"
#include "dispatcher/library.h"
#include "kernels/elementwise_rows.h"
#include "kernels/ops/registry.h"

namespace mt::ops {

void register_autocast_policies() {
  static Library lib(Library::Kind::Impl, "mt", DispatchKey::Autocast);
  auto add = [](const std::string& name, AutocastPolicy policy,
                std::source_location loc = std::source_location::current()) {
    lib.impl(name, detail::autocast_kernel(policy), loc);
    detail::add_autocast_policy(name, policy);
  };
  add("mt::matmul", AutocastPolicy::LowerPrecision);
  for (const char* name : {"mt::sum", "mt::mean", "mt::softmax", "mt::log_softmax", "mt::mse_loss",
                           "mt::exp", "mt::log", "mt::pow"})
    add(name, AutocastPolicy::Float32);
  for (const ew::Row& r : ew::kRows)
    if (r.arity == ew::Arity::Binary && !r.kernel_only())
      add(ew::op_name(r), AutocastPolicy::Promote);
}

}  // namespace mt::ops
