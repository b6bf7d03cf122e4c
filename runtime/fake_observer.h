// SPDX-License-Identifier: MIT
// FakeFactoryObserver: mt::compile's capture is told about the fake tensors made outside an
// op's own dispatch. Internal (not installed): runtime/tensor.cpp, autograd/engine.cpp and
// kernels/compile/capture.cpp include it.
#pragma once

#include <optional>

#include "runtime/tensor.h"

namespace mt {

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
