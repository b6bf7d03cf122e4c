// SPDX-License-Identifier: MIT
// mt::clone, contiguous, to (dtype and device), copy_ and fill_. The data movement is
// runtime/copy.cpp (host) or runtime/cuda; the Tensor methods that call these ops are in
// autograd/tensor_methods.cpp (Note [Where the op-backed Tensor methods live]).
#include "kernels/ops/registry.h"
#include "runtime/tensor.h"

namespace mt {
namespace ops {
namespace {

Tensor like(const Tensor& x, DType t, Device d) {
  return empty(x.sizes(), {.dtype = t, .device = d});  // fake under FakeMode
}

Tensor copy_into(const Tensor& x, DType t, Device d) {
  Tensor out = like(x, t, d);
  if (!out.is_fake()) detail::copy_impl(out, x);
  return out;
}

template <typename F, typename Fake>
void register_inplace(const char* name, const char* schema, F fn, Fake fake,
                      std::source_location loc = std::source_location::current()) {
  auto op = custom_op(name, fn, {.schema = schema}, loc);
  op.register_kernel(DeviceType::CUDA, fn, loc);
  op.register_fake(fake, loc);
  keep(op);
}

}  // namespace

void register_copy() {
  auto pass = [](AutogradContext&, const Tensor& g) { return g; };
  auto nothing = [](AutogradContext&, auto&&...) {};
  register_everywhere(
      "mt::clone", "(Tensor self) -> Tensor",
      [](const Tensor& x) { return copy_into(x, x.dtype(), x.device()); }, pass, nothing);
  register_everywhere(
      "mt::contiguous", "(Tensor(a) self) -> Tensor(a)",
      [](const Tensor& x) {
        return x.is_contiguous() ? detail::make_view(x, x.sizes(), x.strides(), x.storage_offset())
                                 : copy_into(x, x.dtype(), x.device());
      },
      pass, nothing);
  register_everywhere(
      "mt::to.dtype", "(Tensor self, ScalarType dtype) -> Tensor",
      [](const Tensor& x, DType t) { return copy_into(x, t, x.device()); },
      [](AutogradContext& ctx, const Tensor& g) {
        return g.to(std::any_cast<DType>(ctx.data["dtype"]));
      },
      [](AutogradContext& ctx, const Tensor& x, DType, const Tensor&) {
        ctx.data["dtype"] = x.dtype();
      });
  register_everywhere(
      "mt::to.device", "(Tensor self, Device device) -> Tensor",
      [](const Tensor& x, Device d) { return copy_into(x, x.dtype(), d); },
      [](AutogradContext& ctx, const Tensor& g) {
        return g.to(std::any_cast<Device>(ctx.data["device"]));
      },
      [](AutogradContext& ctx, const Tensor& x, Device, const Tensor&) {
        ctx.data["device"] = x.device();
      });
  register_inplace(
      "mt::copy_", "(Tensor(a!) self, Tensor src) -> Tensor(a!)",
      [](const Tensor& self, const Tensor& src) {
        detail::copy_impl(self, src);
        return self;
      },
      [](const Tensor& self, const Tensor&) { return self; });
  register_inplace(
      "mt::fill_", "(Tensor(a!) self, float value) -> Tensor(a!)",
      [](const Tensor& self, double v) {
        detail::fill_impl(self, v);
        return self;
      },
      [](const Tensor& self, double) { return self; });
}

}  // namespace ops
}  // namespace mt
