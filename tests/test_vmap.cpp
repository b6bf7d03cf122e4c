// SPDX-License-Identifier: MIT
// mt::vmap through the Batched key (issue 37): every elementwise row, views, reductions,
// matmul, softmax and mse_loss against a loop over the batch; nested vmap; per-sample
// gradients (vmap of mt::grad) against a loop of grad calls; the slow fallback and its
// warning; register_vmap by handle and by name; every bad argument.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "kernels/elementwise_rows.h"
#include "tests/helpers.h"

using namespace mt;

namespace {

void check_close(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  REQUIRE(got.sizes() == want.sizes());
  const auto g = got.contiguous().to(DType::Float64).to_vector<double>();
  const auto w = want.contiguous().to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      CHECK(std::isnan(g[i]));
      continue;
    }
    CHECK(g[i] == doctest::Approx(w[i]).epsilon(tol));
  }
}

// vmap(fn, in_dims)(args) against fn run on each sample, its outputs stacked at dim 0.
void check_against_loop(const VmapFunction& fn, const std::vector<Tensor>& args,
                        const BatchDims& in_dims, double tol = 1e-5) {
  const std::vector<Tensor> got = vmap(fn, in_dims)(args);
  int64_t batch = 0;
  for (size_t i = 0; i < args.size(); ++i)
    if (in_dims[i]) batch = args[i].size(*in_dims[i]);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> sample;
    for (size_t i = 0; i < args.size(); ++i)
      sample.push_back(in_dims[i] ? args[i].select(*in_dims[i], b) : args[i]);
    const std::vector<Tensor> want = fn(sample);
    REQUIRE(want.size() == got.size());
    for (size_t o = 0; o < want.size(); ++o) check_close(got[o].select(0, b), want[o], tol);
  }
}

// An op called boxed (trailing arguments take their defaults).
Tensor call_boxed(const std::string& name, Stack args) {
  dispatcher().find_or_throw(name).call_boxed(&args);
  return args[0].to_tensor();
}

Tensor positive(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return mt::add(rand(s, {}, &g), 0.5);
}

}  // namespace

