// SPDX-License-Identifier: MIT
// deeprec::emb_agg's tests (build/examples/ops/emb_agg/emb_agg_tests, meson test suite
// 'ops'): against a float64 reference of plain loops over random bags (empty ones and
// duplicates included), gradcheck in float64 for weight and per_sample_weights, opcheck,
// fake shapes, the errors; the CUDA kernels compiled to CUBIN for sm_80 and sm_90 with
// the op's own launch arguments checked, and run through a CPU emulation of the grid.
// Cases marked "(gpu)" run on cuda:0 and are
// skipped where there is none.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "emb_agg.h"
#include "helpers.h"
#include "minitensor.h"

// clang-format off
#include "grid_emulation.h"  // last: it defines __global__ and friends
// clang-format on

// emb_agg.cu compiled as host C++, run by ../grid_emulation.h's threads (a warp a block).
namespace ops_emu {
#include "emb_agg.cu"
}  // namespace ops_emu

using namespace mt;

namespace {

// Random bags: sizes 0 to max_bag (about a quarter of them empty), rows drawn from a few
// so duplicates are common.
struct Bags {
  std::vector<int64_t> indices, offsets;
};
Bags random_bags(int64_t n_bags, int64_t V, int64_t max_bag, uint64_t seed) {
  Bags b;
  uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 33;
  };
  for (int64_t i = 0; i < n_bags; ++i) {
    b.offsets.push_back(int64_t(b.indices.size()));
    const int64_t n = next() % 4 == 0 ? 0 : int64_t(next() % uint64_t(max_bag + 1));
    for (int64_t j = 0; j < n; ++j) b.indices.push_back(int64_t(next() % uint64_t(V)));
  }
  return b;
}
Tensor i64(const std::vector<int64_t>& v) {
  return from_vector(v, {int64_t(v.size())}, {.dtype = DType::Int64});
}

// The float64 reference: bag by bag, row by row.
Tensor reference(const Tensor& weight, const std::vector<int64_t>& idx,
                 const std::vector<int64_t>& off, bool mean, const std::vector<double>& psw,
                 bool include_last) {
  const std::vector<double> w = weight.to_vector<double>();
  const int64_t D = weight.sizes()[1];
  const int64_t B = include_last ? int64_t(off.size()) - 1 : int64_t(off.size());
  std::vector<double> out(size_t(B * D), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = off[size_t(b)];
    const int64_t end = b + 1 < int64_t(off.size()) ? off[size_t(b + 1)] : int64_t(idx.size());
    for (int64_t i = start; i < end; ++i)
      for (int64_t d = 0; d < D; ++d)
        out[size_t(b * D + d)] +=
            (psw.empty() ? 1.0 : psw[size_t(i)]) * w[size_t(idx[size_t(i)] * D + d)];
    if (mean && end > start)
      for (int64_t d = 0; d < D; ++d) out[size_t(b * D + d)] /= double(end - start);
  }
  return from_vector(out, {B, D}, {.dtype = DType::Float64});
}

double max_diff64(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a.cpu().to(DType::Float64), b.cpu().to(DType::Float64));
}
// The largest difference over the largest |b|, at least 1: bfloat16 results summed in
// another order may differ by an ulp of the larger values.
double rel_diff64(const Tensor& a, const Tensor& b) {
  return max_diff64(a, b) / std::max(1.0, max(abs(b.cpu().to(DType::Float64))).item<double>());
}

