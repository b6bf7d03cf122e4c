// SPDX-License-Identifier: MIT
// Autocast's state, its kernels and register_autocast (Note [Autocast] in
// autograd/autocast.h). The built-in policy table is in kernels/ops/autocast_policies.cpp.
#include "autograd/autocast.h"

#include <mutex>

#include "dispatcher/library.h"

namespace mt {
namespace {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::BFloat16;
};
thread_local AutocastState t_autocast[2];  // by DeviceType

AutocastState& state(DeviceType d) { return t_autocast[d == DeviceType::CUDA ? 1 : 0]; }

std::mutex g_policies_mutex;
std::vector<AutocastEntry>& policies() {
  static auto* v = new std::vector<AutocastEntry>();  // never destroyed
  return *v;
}

// Casts the floating-point tensor arguments on the stack that `want` picks to the dtype it
// returns (nullopt: leave it), each through mt::to.dtype.
template <typename Want>
void cast_arguments(const OperatorHandle& op, Stack* stack, Want want) {
  static const auto to =
      dispatcher().find_or_throw("mt::to.dtype").typed<Tensor(const Tensor&, DType)>();
  const size_t n = op.schema().arguments.size();
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    Value& v = (*stack)[i];
    if (!v.is_tensor()) continue;
    const Tensor t = v.to_tensor();
    if (!t.defined() || !is_floating(t.dtype()) || !autocast_enabled(t.device().type)) continue;
    if (std::optional<DType> d = want(t); d && *d != t.dtype()) v = Value(to.call(t, *d));
  }
}

void run_below(const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
  ExcludeDispatchKeyGuard no_autocast(DispatchKey::Autocast);
  op.redispatch_boxed(ks.below(DispatchKey::Autocast), stack);
}

bool is_16_bit(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

std::string_view autocast_policy_name(AutocastPolicy p) {
  switch (p) {
    case AutocastPolicy::LowerPrecision:
      return "lower_precision";
    case AutocastPolicy::Float32:
      return "float32";
    case AutocastPolicy::Promote:
      return "promote";
  }
  return "?";
}

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled)
    : device_(device),
      saved_enabled_(state(device).enabled),
      saved_dtype_(state(device).dtype),
      saved_included_(detail::t_local_keys.included) {
  MT_CHECK(is_16_bit(dtype),
           "[autocast] {} is not a lower-precision floating type; use DType::BFloat16 or "
           "DType::Float16",
           dtype);
  state(device) = {enabled, dtype};
  const bool any = state(DeviceType::CPU).enabled || state(DeviceType::CUDA).enabled;
  detail::t_local_keys.included = any ? saved_included_.add(DispatchKey::Autocast)
                                      : saved_included_.remove(DispatchKey::Autocast);
}

AutocastGuard::~AutocastGuard() {
  state(device_) = {saved_enabled_, saved_dtype_};
  detail::t_local_keys.included = saved_included_;
}

bool autocast_enabled(DeviceType device) { return state(device).enabled; }
DType autocast_dtype(DeviceType device) { return state(device).dtype; }

namespace detail {

KernelFunction autocast_kernel(AutocastPolicy policy) {
  return KernelFunction::boxed([policy](const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
    if (policy == AutocastPolicy::LowerPrecision) {
      cast_arguments(op, stack, [](const Tensor& t) -> std::optional<DType> {
        if (t.dtype() != DType::Float32) return std::nullopt;  // float64 stays as asked
        return autocast_dtype(t.device().type);
      });
    } else if (policy == AutocastPolicy::Float32) {
      cast_arguments(op, stack, [](const Tensor& t) -> std::optional<DType> {
        return is_16_bit(t.dtype()) ? std::optional<DType>(DType::Float32) : std::nullopt;
      });
    } else {
      std::optional<DType> widest;
      const size_t n = op.schema().arguments.size();
      for (size_t i = stack->size() - n; i < stack->size(); ++i) {
        const Value& v = (*stack)[i];
        if (!v.is_tensor() || !v.to_tensor().defined() || !is_floating(v.to_tensor().dtype()))
          continue;
        const DType t = v.to_tensor().dtype();
        widest = widest ? promote_types(*widest, t) : t;
      }
      if (widest)
        cast_arguments(op, stack, [&](const Tensor&) -> std::optional<DType> { return widest; });
    }
    run_below(op, ks, stack);
  });
}

KernelFunction autocast_cast_kernel(DeviceType device, DType cast_inputs) {
  MT_CHECK(is_floating(cast_inputs),
           "[register_autocast] cast_inputs is {}, not a floating-point type; autocast casts "
           "floating-point inputs only (use DType::Float32, Float16 or BFloat16)",
           cast_inputs);
  return KernelFunction::boxed(
      [device, cast_inputs](const OperatorHandle& op, DispatchKeySet ks, Stack* stack) {
        cast_arguments(op, stack, [&](const Tensor& t) -> std::optional<DType> {
          return t.device().type == device ? std::optional<DType>(cast_inputs) : std::nullopt;
        });
        run_below(op, ks, stack);
      });
}

// Ops without a policy fall through at Autocast: no cast, and no cost.
void install_autocast_fallback() {
  static Library lib(Library::Kind::Impl, "_", DispatchKey::Autocast);
  lib.fallback(fallthrough());
}

void add_autocast_policy(std::string op, AutocastPolicy policy) {
  std::lock_guard<std::mutex> lock(g_policies_mutex);
  policies().push_back({std::move(op), policy});
}

}  // namespace detail

std::vector<AutocastEntry> autocast_policies() {
  (void)dispatcher();  // the built-in table fills on the library's first use
  std::lock_guard<std::mutex> lock(g_policies_mutex);
  return policies();
}

std::string autocast_table() {
  std::string out = fmt::format("{:<20} {}\n", "op", "policy");
  for (const AutocastEntry& e : autocast_policies())
    out += fmt::format("{:<20} {}\n", e.op, autocast_policy_name(e.policy));
  return out;
}

Registration register_autocast(std::string_view op, DeviceType device, DType cast_inputs,
                               std::source_location loc) {
  auto lib = detail::by_name_library(op, loc);
  lib->impl(op, DispatchKey::Autocast, detail::autocast_cast_kernel(device, cast_inputs), loc);
  return Registration(std::move(lib));
}

}  // namespace mt
