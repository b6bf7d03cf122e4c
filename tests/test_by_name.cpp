// SPDX-License-Identifier: MIT
// Registration by name for any op (issue 36): register_fake, register_autograd and
// register_kernel on MT_LIBRARY ops, Fake kernels that are always fake, the dropped-op
// message, ctx.save / ctx.get, scalar conversion in mt::call, get_kernel and
// set_kernel_enabled, and opcheck's test_compile.
#include <doctest/doctest.h>

#include <source_location>

#include "tests/helpers.h"

using namespace mt;

namespace {

Tensor scale_cpu(const Tensor& x, double alpha) { return mt::mul(x, alpha); }

// byname_*::scale(Tensor x, float alpha) -> Tensor with a CPU kernel, as an MT_LIBRARY
// block of a user's .so would define it.
struct ScaleLib {
  Library def, cpu;
  explicit ScaleLib(const char* ns)
      : def(Library::Kind::Def, ns), cpu(Library::Kind::Impl, ns, DispatchKey::CPU) {
    def.def("scale(Tensor x, float alpha) -> Tensor");
    cpu.impl("scale", scale_cpu);
  }
};

auto scale_backward = [](AutogradContext& ctx, const Tensor& grad) {
  return mt::mul(grad, ctx.get<double>("alpha"));
};
auto scale_setup = [](AutogradContext& ctx, const Tensor&, double alpha, const Tensor&) {
  ctx.save("alpha", alpha);
};

}  // namespace

