// SPDX-License-Identifier: MIT
#include "tools/bench/dispatch.h"

#include "minitensor.h"

namespace mt::bench {

namespace {
Tensor noop(const Tensor& x) { return x; }
}  // namespace

struct DispatchRows::State {
  Library lib{Library::Kind::Def, "bench"};
  Tensor x = zeros({1});
  Tensor xg = zeros({1}, {.requires_grad = true});
  Tensor one = ones({1}, {.requires_grad = true});
  Tensor a = ones({1}), b = ones({1});
};

DispatchRows::DispatchRows() : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.lib.def("noop(Tensor x) -> Tensor");
  s.lib.impl("noop", DispatchKey::CPU, noop);
  s.lib.def("noop_ag(Tensor x) -> Tensor");
  s.lib.impl("noop_ag", DispatchKey::CPU, noop);
  auto ag = dispatcher().find_or_throw("bench::noop_ag").typed<Tensor(const Tensor&)>();
  s.lib.impl("noop_ag", DispatchKey::Autograd, [ag](DispatchKeySet ks, const Tensor& x) {
    return ag.redispatch(ks.below(DispatchKey::Autograd), x);
  });
  auto op = dispatcher().find_or_throw("bench::noop").typed<Tensor(const Tensor&)>();
  auto handle = dispatcher().find_or_throw("bench::noop");
  // Through a volatile pointer, so that the compiler cannot inline the direct call away.
  Tensor (*volatile direct)(const Tensor&) = &noop;
  rows_ = {
      {"direct", "direct C++ call of the no-op kernel", 1,
       [&s, direct] {
         Tensor r = direct(s.x);
         (void)r;
       }},
      {"dispatch", "unboxed dispatch, CPU kernel only", 1,
       [&s, op] {
         Tensor r = op(s.x);
         (void)r;
       }},
      {"autograd_redispatch", "unboxed dispatch, Autograd kernel redispatching to CPU", 1,
       [&s, ag] {
         Tensor r = ag(s.xg);
         (void)r;
       }},
      {"boxed", "boxed call (Stack)", 4,
       [&s, handle] {
         Stack st{s.x};
         handle.call_boxed(&st);
       }},
      {"silu_grad", "mt::silu on 1 element, requires grad (records the tape)", 20,
       [&s] {
         Tensor r = silu(s.one);
         (void)r;
       }},
      {"add", "mt::add on 1 element", 20,
       [&s] {
         Tensor r = add(s.a, s.b);
         (void)r;
       }},
  };
}

DispatchRows::~DispatchRows() = default;

}  // namespace mt::bench