// The sorted-segment weight gradient (Note [Sorted-segment backward]) under the emulation,
// launched as the op launches it, with the sort's order checked on the way.
Tensor emulate_segment(const double* grad, const long long* idx, const long long* off,
                       const double* psw, int B, int n_off, int D, long long n, long long V,
                       bool mean, bool has_psw) {
  using ops_emu::launch;
  const size_t un = size_t(n);
  std::vector<long long> keys(un, V), vals(un), bag(un), keys2(un), vals2(un);
  launch({unsigned(B)}, {32}, [&] {
    ops_emu::emb_seg_init(idx, off, keys.data(), vals.data(), bag.data(), B, n_off, n, V);
  });
  int passes = 0;
  for (long long v = V; v > 0; v >>= 8) ++passes;
  const int tiles = int((n + ops_emu::kEmbSortTile - 1) / ops_emu::kEmbSortTile);
  std::vector<long long> hist(size_t(tiles) * ops_emu::kEmbSortBins), totals(ops_emu::kEmbSortBins);
  for (int p = 0; p < passes; ++p) {
    launch({unsigned(tiles)}, {64},
           [&] { ops_emu::emb_sort_hist(keys.data(), n, 8 * p, hist.data(), tiles); });
    // Blocks of 2 threads, so the scan's rows (3 tiles) take two chunks.
    launch({unsigned(ops_emu::kEmbSortBins)}, {2},
           [&] { ops_emu::emb_sort_scan(hist.data(), tiles, totals.data()); });
    launch({unsigned(tiles)}, {32}, [&] {
      ops_emu::emb_sort_scatter(keys.data(), vals.data(), keys2.data(), vals2.data(), n, 8 * p,
                                hist.data(), totals.data(), tiles);
    });
    std::swap(keys, keys2);
    std::swap(vals, vals2);
  }
  // Sorted by row, and stable: equal rows keep the order of their positions.
  size_t unsorted = 0;
  for (size_t k = 1; k < keys.size(); ++k)
    unsorted += keys[k - 1] > keys[k] || (keys[k - 1] == keys[k] && vals[k - 1] >= vals[k]);
  CHECK(unsorted == 0);
  std::vector<long long> seg_start(size_t(V + 1), -1);
  launch({unsigned((V + 1 + 63) / 64)}, {64},
         [&] { ops_emu::emb_seg_starts(keys.data(), n, V, seg_start.data()); });
  Tensor gw = full({V, D}, -123.0, {.dtype = DType::Float64});
  double* o = gw.data_ptr<double>();
  launch({unsigned(V)}, {32}, [&] {
    if (D % 4 == 0)
      ops_emu::emb_seg_reduce<double, 4>(grad, off, psw, vals.data(), bag.data(), seg_start.data(),
                                         o, n_off, D, n, V, mean, has_psw);
    else
      ops_emu::emb_seg_reduce<double, 1>(grad, off, psw, vals.data(), bag.data(), seg_start.data(),
                                         o, n_off, D, n, V, mean, has_psw);
  });
  return gw;
}

}  // namespace

