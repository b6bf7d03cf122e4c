// SPDX-License-Identifier: MIT
// FakeMode: under this guard, factories make fake tensors (metadata, no storage).
#pragma once

#include <optional>

#include "runtime/tensor.h"

namespace mt {

class FakeMode {
 public:
  FakeMode();
  ~FakeMode();
  FakeMode(const FakeMode&) = delete;
  FakeMode& operator=(const FakeMode&) = delete;
  static bool enabled();

 private:
  bool prev_;
};

// A fake tensor with t's sizes, strides, dtype and device.
Tensor fake_like(const Tensor& t);
// A fake tensor of the given shape (contiguous); a fake cuda:0 works without a GPU.
Tensor fake_empty(const Shape& shape, const TensorOptions& opts = {});

namespace detail {
// Told about each fake tensor made outside an op's own dispatch: by a factory under
// FakeMode (`factory` names it: "empty", "full" with `fill` set, "randn", "arange", ...),
// by fake_like / fake_empty, or by detach() (`source` set). mt::compile's capture uses it to place
// such tensors in its graph (kernels/compile/capture.cpp); nothing else installs one.
class FakeFactoryObserver {
 public:
  virtual ~FakeFactoryObserver() = default;
  virtual void made(const Tensor& t, const char* factory, std::optional<double> fill,
                    const Tensor* source) = 0;
};
// This thread's observer (null when none); returns the previous one.
FakeFactoryObserver* set_fake_factory_observer(FakeFactoryObserver* observer);
void notify_fake_made(const Tensor& t, const char* factory,
                      std::optional<double> fill = std::nullopt, const Tensor* source = nullptr);
}  // namespace detail

}  // namespace mt
