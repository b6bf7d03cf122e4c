// SPDX-License-Identifier: MIT
// Autocast through the Autocast key (issue 37): the policies (lower precision, float32,
// promote), nesting, thread-locality, no_grad, gradients in each parameter's own dtype,
// register_autocast by handle and by name, the table, dump and MT_TRACE=dispatch.
#include <doctest/doctest.h>

#include <thread>

#include "tests/helpers.h"

using namespace mt;

TEST_SUITE("autocast") {
  TEST_CASE(
      "AutocastGuard on CPU: matmul in bfloat16, reductions and softmax in float32, binary ops "
      "promote") {
    const Tensor a = randn({4, 3}), b = randn({3, 2});
    CHECK(mt::matmul(a, b).dtype() == DType::Float32);
    {
      AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
      CHECK(autocast_enabled(DeviceType::CPU));
      CHECK(!autocast_enabled(DeviceType::CUDA));
      const Tensor p = mt::matmul(a, b);
      CHECK(p.dtype() == DType::BFloat16);
      CHECK(mt::sum(p).dtype() == DType::Float32);
      CHECK(mt::mean(p, {0}).dtype() == DType::Float32);
      CHECK(mt::softmax(p, -1).dtype() == DType::Float32);
      CHECK(mt::log_softmax(p, -1).dtype() == DType::Float32);
      CHECK(mt::mse_loss(p, p).dtype() == DType::Float32);
      CHECK(mt::exp(p).dtype() == DType::Float32);
      CHECK(mt::add(p, randn({4, 2})).dtype() == DType::Float32);
      CHECK(mt::relu(p).dtype() == DType::BFloat16);  // no policy: as it is
      CHECK(mt::matmul(a.to(DType::Float64), b.to(DType::Float64)).dtype() == DType::Float64);
      // the values: bfloat16's rounding of the float32 product
      const auto want = mt::matmul(a.to(DType::BFloat16).to(DType::Float32),
                                   b.to(DType::BFloat16).to(DType::Float32))
                            .to_vector<float>();
      const auto got = p.to(DType::Float32).to_vector<float>();
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-2));
    }
    CHECK(!autocast_enabled(DeviceType::CPU));
    CHECK(mt::matmul(a, b).dtype() == DType::Float32);
  }

  TEST_CASE("AutocastGuard nests, is per thread, and no_grad does not turn it off") {
    const Tensor a = randn({2, 2});
    {
      AutocastGuard outer(DeviceType::CPU, DType::BFloat16);
      {
        AutocastGuard inner(DeviceType::CPU, DType::Float16);
        CHECK(mt::matmul(a, a).dtype() == DType::Float16);
        {
          AutocastGuard off(DeviceType::CPU, DType::BFloat16, false);
          CHECK(mt::matmul(a, a).dtype() == DType::Float32);
        }
        CHECK(mt::matmul(a, a).dtype() == DType::Float16);
      }
      CHECK(mt::matmul(a, a).dtype() == DType::BFloat16);
      DType other = DType::Bool;
      std::thread t([&] { other = mt::matmul(a, a).dtype(); });
      t.join();
      CHECK(other == DType::Float32);
      NoGradGuard no_grad;
      CHECK(mt::matmul(a, a).dtype() == DType::BFloat16);
      // autocast on CUDA only does not cast CPU tensors
      AutocastGuard cpu_off(DeviceType::CPU, DType::BFloat16, false);
      AutocastGuard cuda(DeviceType::CUDA, DType::Float16);
      CHECK(mt::matmul(a, a).dtype() == DType::Float32);
    }
    CHECK(!local_dispatch_keys().included.has(DispatchKey::Autocast));
    CHECK(error_of([] { AutocastGuard g(DeviceType::CPU, DType::Float32); }) ==
          "[autocast] float32 is not a lower-precision floating type; use DType::BFloat16 or "
          "DType::Float16");
  }

  TEST_CASE("autocast: gradients come back in each parameter's own dtype") {
    const Tensor w = randn({3, 2}).requires_grad_();
    const Tensor wb = randn({2, 2}).to(DType::BFloat16).requires_grad_();
    const Tensor x = randn({4, 3});
    {
      AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
      const Tensor h = mt::matmul(x, w);
      CHECK(h.dtype() == DType::BFloat16);
      const Tensor loss = mt::sum(mt::matmul(h, wb));
      CHECK(loss.dtype() == DType::Float32);
      backward(loss);
    }
    REQUIRE(w.grad().defined());
    CHECK(w.grad().dtype() == DType::Float32);
    CHECK(wb.grad().dtype() == DType::BFloat16);
    // d sum(x w wb) / dw = x^T 1 wb^T, within bfloat16's precision
    const Tensor want = mt::matmul(mt::matmul(x.t(), ones({4, 2})), wb.to(DType::Float32).t());
    const auto g = w.grad().to_vector<float>(), e = want.to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(e[i]).epsilon(3e-2));
  }

  TEST_CASE("register_autocast by handle and by name, undone with its Registration") {
    auto same = custom_op("autocast_test::same", [](const Tensor& x) { return mt::mul(x, 1.0); });
    const Tensor x = randn({3}).to(DType::BFloat16);
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    CHECK(same(x).dtype() == DType::BFloat16);  // no policy: no cast
    {
      Registration r = register_autocast(same, DeviceType::CPU, DType::Float32);
      CHECK(same(x).dtype() == DType::Float32);
      CHECK(dispatcher()
                .dump_table("autocast_test::same")
                .find("  Autocast  kernel      [tests/test_autocast.cpp:") != std::string::npos);
    }
    CHECK(same(x).dtype() == DType::BFloat16);
    CHECK(dispatcher()
              .dump_table("autocast_test::same")
              .find("  Autocast  fallthrough [autograd/autocast.cpp:") != std::string::npos);
    {
      Registration r = register_autocast("autocast_test::same", DeviceType::CPU, DType::Float32);
      CHECK(same(x).dtype() == DType::Float32);
    }
    {
      Registration r = register_autocast("autocast_test::same", DeviceType::CUDA, DType::Float32);
      CHECK(same(x).dtype() == DType::BFloat16);  // a CPU tensor: not cast
    }
    CHECK(error_of([&] { (void)register_autocast(same, DeviceType::CPU, DType::Int64); }) ==
          "[register_autocast] cast_inputs is int64, not a floating-point type; autocast casts "
          "floating-point inputs only (use DType::Float32, Float16 or BFloat16)");
  }

  TEST_CASE("autocast: the policy table, dump and MT_TRACE=dispatch") {
    const std::string table = autocast_table();
    CHECK(table.find("mt::matmul           lower_precision\n") != std::string::npos);
    CHECK(table.find("mt::softmax          float32\n") != std::string::npos);
    CHECK(table.find("mt::add              promote\n") != std::string::npos);
    CHECK(dispatcher()
              .dump_table("mt::matmul")
              .find("  Autocast  kernel      [kernels/ops/autocast_policies.cpp:") !=
          std::string::npos);
    CHECK(dispatcher()
              .dump_table("mt::relu")
              .find("  Autocast  fallthrough [autograd/autocast.cpp:") != std::string::npos);
    const Tensor a = randn({2, 2});
    LogCapture log;
    {
      AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
      dispatcher().set_trace_dispatch(true);
      (void)mt::matmul(a, a);
      dispatcher().set_trace_dispatch(false);
    }
    CHECK(log.count("[call] mt::matmul keys={Autocast, CPU} -> Autocast kernel "
                    "[kernels/ops/autocast_policies.cpp:") == 1);
    CHECK(log.count("  [call] mt::to.dtype keys={CPU} -> CPU kernel [") == 2);
    CHECK(log.count("  [redispatch] mt::matmul keys={CPU} -> CPU kernel [") == 1);
  }
}