TEST_SUITE("vmap") {
  TEST_CASE("vmap: every elementwise row, batched and unbatched operands, against a loop") {
    LogCapture log;
    int rows = 0;
    for (const ew::Row& r : ew::kRows) {
      const std::string name = ew::op_name(r);
      if (name.empty()) continue;
      CAPTURE(name);
      ++rows;
      const Tensor x = positive({3, 2, 4}, 1), y = positive({3, 4}, 2), y1 = positive({4}, 3);
      if (r.arity == ew::Arity::Unary) {
        check_against_loop(
            [&](const std::vector<Tensor>& a) {
              return std::vector<Tensor>{call_boxed(name, {a[0]})};
            },
            {x}, {0});
        check_against_loop(
            [&](const std::vector<Tensor>& a) {
              return std::vector<Tensor>{call_boxed(name, {a[0]})};
            },
            {x}, {2});  // the batch in the last dim
      } else if (r.arity == ew::Arity::Scalar) {
        check_against_loop(
            [&](const std::vector<Tensor>& a) {
              return std::vector<Tensor>{call_boxed(name, {a[0], 1.5})};
            },
            {x}, {1});
      } else {
        auto fn = [&](const std::vector<Tensor>& a) {
          return std::vector<Tensor>{call_boxed(name, {a[0], a[1]})};
        };
        check_against_loop(fn, {x, y}, {0, 0});              // [2, 4] with [4] per sample
        check_against_loop(fn, {y, x}, {0, 0});              // [4] with [2, 4]
        check_against_loop(fn, {x, y1}, {0, std::nullopt});  // one operand unbatched
        check_against_loop(fn, {y1, x.permute({1, 2, 0})}, {std::nullopt, 2});
      }
    }
    CHECK(rows >= 20);
    CHECK(log.count("has no batching rule") == 0);  // each row has its rule from the table
  }

  TEST_CASE("vmap: views, reductions, softmax, mse_loss and silu against a loop") {
    LogCapture log;
    const Tensor x = positive({3, 4, 5}, 4), t = positive({3, 5}, 5);
    auto one = [](std::function<Tensor(const Tensor&)> f) {
      return [f](const std::vector<Tensor>& a) { return std::vector<Tensor>{f(a[0])}; };
    };
    for (int64_t d : {0, 1, 2}) {
      CAPTURE(d);
      check_against_loop(one([](const Tensor& v) {
                           return v.reshape({v.size(1), v.size(0)});
                         }),
                         {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.view({-1}); }), {x.contiguous()}, {0});
      check_against_loop(one([](const Tensor& v) { return v.transpose(0, 1); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.t(); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.permute({1, 0}); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.unsqueeze(-1).squeeze(); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.unsqueeze(1).squeeze(1); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) {
                           return v.unsqueeze(0).expand({2, -1, -1});
                         }),
                         {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.slice(1, 1, 4, 2); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.select(0, 1); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return v.flatten(); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return mt::sum(v); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return mt::sum(v, {-1}, true); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return mt::mean(v, {0}); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return mt::max(v); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return std::get<0>(mt::max(v, 1)); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return mt::softmax(v, -1); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return mt::log_softmax(v, 0); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) { return mt::silu(v); }), {x}, {d});
      check_against_loop(one([](const Tensor& v) {
                           return mt::sum_to(v, {1, v.size(1)});
                         }),
                         {x}, {d});
    }
    auto mse = [](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{mt::mse_loss(a[0], a[1])};
    };
    check_against_loop(mse, {x.select(1, 0), t}, {0, 0});
    check_against_loop(mse, {x.select(1, 0), t.select(0, 0)}, {0, std::nullopt});
    // a per-sample scalar: sum, softmax and mse_loss of one element
    const Tensor s = positive({3}, 6);
    check_against_loop(one([](const Tensor& v) { return mt::sum(v); }), {s}, {0});
    check_against_loop(mse, {s, s}, {0, 0});
    CHECK(log.count("has no batching rule") == 0);
  }

  TEST_CASE("vmap: matmul of every rank combination against a loop, as one matmul call") {
    const Tensor v = positive({3, 4}, 7), m = positive({3, 4, 2}, 8),
                 b3 = positive({3, 2, 4, 2}, 9);
    const Tensor uv = positive({4}, 10), um = positive({5, 4}, 11), um2 = positive({4, 2}, 12),
                 u3 = positive({2, 5, 4}, 13);
    auto mm = [](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{mt::matmul(a[0], a[1])};
    };
    const std::optional<int64_t> no;
    check_against_loop(mm, {v, uv}, {0, no});                   // [k] @ [k]
    check_against_loop(mm, {v, um2}, {0, no});                  // [k] @ [k, n]
    check_against_loop(mm, {v, b3.select(0, 0)}, {0, no});      // [k] @ [2, k, n]
    check_against_loop(mm, {m.transpose(1, 2), uv}, {0, no});   // [m, k] @ [k]
    check_against_loop(mm, {m.transpose(1, 2), um2}, {0, no});  // [m, k] @ [k, n]
    check_against_loop(mm, {um, v}, {no, 0});  // [5, k] @ [k]: the batch comes out last
    check_against_loop(mm, {uv, v}, {no, 0});  // [k] @ [k]
    check_against_loop(mm, {um, m}, {no, 0});  // [5, k] @ [k, n]
    check_against_loop(mm, {u3, m}, {no, 0});  // [2, 5, k] @ [k, n]
    check_against_loop(mm, {v, v}, {0, 0});    // [k] @ [k] per sample
    check_against_loop(mm, {v, m}, {0, 0});    // [k] @ [k, n]
    check_against_loop(mm, {m.transpose(1, 2), m.select(2, 0)}, {0, 0});  // [n, k] @ [k]
    check_against_loop(mm, {m.transpose(1, 2), b3}, {0, 0});              // [2, k] @ [2, k, n]
    check_against_loop(mm, {m.transpose(0, 1), m}, {2, 2});  // batch dims last: [4, 3] @ [3, 4]

    CallTrace trace;
    {
      TraceCallsGuard guard(&trace);
      (void)vmap(mm, {0, std::nullopt})({positive({8, 5, 4}, 14), um2});
    }
    int matmuls = 0;
    for (const TracedCall& c : trace.calls) matmuls += c.op == "mt::matmul";
    CHECK(matmuls == 2);  // the call on batched tensors, and one matmul of the whole batch
  }

  TEST_CASE("vmap: nested vmap(vmap(f)) against a double loop") {
    const Tensor x = positive({2, 3, 4}, 15), w = positive({4, 2}, 16);
    auto f = [&](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{mt::sum(mt::matmul(a[0], w) * a[0].slice(0, 0, 2), {}, false)};
    };
    auto inner = vmap(f, {0});
    auto outer = vmap([&](const std::vector<Tensor>& a) { return inner(a); }, {0});
    const Tensor got = outer({x})[0];
    REQUIRE(got.sizes() == Shape{2, 3});
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        check_close(got.select(0, i).select(0, j), f({x.select(0, i).select(0, j)})[0]);
    // the inner vmap over another dim, with out_dims
    auto inner1 = vmap(f, {1}, {-1});
    const Tensor got2 =
        vmap([&](const std::vector<Tensor>& a) { return inner1(a); }, {0})({x.transpose(1, 2)})[0];
    check_close(got2, got);
  }

  TEST_CASE("vmap of mt::grad: per-sample gradients of an MLP equal a loop of grad calls") {
    Generator g(17);
    const Tensor w1 = randn({4, 3}, {}, &g).requires_grad_(),
                 b1 = randn({3}, {}, &g).requires_grad_(),
                 w2 = randn({3, 2}, {}, &g).requires_grad_();
    const Tensor x = randn({5, 4}, {}, &g), y = randn({5, 2}, {}, &g);
    const std::vector<Tensor> params{w1, b1, w2};
    auto loss = [&](const Tensor& xs, const Tensor& ys) {
      return mt::mse_loss(mt::matmul(mt::silu(mt::matmul(xs, w1) + b1), w2), ys);
    };
    auto per_sample = vmap(
        [&](const std::vector<Tensor>& a) { return mt::grad({loss(a[0], a[1])}, params); }, {0, 0});
    const std::vector<Tensor> got = per_sample({x, y});
    REQUIRE(got.size() == 3);
    for (size_t p = 0; p < 3; ++p) {
      Shape want = params[p].sizes();
      want.insert(0, 5);
      CHECK(got[p].sizes() == want);
      CHECK(!got[p].requires_grad());
    }
    for (int64_t b = 0; b < 5; ++b) {
      const std::vector<Tensor> want = mt::grad({loss(x.select(0, b), y.select(0, b))}, params);
      for (size_t p = 0; p < 3; ++p) check_close(got[p].select(0, b), want[p], 1e-4);
    }
    for (const Tensor& p : params) CHECK(!p.grad().defined());  // grad leaves .grad alone

    // grad outside vmap: the sum of the per-sample losses, through the lifted parameters
    auto losses =
        vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{loss(a[0], a[1])}; },
             {0, 0});
    const std::vector<Tensor> total = mt::grad({mt::sum(losses({x, y})[0])}, params);
    for (size_t p = 0; p < 3; ++p) check_close(total[p], mt::sum(got[p], {0}), 1e-4);

    // per-sample gradients of the inputs themselves
    const Tensor xr = x.clone().requires_grad_();
    auto dx =
        vmap([&](const std::vector<Tensor>& a) { return mt::grad({loss(a[0], a[1])}, {a[0]}); },
             {0, 0})({xr, y})[0];
    for (int64_t b = 0; b < 5; ++b) {
      const Tensor xb = x.select(0, b).clone().requires_grad_();
      check_close(dx.select(0, b), mt::grad({loss(xb, y.select(0, b))}, {xb})[0], 1e-4);
    }
  }

  TEST_CASE(
      "vmap of mt::grad: a parameter's per-sample gradient counts its own uses inside the "
      "function") {
    // docs/dispatcher.md, vmap's limits: w2, computed from w outside the vmap, is lifted as a
    // tensor of its own, so what flows through it does not reach w's per-sample gradient.
    Generator g(23);
    const Tensor w = randn({3}, {}, &g).requires_grad_();
    const Tensor w2 = mt::mul(w, 2.0);
    const Tensor x = randn({4, 3}, {}, &g);
    const Tensor got = vmap([&](const std::vector<Tensor>& a) {
      return mt::grad({mt::sum(mt::mul(a[0], w) + mt::mul(a[0], w2))}, {w});
    })({x})[0];
    CHECK(max_diff(got, x) == 0.0);  // d/dw of sum(x * w): the inside use alone, not 3x
    // computed inside the function, the same expression counts both uses
    const Tensor both = vmap([&](const std::vector<Tensor>& a) {
      return mt::grad({mt::sum(mt::mul(a[0], w) + mt::mul(a[0], mt::mul(w, 2.0)))}, {w});
    })({x})[0];
    CHECK(max_diff(both, mt::mul(x, 3.0)) < 1e-6);
  }

  TEST_CASE("vmap: an op without a rule runs once per sample, with a one-time warning") {
    auto rowsum = custom_op("vmap_test::rowsum", [](const Tensor& x) { return mt::sum(x, {-1}); });
    rowsum.register_fake([](const Tensor& x) { return empty({x.size(0)}); });
    LogCapture log;
    const Tensor x = positive({4, 3, 2}, 18);
    auto fn = [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{rowsum(a[0])}; };
    check_against_loop(fn, {x}, {0});
    check_against_loop(fn, {x}, {2});
    CHECK(log.count("[vmap] warning: 'vmap_test::rowsum' has no batching rule, so it runs once "
                    "per batch element and the results are stacked (slow); give it a rule with "
                    "mt::register_vmap") == 1);
    CHECK(dispatcher()
              .dump_table("vmap_test::rowsum")
              .find("Batched   fallback    [autograd/vmap.cpp:") != std::string::npos);
    // with gradients: the stacked result is differentiable
    rowsum.register_autograd(
        [](AutogradContext& ctx, const Tensor& g) {
          return g.unsqueeze(-1).expand(Shape(ctx.get<std::vector<int64_t>>("sizes")));
        },
        [](AutogradContext& ctx, const Tensor& x, const Tensor&) {
          ctx.save("sizes", x.sizes().vec());
        });
    const Tensor xr = x.clone().requires_grad_();
    const Tensor out = vmap(fn)({xr})[0];
    CHECK(out.sizes() == Shape{4, 3});
    REQUIRE(out.requires_grad());
    check_close(mt::grad({mt::sum(mt::mul(out, out))}, {xr})[0],
                mt::mul(mt::sum(x, {-1}, true).expand({4, 3, 2}), 2.0));
  }

  TEST_CASE(
      "vmap: the fallback writes each sample's results into their rows: strided and integer "
      "outputs, several returns, fake tensors") {
    LogCapture log;  // the fallback's one-time warning
    // a transposed (strided) float result and an int64 one, per sample
    auto split = custom_op("vmap_test::split_rows", [](const Tensor& x) {
      return std::make_tuple(mt::mul(x, 2.0).transpose(0, 1), x.to(DType::Int64));
    });
    split.register_fake([](const Tensor& x) {
      return std::make_tuple(empty({x.size(1), x.size(0)}),
                             empty(x.sizes(), {.dtype = DType::Int64}));
    });
    const Tensor x = mt::mul(positive({5, 3, 2}, 31), 10.0);
    auto fn = [&](const std::vector<Tensor>& a) {
      auto [t, i] = split(a[0]);
      return std::vector<Tensor>{t, i};
    };
    const std::vector<Tensor> got = vmap(fn, {1})({x});
    REQUIRE(got.size() == 2);
    CHECK(got[0].sizes() == Shape{3, 2, 5});
    CHECK(got[1].dtype() == DType::Int64);
    for (int64_t b = 0; b < 3; ++b) {
      auto [t, i] = split(x.select(1, b));
      CHECK(max_diff(got[0].select(0, b), t) == 0.0);
      CHECK(max_diff(got[1].select(0, b).to(DType::Float64), i.to(DType::Float64)) == 0.0);
    }
    // under FakeMode the fallback makes fake outputs of the batched shapes
    FakeMode fake;
    const std::vector<Tensor> f = vmap(fn, {1})({fake_empty({5, 3, 2})});
    CHECK(f[0].is_fake());
    CHECK(f[0].sizes() == Shape{3, 2, 5});
    CHECK(f[1].sizes() == Shape{3, 5, 2});
    CHECK(f[1].dtype() == DType::Int64);
  }

  TEST_CASE(
      "vmap: the fallback keeps the graph of a result that requires grad after samples whose "
      "results did not") {
    LogCapture log;
    const Tensor w = from_vector<float>({1, 2}, {2}).requires_grad_();
    // w itself for a positive sample, zeros (no graph) for the others
    auto pick = custom_op("vmap_test::pick", [&](const Tensor& x) {
      return x.contiguous().to_vector<float>()[0] > 0 ? w : zeros({2});
    });
    const Tensor x = from_vector<float>({-1, 1, -1, 1}, {4, 1});
    const Tensor out =
        vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{pick(a[0])}; })({x})[0];
    REQUIRE(out.requires_grad());
    CHECK(max_diff(out, from_vector<float>({0, 0, 1, 2, 0, 0, 1, 2}, {4, 2})) == 0.0);
    // samples 1 and 3 returned w: its gradient counts both rows, the constant rows none
    CHECK(max_diff(mt::grad({mt::sum(out)}, {w})[0], from_vector<float>({2, 2}, {2})) == 0.0);
    // with grad mode off the same op is copied row by row, without a graph
    NoGradGuard no_grad;
    const Tensor plain =
        vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{pick(a[0])}; })({x})[0];
    CHECK_FALSE(plain.requires_grad());
    CHECK(max_diff(plain, from_vector<float>({0, 0, 1, 2, 0, 0, 1, 2}, {4, 2})) == 0.0);
  }

  TEST_CASE("vmap: an op without a rule inside vmap(vmap(f)) against a double loop") {
    LogCapture log;
    auto rowsum =
        custom_op("vmap_test::nested_rowsum", [](const Tensor& x) { return mt::sum(x, {-1}); });
    const Tensor x = positive({3, 4, 5}, 41);
    auto inner =
        vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{rowsum(a[0])}; });
    auto outer = [&](const std::vector<Tensor>& a) { return inner(a); };
    // the inner fallback's results are batched tensors of the outer vmap: stacked by ops
    check_against_loop(outer, {x}, {0});
    check_against_loop(outer, {x}, {1});
    NoGradGuard no_grad;
    check_against_loop(outer, {x}, {2});
  }

  TEST_CASE("vmap: an op that cannot be looped is an error naming it") {
    LogCapture log;  // the fallback's warning, before the second op fails
    auto bump = custom_op("vmap_test::bump_", [](const Tensor& x) { x.fill_(1.0); },
                          {.mutates_args = {"_0"}});
    CHECK(error_of([&] {
            vmap([&](const std::vector<Tensor>& a) {
              bump(a[0]);
              return a;
            })({zeros({2, 3})});
          }) ==
          "[vmap] 'vmap_test::bump_' has no batching rule and writes to its argument '_0': "
          "it cannot run once per sample (each sample would write to a copy). Give it a "
          "rule with mt::register_vmap, or call it outside mt::vmap");
    auto positives = custom_op("vmap_test::positives", [](const Tensor& x) {
      int64_t n = 0;
      for (float v : x.contiguous().to_vector<float>()) n += v > 0;
      return zeros({n});
    });
    CHECK(error_of([&] {
            vmap([&](const std::vector<Tensor>& a) {
              return std::vector<Tensor>{positives(a[0])};
            })({from_vector<float>({1, 2, -1, 3}, {2, 2})});
          }) ==
          "[vmap] 'vmap_test::positives' returned output 0 of shape [2] for sample 0 but [1] "
          "for sample 1: an op whose output size depends on the data cannot be batched; call "
          "it outside mt::vmap");
  }

  TEST_CASE("register_vmap by handle and by name, and undone with its Registration") {
    auto scale =
        custom_op("vmap_test::scale", [](const Tensor& x, double a) { return mt::mul(x, a); });
    LogCapture log;
    int calls = 0;
    auto rule = [&](const VmapInfo& info, const Tensor& x, double a) {
      ++calls;
      CHECK(info.batch_size == 3);
      CHECK(info.in_dims.size() == 2);
      CHECK(!info.in_dims[1]);
      return std::pair<Tensor, std::optional<int64_t>>(mt::mul(x, a), info.in_dims[0]);
    };
    const Tensor x = positive({2, 3}, 19);
    auto fn = [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{scale(a[0], 2.0)}; };
    {
      Registration r = register_vmap(scale, rule);
      check_against_loop(fn, {x}, {1});
      CHECK(calls == 1);
      CHECK(dispatcher()
                .dump_table("vmap_test::scale")
                .find("Batched   kernel      [tests/test_vmap.cpp:") != std::string::npos);
    }
    {
      Registration r = register_vmap("vmap_test::scale", rule);  // by name
      check_against_loop(fn, {x}, {1});
      CHECK(calls == 2);
    }
    {
      // a boxed rule works for any op
      Registration r =
          register_vmap("vmap_test::scale", [&](const VmapInfo& info, Stack* s) -> BatchDims {
            ++calls;
            const double a = s->back().to_double();
            const Tensor v = (*s)[s->size() - 2].to_tensor();
            s->resize(s->size() - 2);
            s->emplace_back(mt::mul(v, a));
            return {info.in_dims[0]};
          });
      check_against_loop(fn, {x}, {1});
      CHECK(calls == 3);
    }
    CHECK(log.count("has no batching rule") == 0);
    check_against_loop(fn, {x}, {1});  // the rules are gone: the fallback
    CHECK(calls == 3);
    CHECK(log.count("'vmap_test::scale' has no batching rule") == 1);
    CHECK(
        error_of([&] {
          (void)register_vmap("vmap_test::scale", [](const VmapInfo&, const Tensor& x) {
            return std::pair<Tensor, std::optional<int64_t>>(x, 0);
          });
        })
            .starts_with("[typed()] the C++ signature (Tensor) -> Tensor does not match the schema "
                         "of 'vmap_test::scale'"));
    CHECK(error_of([&] {
            (void)register_vmap("vmap_test::nope", rule);
          }).starts_with("[dispatcher] no operator named 'vmap_test::nope' is registered"));
  }

  TEST_CASE("vmap: a rule that returns a wrong batch dim is an error naming the op") {
    auto twice = custom_op("vmap_test::twice", [](const Tensor& x) { return mt::mul(x, 2.0); });
    Registration r = register_vmap(twice, [](const VmapInfo&, const Tensor& x) {
      return std::pair<Tensor, std::optional<int64_t>>(mt::mul(x, 2.0), 5);
    });
    CHECK(error_of([&] {
            vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{twice(a[0])}; })(
                {zeros({3, 2})});
          }) ==
          "[vmap] the batching rule of 'vmap_test::twice' says output 0 has its batch dim at 5, "
          "but its shape is [3, 2] and the batch size is 3; return the dim that holds the batch");
  }

  TEST_CASE("vmap: bad in_dims, out_dims and batch sizes are errors naming the argument") {
    auto id = [](const std::vector<Tensor>& a) { return a; };
    const Tensor x = zeros({2, 3}), y = zeros({4, 3});
    CHECK(error_of([&] {
            vmap(id, {0})({x, y});
          }) ==
          "[vmap] in_dims has 1 entries but the function got 2 arguments; give one per argument "
          "(std::nullopt for one that is not batched)");
    CHECK(error_of([&] {
            vmap(id, {0, 2})({x, y});
          }) ==
          "[vmap] in_dims[1] is 2, but argument 1 has 2 dims (shape [4, 3]); use a dim in [-2, 2)");
    CHECK(error_of([&] {
            vmap(id, {0, 0})({x, y});
          }) ==
          "[vmap] the batched arguments have different batch sizes: argument 0 has 2 along dim 0, "
          "argument 1 has 4 along dim 0; give every batched argument the same batch size");
    CHECK(error_of([&] {
            vmap(id, {std::nullopt, std::nullopt})({x, y});
          }) ==
          "[vmap] no argument is batched (every in_dims entry is std::nullopt, or there are no "
          "arguments); batch at least one");
    CHECK(error_of([&] {
            vmap(id, {0}, {0, 1})({x});
          }) ==
          "[vmap] out_dims has 2 entries but the function returned 1 tensors; give one per output");
    CHECK(error_of([&] { vmap(id, {0}, {2})({x}); }) ==
          "[vmap] out_dims[0] is 2, but output 0 has 2 dims with its batch dim (shape [3] per "
          "sample); use a dim in [-2, 2)");
    CHECK(error_of([&] { vmap(id, {0}, {std::nullopt})({x}); }) ==
          "[vmap] out_dims[0] is std::nullopt, but output 0 differs from sample to sample; give it "
          "a batch dim");
    CHECK(error_of([&] { vmap(id, {0})({Tensor()}); }) ==
          "[vmap] argument 0 is undefined but in_dims[0] is 0; pass a tensor, or std::nullopt as "
          "its in_dims entry");
    CHECK(error_of([&] { vmap(VmapFunction())({x}); }) ==
          "[vmap] the function is empty; pass a callable");
    // out_dims nullopt for an output that is the same for every sample, and a negative out dim
    auto outs = vmap(
        [&](const std::vector<Tensor>& a) {
          return std::vector<Tensor>{y, a[0]};
        },
        {0}, {std::nullopt, -1})({x});
    CHECK(outs[0].is_same(y));
    CHECK(outs[1].sizes() == Shape{3, 2});
    // inside: a per-sample dim out of range names the per-sample shape
    CHECK(error_of([&] {
            vmap([](const std::vector<Tensor>& a) {
              return std::vector<Tensor>{a[0].transpose(0, 1)};
            })({x});
          }) ==
          "[transpose] dimension 1 is out of range for a 1-d tensor (expected a value in [-1, 0])");
  }

  TEST_CASE("vmap: a batched tensor kept past its vmap, or read, is a clear error") {
    Tensor kept;
    auto out = vmap([&](const std::vector<Tensor>& a) {
      kept = a[0];
      CHECK(is_batched(a[0]));
      CHECK(a[0].sizes() == Shape{3});
      CHECK(error_of([&] { (void)a[0].to_vector<float>(); }) ==
            "[data_ptr] cannot read the data of a batched tensor (shape [3] per sample): inside "
            "mt::vmap a tensor stands for every sample of the batch; return it from the vmapped "
            "function and read the result");
      CHECK(error_of([&] { a[0].requires_grad_(); }) ==
            "[requires_grad_] this is a batched tensor inside mt::vmap; call requires_grad_ on the "
            "tensor before passing it to mt::vmap (mt::grad inside vmap then gives per-sample "
            "gradients)");
      // detach keeps the batch: each sample's own row, without history
      const Tensor d = a[0].detach();
      CHECK(is_batched(d));
      return std::vector<Tensor>{mt::exp(a[0]), mt::mul(d, 2.0)};
    })({from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})});
    check_close(out[1], from_vector<float>({2, 4, 6, 8, 10, 12}, {2, 3}));
    CHECK(!is_batched(kept));
    CHECK(!is_batched(out[0]));
    CHECK(error_of([&] { (void)mt::exp(kept); }) ==
          "[vmap] 'mt::exp' got a batched tensor of a vmap that has already returned (a tensor "
          "kept from inside the vmapped function); return it from the function instead");
  }

  TEST_CASE("vmap: dump and MT_TRACE=dispatch show the Batched key") {
    const std::string table = dispatcher().dump_table("mt::matmul");
    CHECK(table.find("  Batched   kernel      [kernels/ops/batching.cpp:") != std::string::npos);
    CHECK(dispatcher().dump_table("mt::exp").find(
              "  Batched   kernel      [kernels/ops/batching.cpp:") != std::string::npos);
    LogCapture log;
    dispatcher().set_trace_dispatch(true);
    (void)vmap([](const std::vector<Tensor>& a) { return std::vector<Tensor>{mt::exp(a[0])}; })(
        {zeros({2, 3})});
    dispatcher().set_trace_dispatch(false);
    CHECK(log.count(
              "[call] mt::exp keys={Batched, CPU} -> Batched kernel [kernels/ops/batching.cpp:") ==
          1);
    CHECK(log.count("  [redispatch] mt::exp keys={CPU} -> CPU kernel [") == 1);
  }
}
