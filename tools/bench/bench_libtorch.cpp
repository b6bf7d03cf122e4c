// SPDX-License-Identifier: MIT
// libtorch's side of `minitensor bench dispatch`: the same host costs, measured the same
// way (the same loops, tools/bench/host_loop.h; in the plain form the same iteration
// counts), so that
// `compare_torch.py --dispatch` can put both on one machine in one run instead of
// comparing against figures from another day. Not part of the Meson build: it needs
// libtorch, which only the GPU host has (from the torch wheel); tools/scripts/gpu_check.sh
// (its bench and dispatch steps) compiles it there, in one of two forms:
//
//   libtorch alone, run in its own process alternately with `minitensor bench dispatch`:
//     g++ -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=<torch's> -I. -I<torch>/include
//         tools/bench/bench_libtorch.cpp -L<torch>/lib -ltorch_cpu -lc10 -Wl,-rpath,<torch>/lib
//   with minitensor's rows linked in (-DMT_INTERLEAVED, tools/bench/dispatch.cpp from the
//   Meson build's libmt_bench.a, and libminitensor), timing the two in one process as pairs
//   of short loops back to back (--interleaved ROUNDS), each pair's ratio taken from one
//   state of the host.
//     g++ ... -DMT_INTERLEAVED tools/bench/bench_libtorch.cpp <build>/tools/libmt_bench.a
//         -L<build> -lminitensor -lfmt -Wl,-rpath,<build> (then libtorch as above)
//
// Prints one JSON object: row -> ns per call (compare_torch.py pairs the rows); with
// --interleaved, {"rounds": [{row: {"minitensor": ns, "libtorch": ns, "ratio": median of
// the pairs' libtorch / minitensor}, ...}, ...]}.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench/host_loop.h"
#ifdef MT_INTERLEAVED
#include "tools/bench/dispatch.h"
#endif

namespace {

at::Tensor noop(const at::Tensor& x) { return x; }

at::Tensor noop_ag(c10::DispatchKeySet ks, const at::Tensor& x) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("bench::noop_ag", "")
                       .typed<at::Tensor(const at::Tensor&)>();
  return op.redispatch(ks & c10::after_autograd_keyset, x);
}

struct Row {
  const char* key;
  int64_t divisor;  // a loop makes n / divisor calls, as minitensor's row of the same key
  std::function<void()> call;
  bool below_autograd = false;  // timed under AutoDispatchBelowADInplaceOrView
};

}  // namespace

TORCH_LIBRARY(bench, m) {
  m.def("noop(Tensor x) -> Tensor");
  m.impl("noop", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(noop)));
  m.def("noop_ag(Tensor x) -> Tensor");
  m.impl("noop_ag", torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(noop)));
  m.impl("noop_ag", torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(noop_ag)));
}

int main(int argc, char** argv) {
  int rounds = 0;
  if (argc == 3 && std::strcmp(argv[1], "--interleaved") == 0) rounds = std::atoi(argv[2]);
#ifndef MT_INTERLEAVED
  if (rounds > 0) {
    std::fprintf(stderr,
                 "bench_libtorch: --interleaved needs a build with -DMT_INTERLEAVED and minitensor "
                 "linked in\n");
    return 2;
  }
#endif
  if (argc > 1 && rounds <= 0) {
    std::fprintf(stderr, "usage: bench_libtorch [--interleaved ROUNDS]\n");
    return 2;
  }
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("bench::noop", "");
  auto op = handle.typed<at::Tensor(const at::Tensor&)>();
  auto ag = c10::Dispatcher::singleton()
                .findSchemaOrThrow("bench::noop_ag", "")
                .typed<at::Tensor(const at::Tensor&)>();
  at::Tensor x = at::zeros({1});
  at::Tensor xg = at::zeros({1});
  xg.set_requires_grad(true);
  at::Tensor one = at::ones({1});
  one.set_requires_grad(true);
  at::Tensor a = at::ones({1}), b = at::ones({1});
  at::Tensor (*volatile direct)(const at::Tensor&) = &noop;
  const int64_t n = 2000000;
  std::vector<Row> rows = {
      {"direct", 1,
       [&] {
         at::Tensor r = direct(x);
         (void)r;
       }},
      // A custom op with a CPU kernel only, called as a user calls it: libtorch's CPU
      // tensors carry the autograd keys, so the call passes the autograd fallback on its way.
      {"dispatch", 1,
       [&] {
         at::Tensor r = op.call(x);
         (void)r;
       }},
      {"below_autograd", 1,
       [&] {
         at::Tensor r = op.call(x);
         (void)r;
       },
       true},
      {"autograd_redispatch", 1,
       [&] {
         at::Tensor r = ag.call(xg);
         (void)r;
       }},
      {"boxed", 4,
       [&] {
         torch::jit::Stack s{x};
         handle.callBoxed(&s);
       }},
      {"silu_grad", 20,
       [&] {
         at::Tensor r = at::silu(one);
         (void)r;
       }},
      {"add", 20,
       [&] {
         at::Tensor r = at::add(a, b);
         (void)r;
       }},
  };
  if (rounds == 0) {
    std::printf("{");
    for (size_t i = 0; i < rows.size(); ++i) {
      std::optional<at::AutoDispatchBelowADInplaceOrView> guard;
      if (rows[i].below_autograd) guard.emplace();
      std::printf("%s\"%s\": %.2f", i ? ", " : "", rows[i].key,
                  mt::bench::ns_per_call(rows[i].call, n / rows[i].divisor));
    }
    std::printf("}\n");
    return 0;
  }
#ifdef MT_INTERLEAVED
  // Each round times every row both libraries have as kPairs pairs of loops of about
  // kPairLoopMs, one library's loop and the other's back to back (ns_per_call_paired),
  // minitensor first in the even pairs of even rounds and in the odd pairs of odd rounds.
  mt::bench::DispatchRows mt_rows;
  std::printf("{\"pairs\": %d, \"loop_ms\": %g, \"rounds\": [", mt::bench::kPairs,
              mt::bench::kPairLoopMs);
  for (int r = 0; r < rounds; ++r) {
    std::printf("%s\n {", r ? "," : "");
    bool first_row = true;
    for (const mt::bench::DispatchRow& m : mt_rows.rows()) {
      const Row* l = nullptr;
      for (const Row& c : rows)
        if (std::strcmp(c.key, m.key) == 0) l = &c;
      if (!l) continue;
      mt::bench::PairedNs p = mt::bench::ns_per_call_paired(m.call, l->call, mt::bench::kPairs,
                                                            mt::bench::kPairLoopMs, r % 2 == 0);
      std::printf("%s\"%s\": {\"minitensor\": %.2f, \"libtorch\": %.2f, \"ratio\": %.4f}",
                  first_row ? "" : ", ", m.key, p.f, p.g, p.ratio);
      first_row = false;
    }
    std::printf("}");
    std::fflush(stdout);
  }
  std::printf("]}\n");
#endif
  return 0;
}
