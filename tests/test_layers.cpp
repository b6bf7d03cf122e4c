// SPDX-License-Identifier: MIT
// The layers at link level (tools/lint/check_layers.py --link): the runtime reads and converts
// values with its own copies, not with the ops above it (Note [Where the op-backed Tensor
// methods live], autograd/tensor_methods.cpp), while the Tensor methods stay ops.
#include <doctest/doctest.h>

#include "minitensor.h"

using namespace mt;

TEST_CASE("layers: to_vector, item, printing and from_vector dispatch no op") {
  Tensor x = arange(6).view({2, 3}).t();  // float32, not contiguous
  Tensor one = x.select(0, 1).select(0, 1);
  CallTrace trace;
  {
    TraceCallsGuard guard(&trace);
    CHECK(x.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
    CHECK(one.item<int64_t>() == 4);
    CHECK(x.str() ==
          "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]], shape=[3, 2], dtype=float32)");
    Tensor d = from_vector(std::vector<float>{1, 2}, Shape{2}, {.dtype = DType::Float64});
    CHECK(d.dtype() == DType::Float64);
    CHECK(d.to_vector<double>() == std::vector<double>{1, 2});
  }
  CHECK(trace.str() == "");
  // The Tensor methods are still ops: autograd and the trace see them.
  {
    TraceCallsGuard guard(&trace);
    Tensor c = x.contiguous().to(DType::Float64);
    CHECK(c.is_contiguous());
  }
  REQUIRE(trace.calls.size() == 2);
  CHECK(trace.calls[0].op == "mt::contiguous");
  CHECK(trace.calls[1].op == "mt::to.dtype");
}

TEST_CASE("layers: reading a fake tensor's values is refused as data_ptr refuses it") {
  Tensor f = fake_empty({2}, {.device = Device("cuda:0")});
  CHECK_THROWS_WITH_AS(f.to_vector<double>(),
                       "[data_ptr] cannot read the data of a fake tensor (shape [2], float32, "
                       "cuda:0): fake tensors carry only metadata; run the op on a real tensor to "
                       "get values",
                       Error);
}
