// SPDX-License-Identifier: MIT
// libtorch's side of `minitensor bench dispatch`: the same six host costs, measured the
// same way (the same loop, tools/bench/host_loop.h, and iteration counts), so that
// `compare_torch.py --dispatch` can put both on one machine in one run instead of
// comparing against figures from another day (the GPU host's Xeon moves by up to 1.8x
// between runs). Not part of the Meson build: it needs libtorch, which only the GPU host
// has (from the torch wheel); tools/gpu_check.sh compiles it there:
//
//   g++ -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=<torch's> -I. -I<torch>/include
//       tools/bench_libtorch.cpp -L<torch>/lib -ltorch_cpu -lc10 -Wl,-rpath,<torch>/lib
//
// Prints one JSON object: row -> ns per call (compare_torch.py pairs the rows).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdio>

#include "tools/bench/host_loop.h"

namespace {

at::Tensor noop(const at::Tensor& x) { return x; }

at::Tensor noop_ag(c10::DispatchKeySet ks, const at::Tensor& x) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("bench::noop_ag", "")
                       .typed<at::Tensor(const at::Tensor&)>();
  return op.redispatch(ks & c10::after_autograd_keyset, x);
}

}  // namespace

TORCH_LIBRARY(bench, m) {
  m.def("noop(Tensor x) -> Tensor");
  m.impl("noop", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(noop)));
  m.def("noop_ag(Tensor x) -> Tensor");
  m.impl("noop_ag", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(noop)));
  m.impl("noop_ag", torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(noop_ag)));
}

int main() {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("bench::noop", "");
  auto op = handle.typed<at::Tensor(const at::Tensor&)>();
  auto ag = c10::Dispatcher::singleton().findSchemaOrThrow("bench::noop_ag", "").typed<at::Tensor(const at::Tensor&)>();
  at::Tensor x = at::zeros({1});
  at::Tensor xg = at::zeros({1});
  xg.set_requires_grad(true);
  at::Tensor (*volatile direct)(const at::Tensor&) = &noop;
  const int64_t n = 2000000;
  double t_direct = mt::bench::ns_per_call([&] { at::Tensor r = direct(x); (void)r; }, n);
  // A custom op with a CPU kernel only, called as a user calls it: libtorch's CPU tensors
  // carry the autograd keys, so the call passes the autograd fallback on its way.
  double t_cpu = mt::bench::ns_per_call([&] { at::Tensor r = op.call(x); (void)r; }, n);
  double t_below = 0;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    t_below = mt::bench::ns_per_call([&] { at::Tensor r = op.call(x); (void)r; }, n);
  }
  double t_ag = mt::bench::ns_per_call([&] { at::Tensor r = ag.call(xg); (void)r; }, n);
  double t_boxed = mt::bench::ns_per_call([&] { torch::jit::Stack s{x}; handle.callBoxed(&s); }, n / 4);
  at::Tensor one = at::ones({1});
  one.set_requires_grad(true);
  double t_silu = mt::bench::ns_per_call([&] { at::Tensor r = at::silu(one); (void)r; }, n / 20);
  at::Tensor a = at::ones({1}), b = at::ones({1});
  double t_add = mt::bench::ns_per_call([&] { at::Tensor r = at::add(a, b); (void)r; }, n / 20);
  std::printf(
      "{\"direct\": %.2f, \"dispatch\": %.2f, \"below_autograd\": %.2f, \"autograd_redispatch\": %.2f, "
      "\"boxed\": %.2f, \"silu_grad\": %.2f, \"add\": %.2f}\n",
      t_direct, t_cpu, t_below, t_ag, t_boxed, t_silu, t_add);
  return 0;
}
