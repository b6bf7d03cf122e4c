// SPDX-License-Identifier: MIT
// Autocast: ops run in lower precision where that is safe, through the Autocast dispatch
// key and a per-op policy (torch.autocast); register_autocast sets a user op's policy.
#pragma once

#include <string>
#include <vector>

#include "autograd/custom_op.h"

namespace mt {

// Note [Autocast]
// AutocastGuard guard(DeviceType::CUDA, DType::BFloat16) turns autocast on for tensors of
// that device type on this thread until the guard dies; guards nest (the innermost one
// wins, and the outer state comes back), no_grad does not touch them (they are separate
// keys). While any autocast is on, Autocast is in the thread's included keys. An op's
// kernel at Autocast is its policy: it casts the floating-point tensor arguments of the
// enabled device type, then calls the op below Autocast, with Autocast excluded (the ops
// inside run as written). Ops with no policy fall through at Autocast: no cost, no cast.
// The casts are mt::to.dtype calls, which autograd records, so a parameter's gradient
// comes back in the parameter's own dtype.
enum class AutocastPolicy : uint8_t {
  LowerPrecision,  // float32 tensors to the autocast dtype (matmul)
  Float32,         // 16-bit floating tensors to float32 (reductions, softmax, losses)
  Promote,         // floating tensors to the widest floating dtype among them (binary ops)
};
std::string_view autocast_policy_name(AutocastPolicy p);  // "lower_precision", ...

class AutocastGuard {
 public:
  // dtype: BFloat16 or Float16; enabled = false turns autocast off for the device type
  // in this scope.
  AutocastGuard(DeviceType device, DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool saved_enabled_;
  DType saved_dtype_;
  DispatchKeySet saved_included_;
};

// Whether autocast is on for the device type on this thread, and its dtype.
bool autocast_enabled(DeviceType device);
DType autocast_dtype(DeviceType device);

namespace detail {
// The op's kernel at the Autocast key for a policy (the built-in table's).
KernelFunction autocast_kernel(AutocastPolicy policy);
// The kernel register_autocast installs: the op's floating tensors of `device` cast to
// `cast_inputs` while autocast is on for that device.
KernelFunction autocast_cast_kernel(DeviceType device, DType cast_inputs);
}  // namespace detail

// The built-in policies, one row an op: "mt::matmul lower_precision" (minitensor autocast).
struct AutocastEntry {
  std::string op;
  AutocastPolicy policy;
};
std::vector<AutocastEntry> autocast_policies();
std::string autocast_table();  // the policies as text, one line an op
namespace detail {
void add_autocast_policy(std::string op, AutocastPolicy policy);  // the built-in table's rows
}

// register_autocast("ns::op", DeviceType::CUDA, DType::Float32)
// (torch.library.register_autocast): under autocast on that device type, the op's
// floating-point tensor arguments on it are cast to cast_inputs before it runs. Its kernel
// at the Autocast key; undone when the Registration is destroyed.
Registration register_autocast(std::string_view op, DeviceType device, DType cast_inputs,
                               std::source_location loc = std::source_location::current());
template <typename Sig>
Registration register_autocast(const CustomOp<Sig>& op, DeviceType device, DType cast_inputs,
                               std::source_location loc = std::source_location::current()) {
  return register_autocast(op.name(), device, cast_inputs, loc);
}

}  // namespace mt