TEST_SUITE("deeprec::emb_agg") {
  TEST_CASE("emb_agg: CPU matches the float64 reference (sum, mean, weights, final offset)") {
    manual_seed(21);
    for (DType t : {DType::Float32, DType::Float64})
      for (int64_t D : {1, 8, 13}) {
        CAPTURE(t);
        CAPTURE(D);
        const int64_t V = 17;
        Bags bags = random_bags(40, V, 6, uint64_t(D));
        Tensor w = randn({V, D}).to(t);
        Tensor idx = i64(bags.indices), off = i64(bags.offsets);
        const double tol = t == DType::Float64 ? 1e-12 : 1e-5;
        const auto& in = bags.indices;
        const auto& of = bags.offsets;
        CHECK(max_diff64(deeprec::emb_agg(w, idx, off), reference(w, in, of, false, {}, false)) <
              tol);
        CHECK(max_diff64(deeprec::emb_agg(w, idx, off, "mean"),
                         reference(w, bags.indices, bags.offsets, true, {}, false)) < tol);
        Tensor psw = randn({idx.numel()}).to(t);
        CHECK(max_diff64(deeprec::emb_agg(w, idx, off, "sum", psw),
                         reference(w, in, of, false, psw.to_vector<double>(), false)) < tol);
        // The same bags with the final offset: one more offset, the same result.
        std::vector<int64_t> with_last = bags.offsets;
        with_last.push_back(int64_t(bags.indices.size()));
        Tensor y = deeprec::emb_agg(w, idx, i64(with_last), "mean", std::nullopt, true);
        CHECK(y.sizes() == Shape{40, D});
        CHECK(max_diff64(y, deeprec::emb_agg(w, idx, off, "mean")) == 0);
      }
    // Empty bags are zeros in both modes; no bags at all give [0, D]; no indices either.
    Tensor w = randn({5, 3});
    Tensor y = deeprec::emb_agg(w, i64({1, 1, 4}), i64({0, 0, 3, 3}), "mean");
    CHECK(y.sizes() == Shape{4, 3});
    CHECK(max_diff64(y.select(0, 0), zeros({3})) == 0);
    CHECK(max_diff64(y.select(0, 3), zeros({3})) == 0);
    Tensor bag1 = add(add(w.select(0, 1), w.select(0, 1)), w.select(0, 4));
    CHECK(max_diff64(y.select(0, 1), div(bag1, 3.0)) < 1e-6);
    CHECK(deeprec::emb_agg(w, i64({}), i64({})).sizes() == Shape{0, 3});
    CHECK(max_diff64(deeprec::emb_agg(w, i64({}), i64({0, 0})), zeros({2, 3})) == 0);
    // A transposed table is read through its values, not its memory order.
    Tensor wt = randn({3, 5}).t();
    CHECK(max_diff64(deeprec::emb_agg(wt, i64({0, 4, 2}), i64({0, 2})),
                     reference(wt, {0, 4, 2}, {0, 2}, false, {}, false)) < 1e-6);
  }

  TEST_CASE("emb_agg: bfloat16 weights sum in float: forward and gradients against float64") {
    manual_seed(27);
    const int64_t V = 23, D = 12;
    Bags bags = random_bags(30, V, 7, 4);
    Tensor idx = i64(bags.indices), off = i64(bags.offsets);
    // The reference sees the same (bfloat16) values in float64; the one rounding of the
    // result to bfloat16 (8 bits of mantissa) is the error left: |sum| below 16 here.
    Tensor w = randn({V, D}).to(DType::BFloat16);
    Tensor psw = randn({idx.numel()}).to(DType::BFloat16);
    for (bool mean : {false, true}) {
      CAPTURE(mean);
      std::optional<Tensor> p;
      if (!mean) p = psw;
      Tensor y = deeprec::emb_agg(w, idx, off, mean ? "mean" : "sum", p);
      CHECK(y.dtype() == DType::BFloat16);
      Tensor want = reference(w, bags.indices, bags.offsets, mean,
                              mean ? std::vector<double>{} : psw.to_vector<double>(), false);
      CHECK(max_diff64(y, want) < 16.0 / 256);
      CHECK(max_diff64(y, want) > 0);  // rounded, so not the float64 values themselves
    }
    // The gradients: bfloat16, and within the rounding of the float64 ones.
    Tensor wr = w.detach().requires_grad_(), pr = psw.detach().requires_grad_();
    Tensor w64 = w.to(DType::Float64).requires_grad_(),
           p64 = psw.to(DType::Float64).requires_grad_();
    Tensor g = randn({30, D});
    backward(deeprec::emb_agg(wr, idx, off, "sum", pr), g.to(DType::BFloat16));
    backward(deeprec::emb_agg(w64, idx, off, "sum", p64), g.to(DType::BFloat16).to(DType::Float64));
    CHECK(wr.grad().dtype() == DType::BFloat16);
    CHECK(pr.grad().dtype() == DType::BFloat16);
    CHECK(max_diff64(wr.grad(), w64.grad()) < 32.0 / 256);
    CHECK(max_diff64(pr.grad(), p64.grad()) < 32.0 / 256);
  }

  TEST_CASE("emb_agg: gradcheck in float64 for weight and per_sample_weights") {
    manual_seed(22);
    Bags bags = random_bags(7, 6, 4, 5);
    Tensor idx = i64(bags.indices), off = i64(bags.offsets);
    for (const char* mode : {"sum", "mean"}) {
      CAPTURE(mode);
      Tensor w = randn({6, 3}, {.dtype = DType::Float64, .requires_grad = true});
      GradcheckResult gc = gradcheck(
          [&](const std::vector<Tensor>& in) { return deeprec::emb_agg(in[0], idx, off, mode); },
          {w});
      CHECK_MESSAGE(gc.ok, gc.message);
    }
    Tensor w = randn({6, 3}, {.dtype = DType::Float64, .requires_grad = true});
    Tensor psw = randn({idx.numel()}, {.dtype = DType::Float64, .requires_grad = true});
    GradcheckResult gc = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return deeprec::emb_agg(in[0], idx, off, "sum", in[1]);
        },
        {w, psw});
    CHECK_MESSAGE(gc.ok, gc.message);
    // Duplicates add up: a row used three times gets three times the gradient.
    Tensor w2 = randn({4, 2}, {.dtype = DType::Float64, .requires_grad = true});
    backward(sum(deeprec::emb_agg(w2, i64({2, 2, 0, 2}), i64({0, 2}))));
    CHECK(w2.grad().to_vector<double>() == std::vector<double>{1, 1, 0, 0, 3, 3, 0, 0});
  }

  TEST_CASE("emb_agg: opcheck passes (schema, fake, autograd registration, gradcheck)") {
    manual_seed(23);
    Bags bags = random_bags(6, 5, 3, 9);
    Tensor idx = i64(bags.indices), off = i64(bags.offsets);
    std::vector<int64_t> with_last = bags.offsets;
    with_last.push_back(int64_t(bags.indices.size()));
    Tensor w = randn({5, 4}, {.dtype = DType::Float64});
    OpCheckReport r =
        opcheck(deeprec::emb_agg_handle(),
                {Stack{w, idx, off}, Stack{w, idx, off, "mean"},
                 Stack{w, idx, off, "sum", randn({idx.numel()}, {.dtype = DType::Float64})},
                 Stack{w, idx, i64(with_last), "sum", Value(), true},
                 Stack{w.to(DType::BFloat16), idx, off, "mean", Value(), false, true}});
    // opcheck's test_compile: the backward computes outside the dispatcher (not an op), so
    // mt::compile cannot capture a training step through this op. A known gap; the other
    // four checks pass.
    for (const OpCheckReport::Test& t : r.tests) {
      if (t.name != "test_compile")
        CHECK_MESSAGE((t.passed || t.skipped), r.str());
      else
        CHECK_MESSAGE(
            t.message.find("read a tensor's values while it was captured") != std::string::npos,
            r.str());
    }
    CHECK(deeprec::emb_agg_handle().schema().str() ==
          "deeprec::emb_agg(Tensor weight, Tensor indices, Tensor offsets, str mode=\"sum\", "
          "Tensor? per_sample_weights=None, bool include_last_offset=False, bool "
          "deterministic=False) -> Tensor");
  }

  TEST_CASE("emb_agg: fake tensors give [bags, dim] without reading any value") {
    const Device gpu("cuda:0");
    Tensor w = fake_empty({1000000, 128}, {.device = gpu});
    Tensor idx = fake_empty({204800}, {.dtype = DType::Int64, .device = gpu});
    Tensor off = fake_empty({4096}, {.dtype = DType::Int64, .device = gpu});
    Tensor y = deeprec::emb_agg(w, idx, off);
    CHECK(y.is_fake());
    CHECK(y.sizes() == Shape{4096, 128});
    CHECK(y.device() == gpu);
    Tensor off_last = fake_empty({4097}, {.dtype = DType::Int64, .device = gpu});
    CHECK(deeprec::emb_agg(w, idx, off_last, "mean", std::nullopt, true).sizes() ==
          Shape{4096, 128});
  }

  TEST_CASE("emb_agg: bad indices, offsets, dtypes and modes are errors naming the op") {
    Tensor w = randn({10, 4});
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1, 12, 3}), i64({0, 2}));
          }) ==
          "[deeprec::emb_agg] indices[1] = 12 is out of range for a weight of 10 rows (valid: 0 "
          "to 9)");
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1, -1}), i64({0}));
          }) ==
          "[deeprec::emb_agg] indices[1] = -1 is out of range for a weight of 10 rows (valid: 0 "
          "to 9)");
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1, 2, 3, 4}), i64({0, 3, 1}));
          }) ==
          "[deeprec::emb_agg] offsets must be sorted (non-decreasing): offsets[2] = 1 is less "
          "than offsets[1] = 3");
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1, 2}), i64({1}));
          }) == "[deeprec::emb_agg] offsets[0] must be 0, got 1");
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1, 2}), i64({0, 5}), "sum", std::nullopt, true);
          }) == "[deeprec::emb_agg] offsets[1] = 5 is past the end of indices (2 indices)");
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1, 2}).to(DType::Float32), i64({0}));
          }) ==
          "[deeprec::emb_agg] indices must be int64, got float32; convert with "
          "indices.to(mt::DType::Int64)");
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1, 2, 3, 4}).view({2, 2}), i64({0}));
          }) ==
          "[deeprec::emb_agg] indices must be 1-D, with offsets marking where each bag starts; "
          "got shape [2, 2]. For a [B, L] batch of bags of L, pass indices.flatten() and offsets "
          "arange(0, B * L, L)");
    CHECK(error_of([&] { deeprec::emb_agg(w.to(DType::Float16), i64({1}), i64({0})); }) ==
          "[deeprec::emb_agg] weight must be a 2-D [num_embeddings, dim] table of float32, "
          "float64 or bfloat16, got float16 of shape [10, 4]");
    CHECK(error_of([&] { deeprec::emb_agg(w, i64({1}), i64({0}).to(DType::Float32)); }) ==
          "[deeprec::emb_agg] offsets must be a 1-D int64 tensor, got float32 of shape [1]");
    CHECK(error_of([&] { deeprec::emb_agg(w, i64({1}), i64({0}), "max"); }) ==
          "[deeprec::emb_agg] mode must be \"sum\" or \"mean\", got \"max\"");
    CHECK(error_of([&] { deeprec::emb_agg(w, i64({1}), i64({0}), "mean", randn({1})); }) ==
          "[deeprec::emb_agg] per_sample_weights are only supported with mode \"sum\" (as in "
          "torch.nn.functional.embedding_bag), got mode \"mean\"");
    CHECK(error_of([&] {
            deeprec::emb_agg(w, i64({1}), i64({0}), "sum", randn({2}));
          }).starts_with("[deeprec::emb_agg] per_sample_weights must match indices' shape [1]"));
    CHECK(error_of([&] { deeprec::emb_agg(w, i64({1}), i64({}), "sum", std::nullopt, true); }) ==
          "[deeprec::emb_agg] include_last_offset needs at least one offset (the final one); "
          "offsets is empty");
  }

  TEST_CASE(
      "emb_agg: every kernel compiles to CUBIN for sm_80 and sm_90, and the op's launch "
      "arguments match their signatures" *
      doctest::skip(no_nvrtc())) {
    Bags bags = random_bags(5, 7, 3, 1);
    Tensor idx = i64(bags.indices), off = i64(bags.offsets);
    for (int arch : cubin_test_archs())
      for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
        CAPTURE(arch);
        CAPTURE(t);
        using K = deeprec::EmbAggKernel;
        for (auto which : {K::Forward, K::ForwardVec4, K::BackwardWeight, K::BackwardWeightVec4,
                           K::BackwardPsw, K::SegReduce, K::SegReduceVec4, K::SegInit, K::SortHist,
                           K::SortScan, K::SortScatter, K::SegStarts}) {
          CAPTURE(int(which));
          if (t == DType::BFloat16 &&
              (which == K::BackwardWeight || which == K::BackwardWeightVec4))
            CHECK(error_of([&] { deeprec::emb_agg_kernel(t, which); })
                      .starts_with(
                          "[deeprec::emb_agg] the atomic weight gradient has no bfloat16 kernel"));
          else
            CHECK(deeprec::emb_agg_kernel(t, which).parameters(arch).known);
        }
        // D = 8 takes the 4-wide forward, D = 6 the scalar one; with and without weights.
        for (int64_t D : {8, 6}) {
          Tensor w = empty({7, D}, {.dtype = t});
          CHECK_NOTHROW(
              deeprec::emb_agg_check_launch(arch, w, idx, off, "mean", std::nullopt, false));
          CHECK_NOTHROW(deeprec::emb_agg_check_launch(arch, w, idx, off, "sum",
                                                      empty({idx.numel()}, {.dtype = t}), false));
        }
      }
    const auto& vec4 = deeprec::emb_agg_kernel(DType::Float32, deeprec::EmbAggKernel::ForwardVec4);
    CHECK(vec4.parameters(90).types[0] == "float const*");
    const auto& bf = deeprec::emb_agg_kernel(DType::BFloat16, deeprec::EmbAggKernel::SegReduce);
    CHECK(bf.parameters(90).types[0] == "mt::BFloat16 const*");
  }

  TEST_CASE("emb_agg: the CUDA kernels compute the CPU op's results under a CPU emulation") {
    manual_seed(26);
    using ops_emu::launch;
    for (int64_t D : {5, 40, 136})  // 40 and 136 take the 4-wide loads; 136 > 32 lanes x 4
      for (bool mean : {false, true})
        for (bool include_last : {false, true}) {
          CAPTURE(D);
          CAPTURE(mean);
          CAPTURE(include_last);
          const int64_t V = 11;
          Bags bags = random_bags(20, V, 5, uint64_t(D) * 3 + mean);
          std::vector<int64_t> offs = bags.offsets;
          if (include_last) offs.push_back(int64_t(bags.indices.size()));
          Tensor idx = i64(bags.indices), off = i64(offs);
          const int B = 20, n_off = int(offs.size()), d = int(D);
          const long long n = idx.numel();
          const bool with_psw = !mean;
          Tensor w = randn({V, D}, {.dtype = DType::Float64, .requires_grad = true});
          Tensor psw = randn({n}, {.dtype = DType::Float64, .requires_grad = true});
          std::optional<Tensor> p;
          if (with_psw) p = psw;
          Tensor y = deeprec::emb_agg(w, idx, off, mean ? "mean" : "sum", p, include_last);
          Tensor g = randn({B, D}, {.dtype = DType::Float64});
          backward(y, g);

          const double* wp = w.detach().data_ptr<double>();
          const double* pp = psw.detach().data_ptr<double>();
          // int64_t is long here; the kernel's indices are long long, the same 8 bytes.
          const auto* ip = reinterpret_cast<const long long*>(idx.data_ptr<int64_t>());
          const auto* op = reinterpret_cast<const long long*>(off.data_ptr<int64_t>());
          Tensor out = full({B, D}, -123.0, {.dtype = DType::Float64});
          double* o = out.data_ptr<double>();
          launch({unsigned(B)}, {32}, [&] {
            if (D % 4 == 0)
              ops_emu::emb_agg_forward<double, 4>(wp, ip, op, pp, o, B, n_off, d, n, V, mean,
                                                  with_psw);
            else
              ops_emu::emb_agg_forward<double, 1>(wp, ip, op, pp, o, B, n_off, d, n, V, mean,
                                                  with_psw);
          });
          CHECK(max_diff64(out, y) < 1e-12);

          Tensor gw = zeros({V, D}, {.dtype = DType::Float64});
          const double* gp = g.data_ptr<double>();
          double* gwp = gw.data_ptr<double>();
          launch({unsigned(B)}, {32}, [&] {
            if (D % 4 == 0)
              ops_emu::emb_agg_backward_weight<double, 4>(gp, ip, op, pp, gwp, B, n_off, d, n, V,
                                                          mean, with_psw);
            else
              ops_emu::emb_agg_backward_weight<double, 1>(gp, ip, op, pp, gwp, B, n_off, d, n, V,
                                                          mean, with_psw);
          });
          CHECK(max_diff64(gw, w.grad()) < 1e-12);
          if (with_psw) {
            Tensor gps = full({n}, -123.0, {.dtype = DType::Float64});
            double* gpsp = gps.data_ptr<double>();
            launch({unsigned(B)}, {32}, [&] {
              ops_emu::emb_agg_backward_psw<double>(gp, wp, ip, op, gpsp, B, n_off, d, n, V);
            });
            CHECK(max_diff64(gps, psw.grad()) < 1e-12);
          }
        }
    // The sorted-segment gradient over 3 tiles of the sort and 2 passes (V = 700 > 256),
    // sum with per-sample weights and mean with the final offset; D = 5 and 136 (VEC = 4,
    // two of the reduce's rows of 128); an out-of-range index (V itself) is left out.
    for (int64_t D : {5, 136})
      for (bool mean : {false, true}) {
        CAPTURE(D);
        CAPTURE(mean);
        const int64_t V = 700;
        const int B = 1000;
        Bags bags = random_bags(B, V, 8, uint64_t(D) + mean);
        std::vector<int64_t> offs = bags.offsets;
        if (mean) offs.push_back(int64_t(bags.indices.size()));
        Tensor idx = i64(bags.indices), off = i64(offs);
        const long long n = idx.numel();
        REQUIRE(n > 2 * 1024);
        Tensor w = randn({V, D}, {.dtype = DType::Float64, .requires_grad = true});
        Tensor psw = randn({n}, {.dtype = DType::Float64, .requires_grad = true});
        std::optional<Tensor> p;
        if (!mean) p = psw;
        Tensor g = randn({B, D}, {.dtype = DType::Float64});
        backward(deeprec::emb_agg(w, idx, off, mean ? "mean" : "sum", p, mean), g);
        std::vector<long long> ib(bags.indices.begin(), bags.indices.end());
        ib[3] = V;  // out of range: the kernels skip it
        Tensor want = w.grad().clone();
        const int64_t r3 = bags.indices[3];
        int64_t b3 = 0;
        while (b3 + 1 < int64_t(offs.size()) && offs[size_t(b3 + 1)] <= 3) ++b3;
        const double s3 =
            (mean ? 1.0 / double((b3 + 1 < int64_t(offs.size()) ? offs[size_t(b3 + 1)] : n) -
                                 offs[size_t(b3)])
                  : psw.detach().data_ptr<double>()[3]);
        for (int64_t d = 0; d < D; ++d)
          want.data_ptr<double>()[r3 * D + d] -= s3 * g.data_ptr<double>()[b3 * D + d];
        Tensor gw = emulate_segment(g.data_ptr<double>(), ib.data(),
                                    reinterpret_cast<const long long*>(off.data_ptr<int64_t>()),
                                    psw.detach().data_ptr<double>(), B, int(offs.size()), int(D), n,
                                    V, mean, !mean);
        CHECK(max_diff64(gw, want) < 1e-12);
      }
    // Without the debug check, an out-of-range index adds nothing (and reads nothing).
    Tensor w = randn({4, 3}, {.dtype = DType::Float64});
    const std::vector<long long> idx = {1, 99, -5, 2}, off = {0};
    Tensor out = empty({1, 3}, {.dtype = DType::Float64});
    launch({1}, {32}, [&] {
      ops_emu::emb_agg_forward<double, 1>(w.data_ptr<double>(), idx.data(), off.data(),
                                          w.data_ptr<double>(), out.data_ptr<double>(), 1, 1, 3, 4,
                                          4, 0, 0);
    });
    CHECK(max_diff64(out.select(0, 0), add(w.select(0, 1), w.select(0, 2))) < 1e-12);
  }

  // --------------------------------------------------------------------------- on cuda:0

  TEST_CASE("emb_agg (gpu): forward and both gradients match the CPU op on cuda:0" *
            doctest::skip(no_gpu())) {
    manual_seed(24);
    const Device gpu("cuda:0");
    for (DType t : {DType::Float32, DType::Float64, DType::BFloat16})
      for (int64_t D : {1, 8, 13, 128})
        for (const char* mode : {"sum", "mean"})
          for (bool det : {false, true}) {
            CAPTURE(t);
            CAPTURE(D);
            CAPTURE(mode);
            CAPTURE(det);
            const int64_t V = 50;
            Bags bags = random_bags(300, V, 12, uint64_t(D) + 7);
            Tensor idx = i64(bags.indices), off = i64(bags.offsets);
            const bool sum_mode = std::string(mode) == "sum";
            Tensor w = randn({V, D}).to(t).requires_grad_();
            Tensor psw = randn({idx.numel()}).to(t).requires_grad_();
            Tensor wg = w.detach().to(gpu).requires_grad_();
            Tensor pg = psw.detach().to(gpu).requires_grad_();
            std::optional<Tensor> p_cpu, p_gpu;
            if (sum_mode) p_cpu = psw, p_gpu = pg;
            Tensor y = deeprec::emb_agg(w, idx, off, mode, p_cpu);
            Tensor yg = deeprec::emb_agg(wg, idx.to(gpu), off.to(gpu), mode, p_gpu, false, det);
            const double tol = t == DType::Float64 ? 1e-10 : t == DType::Float32 ? 1e-4 : 1.0 / 128;
            CHECK(yg.device() == gpu);
            CHECK(yg.dtype() == t);
            CHECK(rel_diff64(yg, y) < tol);
            Tensor g = randn(y.sizes()).to(t);
            backward(y, g);
            backward(yg, g.to(gpu));
            CHECK(wg.grad().dtype() == t);
            CHECK(rel_diff64(wg.grad(), w.grad()) < tol);
            if (sum_mode) CHECK(rel_diff64(pg.grad(), psw.grad()) < tol);
          }
  }

  TEST_CASE("emb_agg (gpu): the deterministic weight gradient is the same bits on every run" *
            doctest::skip(no_gpu())) {
    manual_seed(28);
    const Device gpu("cuda:0");
    // 20000 indices on 30 rows of 64: each row summed ~670 times, where the atomics'
    // order shows in float32's last bits; 300 rows past 256 take two sort passes.
    for (int64_t V : {30, 300}) {
      CAPTURE(V);
      Bags bags = random_bags(2000, V, 20, uint64_t(V));
      Tensor idx = i64(bags.indices).to(gpu), off = i64(bags.offsets).to(gpu);
      Tensor w = randn({V, 64}).to(gpu).requires_grad_();
      Tensor psw = randn({idx.numel()}).to(gpu);
      Tensor g = randn({2000, 64}).to(gpu);
      std::vector<Tensor> grads;
      for (int run = 0; run < 3; ++run) {
        w.set_grad(Tensor());
        backward(deeprec::emb_agg(w, idx, off, "sum", psw, false, true), g);
        grads.push_back(w.grad().cpu());
      }
      CHECK(max_diff64(grads[0], grads[1]) == 0);
      CHECK(max_diff64(grads[0], grads[2]) == 0);
      Tensor wc = w.detach().cpu().requires_grad_();
      backward(deeprec::emb_agg(wc, i64(bags.indices), i64(bags.offsets), "sum", psw.cpu()),
               g.cpu());
      CHECK(rel_diff64(grads[0], wc.grad()) < 1e-5);
    }
  }

  TEST_CASE("emb_agg (gpu): gradcheck and opcheck on cuda:0" * doctest::skip(no_gpu())) {
    manual_seed(25);
    const Device gpu("cuda:0");
    Bags bags = random_bags(7, 6, 4, 3);
    Tensor idx = i64(bags.indices).to(gpu), off = i64(bags.offsets).to(gpu);
    Tensor w = randn({6, 5}, {.dtype = DType::Float64}).to(gpu).requires_grad_();
    Tensor psw = randn({idx.numel()}, {.dtype = DType::Float64}).to(gpu).requires_grad_();
    GradcheckResult gc = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return deeprec::emb_agg(in[0], idx, off, "sum", in[1]);
        },
        {w, psw});
    CHECK_MESSAGE(gc.ok, gc.message);
    GradcheckResult gd = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return deeprec::emb_agg(in[0], idx, off, "mean", std::nullopt, false, true);
        },
        {w});
    CHECK_MESSAGE(gd.ok, gd.message);
    OpCheckReport r = opcheck(
        deeprec::emb_agg_handle(),
        {Stack{w.detach(), idx, off, "mean"}, Stack{w.detach().to(DType::Float32), idx, off},
         Stack{w.detach().to(DType::BFloat16), idx, off, "sum", Value(), false, true}});
    // opcheck's test_compile: the backward computes outside the dispatcher (not an op), so
    // mt::compile cannot capture a training step through this op. A known gap; the other
    // four checks pass. On CUDA the backward's first step is its weight kernel's launch
    // (mt::jit) on a fake gradient, which the error names.
    for (const OpCheckReport::Test& t : r.tests) {
      if (t.name != "test_compile")
        CHECK_MESSAGE((t.passed || t.skipped), r.str());
      else {
        CHECK_MESSAGE(
            t.message.find("read a tensor's values while it was captured") != std::string::npos,
            r.str());
        CHECK_MESSAGE(t.message.find("launched a kernel outside the dispatcher (mt::jit)") !=
                          std::string::npos,
                      r.str());
      }
    }
  }
}