TEST_SUITE("by name") {
  TEST_CASE("register_fake by name on an MT_LIBRARY op: a fake tensor in, a fake tensor out") {
    ScaleLib lib("byname_fake");
    Registration fake = register_fake("byname_fake::scale",
                                      [](const Tensor& x, double) { return mt::empty_like(x); });
    Tensor big = fake_empty({int64_t(1) << 28});  // 1 GiB if it were real
    Tensor out = call<Tensor>("byname_fake::scale", big, 2.0);
    CHECK(out.is_fake());
    CHECK(out.sizes() == Shape{int64_t(1) << 28});
    CHECK(dispatcher()
              .dump("byname_fake::scale")
              .find("Fake: kernel registered at tests/test_by_name.cpp:") != std::string::npos);
    // the registration goes with its handle
    fake.reset();
    CHECK(error_of([&] {
            call<Tensor>("byname_fake::scale", big, 2.0);
          }).starts_with("[byname_fake::scale] 'byname_fake::scale' has no Fake kernel"));
  }

  TEST_CASE("a Fake kernel from m.impl in MT_LIBRARY_IMPL(ns, Fake, m) runs under FakeMode") {
    ScaleLib lib("byname_impl");
    Library fake(Library::Kind::Impl, "byname_impl", DispatchKey::Fake);
    fake.impl("scale",
              [](const Tensor& x, double) { return mt::empty_like(x); });  // the obvious way
    Tensor out = call<Tensor>("byname_impl::scale", fake_empty({3, 4}), 2.0);
    CHECK(out.is_fake());  // was a real tensor with uninitialised memory
    CHECK(out.key_set() == DispatchKeySet(DispatchKey::Fake));
    Tensor cuda_out =
        call<Tensor>("byname_impl::scale",
                     fake_empty({2}, TensorOptions{.device = Device(DeviceType::CUDA, 0)}), 2.0);
    CHECK(cuda_out.is_fake());  // no "CUDA is unavailable": nothing is allocated
    CHECK(cuda_out.device() == Device(DeviceType::CUDA, 0));
  }

  TEST_CASE("a Fake kernel that returns a real tensor, or reads data, is an error naming the op") {
    ScaleLib lib("byname_real");
    Tensor held = mt::ones({3});
    auto returns_held = [held](const Tensor&, double) { return held; };
    const auto here = std::source_location::current();
    Registration fake = register_fake("byname_real::scale", returns_held);
    const std::string at = fmt::format("tests/test_by_name.cpp:{}", here.line() + 1);
    CHECK(error_of([&] { call<Tensor>("byname_real::scale", fake_empty({3}), 2.0); }) ==
          "[byname_real::scale] the Fake kernel registered at " + at +
              " returned a real tensor "
              "as output 0 (shape [3]); a fake kernel must return fake tensors: make them from its "
              "inputs with mt::empty_like or mt::empty (it runs under FakeMode), not from real "
              "tensors it holds");
    fake.reset();
    Registration reads = register_fake("byname_real::scale", [](const Tensor& x, double) {
      (void)x.item<float>();
      return mt::empty_like(x);
    });
    CHECK(error_of([&] { call<Tensor>("byname_real::scale", fake_empty({1}), 2.0); })
              .starts_with(
                  "[byname_real::scale] the Fake kernel registered at tests/test_by_name.cpp:"));
  }

  TEST_CASE("register_autograd by name on an MT_LIBRARY op, with ctx.save / ctx.get for a double") {
    ScaleLib lib("byname_grad");
    Registration fake = register_fake("byname_grad::scale",
                                      [](const Tensor& x, double) { return mt::empty_like(x); });
    // the op's C++ signature comes from setup_context: (const Tensor&, double) -> Tensor
    Registration grad = register_autograd("byname_grad::scale", scale_backward, scale_setup);
    Tensor x = mt::randn({3}).requires_grad_(true);
    backward(mt::sum(call<Tensor>("byname_grad::scale", x, 3.0)));
    CHECK(allclose(x.grad(), mt::full({3}, 3.0)));
    GradcheckResult r = gradcheck(
        [](const std::vector<Tensor>& xs) {
          return call<Tensor>("byname_grad::scale", xs[0], 0.5);
        },
        {mt::randn({4}, TensorOptions{.dtype = DType::Float64}).requires_grad_(true)});
    CHECK_MESSAGE(r.ok, r.message);
    OpCheckReport rep = opcheck(dispatcher().find_or_throw("byname_grad::scale"),
                                {Stack{mt::randn({3, 4}), 2.0}, Stack{mt::randn({5}), -1.5}});
    CHECK_MESSAGE(rep.ok(), rep.str());
    REQUIRE(rep.find("test_compile") != nullptr);
    CHECK(!rep.find("test_compile")->skipped);
    CHECK(rep.find("test_compile")->passed);
    // the signature can be stated instead
    grad.reset();
    Registration stated = register_autograd<Tensor(const Tensor&, double)>(
        "byname_grad::scale", scale_backward,
        [](AutogradContext& ctx, const Tensor&, double alpha, const Tensor&) {
          ctx.save("alpha", alpha);
        });
    Tensor y = mt::randn({2}).requires_grad_(true);
    backward(mt::sum(call<Tensor>("byname_grad::scale", y, 2.0)));
    CHECK(allclose(y.grad(), mt::full({2}, 2.0)));
  }

  TEST_CASE("register_autograd by name: a signature that disagrees with the schema is refused") {
    ScaleLib lib("byname_sig");
    CHECK(error_of([&] {
            (void)register_autograd(
                "byname_sig::scale", [](AutogradContext&, const Tensor& g) { return g; },
                [](AutogradContext&, const Tensor&, const Tensor&) {});
          }) ==
          "[typed()] the C++ signature (Tensor) -> Tensor does not match the schema of "
          "'byname_sig::scale': byname_sig::scale(Tensor x, float alpha) -> Tensor; change the "
          "C++ types to match the schema");
    CHECK(
        error_of([&] {
          (void)register_fake("no_such_ns::absent_op", [](const Tensor& x) { return x; });
        }) ==
        "[dispatcher] no operator named 'no_such_ns::absent_op' is registered; define it with "
        "mt::custom_op(\"no_such_ns::absent_op\", fn) or MT_LIBRARY (run `minitensor ops` to list "
        "the ops)");
  }

  TEST_CASE("ctx.get: a missing name, another type, or a lossy conversion is a clear error") {
    ScaleLib lib("byname_ctx");
    auto run_with = [](auto bw) {
      Registration r = register_autograd("byname_ctx::scale", bw, scale_setup);
      Tensor x = mt::randn({2}).requires_grad_(true);
      return error_of([&] { backward(mt::sum(call<Tensor>("byname_ctx::scale", x, 2.5))); });
    };
    CHECK(run_with([](AutogradContext& ctx, const Tensor& g) {
            return mt::mul(g, ctx.get<double>("beta"));
          }) ==
          "[byname_ctx::scale] ctx.get<double>('beta'): nothing was saved under that name (saved: "
          "'alpha'); save it in setup_context with ctx.save('beta', value)");
    CHECK(run_with([](AutogradContext& ctx, const Tensor& g) {
            return mt::mul(g, double(ctx.get<std::string>("alpha").size()));
          }) ==
          "[byname_ctx::scale] ctx.get<std::string>('alpha'): setup_context saved a double "
          "under that name; ask for that type");
    CHECK(run_with([](AutogradContext& ctx, const Tensor& g) {
            return mt::mul(g, double(ctx.get<int>("alpha")));
          }) ==
          "[byname_ctx::scale] ctx.get<int>('alpha'): the saved double 2.5 does not fit a int "
          "without losing value; ask for double");
  }

  TEST_CASE("a dropped custom_op says where it was defined and that its handle was destroyed") {
    const auto here = std::source_location::current();
    { auto op = custom_op("byname_app::scale", scale_cpu, {}, here); }
    CHECK(error_of([] { call<Tensor>("byname_app::scale", mt::ones({2}), 2.0); }) ==
          fmt::format("[dispatcher] 'byname_app::scale' was defined at tests/test_by_name.cpp:{}, "
                      "and then dropped: the Library or custom_op handle that defined it was "
                      "destroyed, which undoes its registrations. Keep that handle alive while "
                      "the op is used (a custom_op in a shared library: a static handle; "
                      "docs/embedding.md), or define the op in an MT_LIBRARY block, which lives "
                      "for the process",
                      here.line()));
  }

  TEST_CASE("call by name converts an int for a float argument, and refuses a lossy one") {
    ScaleLib lib("byname_call");
    Tensor x = mt::ones({2});
    CHECK(allclose(call<Tensor>("byname_call::scale", x, 2), mt::full({2}, 2.0)));  // was an error
    CHECK(error_of([&] { call<Tensor>("byname_call::scale", x, int64_t(1) << 60); }) ==
          "[call] 'byname_call::scale' takes argument 'alpha' as a float, and "
          "1152921504606846976 has no exact float value; pass a double");
    auto op = custom_op("byname_call::repeat",
                        [](const Tensor& t, int64_t n) { return mt::mul(t, double(n)); });
    CHECK(allclose(call<Tensor>("byname_call::repeat", x, 3.0), mt::full({2}, 3.0)));
    CHECK(error_of([&] { call<Tensor>("byname_call::repeat", x, 2.5); }) ==
          "[call] 'byname_call::repeat' takes argument '_1' as an int, and 2.5 is not a whole "
          "number (it would lose its fraction); pass an int");
    CHECK(error_of([&] { call<Tensor>("byname_call::repeat", x, std::string("2")); }) ==
          "[call] the C++ signature (Tensor, str) -> Tensor does not match the schema of "
          "'byname_call::repeat': byname_call::repeat(Tensor _0, int _1) -> Tensor; change the "
          "C++ types to match the schema");
  }

  TEST_CASE("get_kernel returns a backend's kernel; set_kernel_enabled switches it off and on") {
    ScaleLib lib("byname_kernel");
    auto cpu = get_kernel<Tensor(const Tensor&, double)>("byname_kernel::scale", DispatchKey::CPU);
    // a wrapper that calls the kernel below it
    Registration wrapped =
        register_kernel("byname_kernel::scale", DeviceType::CPU,
                        [cpu](const Tensor& x, double a) { return mt::add(cpu(x, a), 1.0); });
    Tensor x = mt::ones({2});
    CHECK(allclose(call<Tensor>("byname_kernel::scale", x, 2.0), mt::full({2}, 3.0)));
    wrapped.reset();
    CHECK(allclose(call<Tensor>("byname_kernel::scale", x, 2.0), mt::full({2}, 2.0)));
    set_kernel_enabled("byname_kernel::scale", DispatchKey::CPU, false);
    CHECK(error_of([&] { call<Tensor>("byname_kernel::scale", x, 2.0); })
              .starts_with("[byname_kernel::scale] Could not run 'byname_kernel::scale' with "
                           "arguments from the 'CPU' backend."));
    CHECK(dispatcher().dump("byname_kernel::scale").find("(disabled by set_kernel_enabled)") !=
          std::string::npos);
    set_kernel_enabled("byname_kernel::scale", DispatchKey::CPU, true);
    CHECK(allclose(call<Tensor>("byname_kernel::scale", x, 2.0), mt::full({2}, 2.0)));
    CHECK(error_of([] {
            (void)get_kernel<Tensor(const Tensor&, double)>("byname_kernel::scale",
                                                            DispatchKey::CUDA);
          })
              .starts_with("[get_kernel] 'byname_kernel::scale' has no kernel for CUDA (missing); "
                           "its table:\n"));
  }

  TEST_CASE(
      "opcheck test_compile: a fake kernel whose shape disagrees with the real one fails it") {
    ScaleLib lib("byname_badfake");
    Registration fake = register_fake("byname_badfake::scale", [](const Tensor& x, double) {
      return mt::empty({x.numel() + 1}, TensorOptions{.dtype = x.dtype()});
    });
    OpCheckReport rep = opcheck(dispatcher().find_or_throw("byname_badfake::scale"),
                                {Stack{mt::randn({3}), 2.0}}, {.gradcheck = false});
    const OpCheckReport::Test* t = rep.find("test_compile");
    REQUIRE(t != nullptr);
    CHECK(!t->passed);
    CHECK(t->message ==
          "sample 0: output 0: expected float32[3] (eager), got float32[4] in the graph "
          "mt::compile captured; the compiled call is captured through the Fake kernel (and the "
          "autograd formula): make them agree with the real kernel");
    CHECK(rep.find("test_faketensor")->message ==
          "sample 0: fake output 0 has shape [4] but the real output has [3]");
  }
}
