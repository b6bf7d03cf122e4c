// SPDX-License-Identifier: MIT
// mt::compile's reduction fusion (Note [Reduction fusion] in kernels/compile/fuse.cpp): a
// pointwise group and the mt::sum or mt::mean that reads its root run as one
// jit::reduction, compared with eager within float tolerance.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "kernels/jit/nvrtc.h"
#include "minitensor.h"
#include "tests/helpers.h"

using namespace mt;

namespace compile_reduce_test {

using Tensors = std::vector<Tensor>;

// |a - b| <= rtol * (1 + |b|) elementwise, a and b of the same sizes and dtype.
bool close(const Tensor& a, const Tensor& b, double rtol) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.cpu().to(DType::Float64), y = b.cpu().to(DType::Float64);
  const Tensor bound = mt::mul(mt::abs(y) + 1.0, rtol);
  return x.numel() == 0 || mt::max(mt::abs(x - y) - bound).item<double>() <= 0;
}

Tensors sum_of_squares(const Tensors& in) { return {mt::sum(in[0] * in[0])}; }

// Same sizes, dtype and bytes.
bool bitwise_equal_reduce(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.numel() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace compile_reduce_test

using namespace compile_reduce_test;

TEST_SUITE("compile") {
  TEST_CASE("reduction fusion: a sum of squares is one fused step and equals eager") {
    manual_seed(11);
    Tensor x = randn({128, 129});
    Graph g = capture(sum_of_squares, {x});
    const std::vector<FusionGroup> groups = fusion_groups(g);
    REQUIRE(groups.size() == 1);
    const FusionGroup& fg = groups[0];
    CHECK(fg.name == "fused_mul_sum");
    CHECK(fg.reduce == "sum");
    CHECK(fg.nodes == std::vector<int>{0, 1});
    CHECK(fg.output == g.outputs[0]);
    CHECK(g.values[size_t(fg.reduced)].name == "mul");
    CHECK(fg.inputs == std::vector<int>{g.inputs[0]});
    CHECK(fg.body == "t0 = i0 * i0;\nreturn t0;");
    CHECK(fg.dims.empty());
    CHECK(!fg.keepdim);
    CHECK(fg.reduction().reduce_op() == jit::ReduceOp::Sum);

    // 16512 elements: past the CPU threshold for a reduction group's map (Note [CPU
    // fusion]: 16384), so the default plan fuses it too
    Compiled c = mt::compile(sum_of_squares);
    for (int i = 0; i < 2; ++i) {
      const Tensor out = c({x})[0];
      CHECK(close(out, sum_of_squares({x})[0], 1e-5));
    }
    CHECK(c.plan_str() == "fused    fused_mul_sum -> sum\n");
    CHECK(c.num_fusion_groups() == 1);
    CHECK(c.num_nodes() == 2);  // the captured graph keeps both nodes

    // below it (8192 elements) the default fuses a group it can prepare (Note [Prepared CPU
    // reductions]: contiguous inputs, every dim or trailing ones reduced) and keeps the
    // calls of one it cannot (a sum over dim 0), and says so; fuse = true fuses it
    Tensor small = randn({8192}), cols = randn({64, 128});
    auto col_sums = [](const Tensors& in) { return Tensors{mt::sum(in[0] * in[0], {0})}; };
    {
      CompileLog log;
      Compiled logged = mt::compile(sum_of_squares);
      CHECK(close(logged({small})[0], sum_of_squares({small})[0], 1e-5));
      CHECK(logged.plan_str() == "fused    fused_mul_sum -> sum\n");
      CHECK(
          log.has("[compile] cpu fusion: 1 of 1 groups fused, 1 of them prepared (below 4096 "
                  "elements, 16384 in a reduction's map, only a prepared group fuses: Note "
                  "[CPU fusion])"));
      Compiled kept = mt::compile(col_sums);
      CHECK(bitwise_equal_reduce(kept({cols})[0], col_sums({cols})[0]));
      CHECK(kept.plan_str() == "kernel   mt::mul -> mul\nkernel   mt::sum -> sum\n");
      CHECK(
          log.has("[compile] cpu fusion: 0 of 1 groups fused, 0 of them prepared (below 4096 "
                  "elements, 16384 in a reduction's map, only a prepared group fuses: Note "
                  "[CPU fusion])"));
    }
    Compiled forced = mt::compile(col_sums, {.fuse = true});
    CHECK(close(forced({cols})[0], col_sums({cols})[0], 1e-5));
    CHECK(forced.plan_str() == "fused    fused_mul_sum -> sum\n");
  }

  TEST_CASE("reduction fusion: a prepared sum or mean gives jit::reduction's bits at every size") {
    // Note [Prepared CPU reductions]: the default plan runs jit::reduction's CPU order itself
    manual_seed(13);
    for (int64_t n : {0, 1, 7, 8, 9, 1023, 1024, 1025, 2049, 12293, 32768}) {
      CAPTURE(n);
      const Tensor x = randn({n});
      Compiled c = mt::compile(sum_of_squares);
      const Tensor out = c({x})[0];
      CHECK(c.plan_str() == "fused    fused_mul_sum -> sum\n");
      const std::vector<FusionGroup> groups = fusion_groups(capture(sum_of_squares, {x}));
      REQUIRE(groups.size() == 1);
      CHECK(bitwise_equal_reduce(out, groups[0].reduction().call(Tensors{x})));
      CHECK(bitwise_equal_reduce(c({x})[0], out));
      CHECK(close(out, sum_of_squares({x})[0], 1e-5));
    }
    // means and sums over trailing dims: short rows several a tile, long rows in tiles, more
    // rows than a tile (the post in several tiles), float64
    auto fn = [](const Tensors& in) {
      return Tensors{mt::mean(mt::exp(in[0]) * 0.5 + in[1], {-1}, true),
                     mt::sum(mt::sigmoid(in[0] - in[1]), {-1})};
    };
    const std::vector<Shape> shapes = {{3, 5}, {7, 1024}, {2, 1500}, {40, 700}, {1500, 3}};
    for (DType t : {DType::Float32, DType::Float64}) {
      for (const Shape& shape : shapes) {
        CAPTURE(shape);
        const Tensors in = {randn(shape, {.dtype = t}), randn(shape, {.dtype = t})};
        Compiled c = mt::compile(fn);
        const Tensors out = c(in);
        CHECK(c.plan_str() ==
              "fused    fused_exp_mul_add_mean -> mean\nfused    fused_sub_sigmoid_sum -> sum\n");
        const std::vector<FusionGroup> groups = fusion_groups(capture(fn, in));
        REQUIRE(groups.size() == 2);
        const std::vector<int64_t> last = {-1};
        CHECK(bitwise_equal_reduce(out[0], groups[0].reduction().call(in, last, true)));
        CHECK(bitwise_equal_reduce(out[1], groups[1].reduction().call(in, last, false)));
        const Tensors eager = fn(in);
        for (size_t i = 0; i < 2; ++i) CHECK(close(out[i], eager[i], 1e-5));
      }
    }
    // a map input whose kernel made another layout than its fake kernel said: the prepared
    // step sees it at run time and calls jit::reduction, which reads any layout
    auto transposed = custom_op("test_compile_reduce::transposed_copy",
                                [](const Tensor& t) { return t.t().contiguous().t(); });
    transposed.register_fake([](const Tensor& t) { return empty_like(t); });
    auto odd = [&](const Tensors& in) { return Tensors{mt::sum(mt::exp(transposed(in[0])))}; };
    const Tensor x = randn({30, 50});
    Compiled o = mt::compile(odd);
    for (int round = 0; round < 2; ++round) CHECK(close(o({x})[0], mt::sum(mt::exp(x)), 1e-5));
    CHECK(o.plan_str().find("fused    fused_exp_sum -> sum") != std::string::npos);
  }

  TEST_CASE("reduction fusion: mean and sum over dims, with and without keepdim") {
    manual_seed(12);
    Tensor x = randn({8, 5, 130}), y = randn({130});
    auto fn = [](const Tensors& in) {
      Tensor m = mt::mean(mt::exp(in[0]) * 0.5 + in[1], {-1}, true);
      Tensor s = mt::sum(mt::tanh(in[0] - in[1]), {0, 2});
      Tensor a = mt::mean(mt::sigmoid(in[0]), {1});
      return Tensors{m, s, a};
    };
    const std::vector<FusionGroup> groups = fusion_groups(capture(fn, {x, y}));
    REQUIRE(groups.size() == 3);
    CHECK(groups[0].name == "fused_exp_mul_add_mean");
    CHECK(groups[0].reduce == "mean");
    CHECK(groups[0].dims == std::vector<int64_t>{-1});
    CHECK(groups[0].keepdim);
    CHECK(groups[0].scalars.empty());  // the 0.5 is a literal of the map
    CHECK(groups[0].body == "t0 = exp(i0);\nt1 = t0 * 0.5;\nt2 = t1 + i1;\nreturn t2;");
    CHECK(groups[1].name == "fused_sub_tanh_sum");
    CHECK(groups[1].dims == std::vector<int64_t>{0, 2});
    CHECK(!groups[1].keepdim);
    CHECK(groups[2].name == "fused_sigmoid_mean");

    Compiled c = mt::compile(fn, {.fuse = true});
    const Tensors eager = fn({x, y}), out = c({x, y});
    CHECK(c.num_fusion_groups() == 3);
    CHECK(c.plan_str() ==
          "fused    fused_exp_mul_add_mean -> mean\nfused    fused_sub_tanh_sum -> sum\n"
          "fused    fused_sigmoid_mean -> mean_1\n");
    REQUIRE(out.size() == 3);
    CHECK(out[0].sizes() == Shape{8, 5, 1});
    CHECK(out[1].sizes() == Shape{5});
    CHECK(out[2].sizes() == Shape{8, 130});
    for (size_t i = 0; i < out.size(); ++i) CHECK(close(out[i], eager[i], 1e-5));
  }

  TEST_CASE("reduction fusion: a root read twice, or a write in between, keeps the sum a call") {
    auto twice = [](const Tensors& in) {
      Tensor a = mt::exp(in[0]) * 2.0;
      return Tensors{mt::sum(a), a};  // a is returned too
    };
    auto g1 = fusion_groups(capture(twice, {randn({64})}));
    REQUIRE(g1.size() == 1);
    CHECK(g1[0].name == "fused_exp_mul");
    CHECK(g1[0].reduce.empty());
    auto two_sums = [](const Tensors& in) {
      Tensor a = in[0] * in[0];
      return Tensors{mt::sum(a), mt::mean(a, {0})};
    };
    CHECK(fusion_groups(capture(two_sums, {randn({4, 8})})).empty());

    // mul_ writes in[1] after the product read it: the product cannot move to the sum
    auto write = [](const Tensors& in) {
      Tensor m = in[0] * in[1];
      mt::mul_(in[1], 2.0);
      return Tensors{mt::sum(m), in[1]};
    };
    manual_seed(13);
    Tensor x = randn({4, 8}), y = randn({4, 8});
    CHECK(fusion_groups(capture(write, {x, y})).empty());
    Tensor ye = y.clone(), yc = y.clone();
    const Tensors eager = write({x, ye});
    Compiled c = mt::compile(write, {.fuse = true});
    const Tensors out = c({x, yc});
    CHECK(c.plan_str() ==
          "kernel   mt::mul -> mul\nalloc    full -> full\n"
          "kernel   mt::mul_ -> x1\nkernel   mt::sum -> sum\n");
    CHECK(close(out[0], eager[0], 0));
    CHECK(close(yc, ye, 0));
    // a reduction of an input, or of a matmul, is no group
    auto plain = [](const Tensors& in) {
      return Tensors{mt::sum(in[0]), mt::mean(mt::matmul(in[0], in[1].transpose(0, 1)))};
    };
    CHECK(fusion_groups(capture(plain, {x, y})).empty());
  }

  TEST_CASE("reduction fusion: float64, float16 and bfloat16 keep eager's output dtype") {
    manual_seed(14);
    auto fn = [](const Tensors& in) {
      return Tensors{mt::sum(in[0] * in[0]), mt::mean(mt::abs(in[0]) + 1.0, {0}, true)};
    };
    Tensor x = randn({33, 70});
    const struct {
      DType dtype;
      double rtol;
    } cases[] = {{DType::Float64, 1e-12}, {DType::Float16, 4e-3}, {DType::BFloat16, 2e-2}};
    for (const auto& tc : cases) {  // not a structured binding: clang 15 cannot CAPTURE one
      const DType t = tc.dtype;
      const double rtol = tc.rtol;
      CAPTURE(t);
      Tensor xt = x.to(t);
      Compiled c = mt::compile(fn, {.fuse = true});
      const Tensors eager = fn({xt}), out = c({xt});
      CHECK(c.num_fusion_groups() == 2);
      for (size_t i = 0; i < out.size(); ++i) {
        CHECK(out[i].dtype() == t);
        CHECK(close(out[i], eager[i], rtol));
      }
    }
  }

  TEST_CASE("reduction fusion: an empty input sums to 0 and averages to NaN, as eager does") {
    auto fn = [](const Tensors& in) {
      return Tensors{mt::sum(in[0] * 2.0, {0}), mt::mean(in[0] * 2.0), mt::sum(in[0] + 1.0)};
    };
    const Tensor x = randn({0, 5});
    Compiled c = mt::compile(fn, {.fuse = true});
    const Tensors eager = fn({x}), out = c({x});
    CHECK(c.num_fusion_groups() == 3);
    CHECK(out[0].sizes() == Shape{5});
    CHECK(close(out[0], eager[0], 0));
    CHECK(mt::sum(mt::abs(out[0])).item<double>() == 0);
    CHECK(std::isnan(out[1].item<double>()));
    CHECK(std::isnan(eager[1].item<double>()));
    CHECK(out[2].item<double>() == 0);
    CHECK(eager[2].item<double>() == 0);
  }

  TEST_CASE("reduction fusion: a compiled step that backpropagates through a fused sum") {
    auto step = [](const Tensors& in) {
      Tensor loss = mt::sum(in[0] * in[1] * 0.25);
      mt::backward(loss);
      return Tensors{loss};
    };
    manual_seed(15);
    Tensor x = randn({16, 300}), w = randn({16, 300}).requires_grad_();
    Tensor wc = w.detach().clone().requires_grad_();
    Compiled c = mt::compile(step, {.fuse = true});
    for (int i = 0; i < 2; ++i) {
      const Tensor le = step({x, w})[0];
      const Tensor lc = c({x, wc})[0];
      CHECK(close(lc, le.detach(), 1e-5));
      CHECK(close(wc.grad(), w.grad(), 1e-6));
    }
    CHECK(c.plan_str().find("fused    fused_mul_mul_sum -> sum\n") != std::string::npos);
  }

  TEST_CASE("reduction fusion: fake inputs give shapes, and MT_LOG=compile shows the merge") {
    auto fn = [](const Tensors& in) { return Tensors{mt::mean(mt::abs(in[0]), {1}, true)}; };
    Compiled c = mt::compile(fn, {.fuse = true, .name = "msq"});
    const Tensor fake = fake_empty({6, 4096});
    const Tensors out = c({fake});
    CHECK(out[0].is_fake());
    CHECK(out[0].sizes() == Shape{6, 1});
    CHECK(c.compile_count() == 0);  // fake inputs run the function itself
    // the captured graph of fakes fuses the same way
    const std::vector<FusionGroup> groups = fusion_groups(capture(fn, {fake}));
    REQUIRE(groups.size() == 1);
    CHECK(groups[0].name == "fused_abs_mean");

    CompileLog log;  // MT_LOG is read when a Compiled is made
    Compiled logged = mt::compile(fn, {.fuse = true, .name = "msq"});
    Tensor x = randn({6, 4096});
    CHECK(close(logged({x})[0], fn({x})[0], 1e-5));
    CHECK(log.has("[compile] fusion group fused_abs_mean: mt::abs, mt::mean -> mean"));
    CHECK(
        log.has("[compile] reduction: mean of the map over dims [1], keepdim, one "
                "jit::reduction"));
    CHECK(log.has("[compile] fused    fused_abs_mean -> mean"));
  }

  TEST_CASE("reduction fusion: kernel() and reduction() say which one a group has") {
    auto fn = [](const Tensors& in) {
      return Tensors{mt::sum(in[0] * in[0]), in[0] + in[0] * 3.0};
    };
    const std::vector<FusionGroup> groups = fusion_groups(capture(fn, {randn({5})}));
    REQUIRE(groups.size() == 2);
    CHECK(error_of([&] { groups[0].kernel(); }) ==
          "[compile] fusion group 'fused_mul_sum' ends in a reduction (sum); its kernel is "
          "reduction(), not kernel()");
    CHECK(error_of([&] { groups[1].reduction(); }) ==
          "[compile] fusion group 'fused_mul_add' is pointwise; its kernel is kernel(), not "
          "reduction()");
  }

  TEST_CASE("reduction fusion: the generated CUDA source compiles to CUBIN" *
            doctest::skip(no_nvrtc())) {
    auto fn = [](const Tensors& in) {
      return Tensors{mt::sum(in[0] * in[0]), mt::mean(mt::exp(in[0]) * 0.5, {0}, true)};
    };
    const Tensor fake = fake_empty({64, 256}, {.device = Device("cuda:0")});
    const std::vector<FusionGroup> groups = fusion_groups(capture(fn, {fake}));
    REQUIRE(groups.size() == 2);
    for (const FusionGroup& fg : groups) {
      CAPTURE(fg.name);
      const jit::Reduction r = fg.reduction();
      for (int arch : cubin_test_archs()) {
        CAPTURE(arch);
        const auto res = jit::compile(r.cuda_source(), fg.name + ".reduce.cu", r.name_expressions(),
                                      jit::default_options(), arch);
        CHECK(res.is_cubin());
      }
    }
  }

  TEST_CASE("reduction fusion on CUDA: a sum of squares and a mean equal eager (gpu)" *
            doctest::skip(no_gpu())) {
    manual_seed(16);
    auto fn = [](const Tensors& in) {
      return Tensors{mt::sum(in[0] * in[0]), mt::mean(mt::exp(in[0]) * 0.5, {1}, true)};
    };
    for (DType t : {DType::Float32, DType::Float16, DType::Float64}) {
      CAPTURE(t);
      // Scaled so the float16 sum of squares (about 960) stays finite: unscaled it is about
      // 96,000, past float16's 65,504, and inf against inf compares as NaN.
      Tensor x = (randn({96, 1000}) * 0.1).to(t).to(kGpu);
      Compiled c = mt::compile(fn);
      const Tensors eager = fn({x});
      for (int i = 0; i < 3; ++i) {  // warm-up, CUDA graph capture, replay
        const Tensors out = c({x});
        CHECK(c.num_fusion_groups() == 2);
        for (size_t k = 0; k < out.size(); ++k) {
          CHECK(out[k].dtype() == t);
          CHECK(close(out[k], eager[k], t == DType::Float16 ? 4e-3 : 1e-5));
        }
      }
    }
  }
}
