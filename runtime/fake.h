// SPDX-License-Identifier: MIT
// FakeMode: under this guard, factories make fake tensors (metadata, no storage).
#pragma once

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

}  // namespace mt
