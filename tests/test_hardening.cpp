// SPDX-License-Identifier: MIT
// Bad inputs that used to wrap, crash or truncate silently (issues #16 and #23): shape
// and size overflow, negative expand sizes, slice and narrow bounds, float -> int64
// conversion, casting rules of in-place ops, and a backward's dtype and device.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "minitensor.h"
#include "tests/helpers.h"

using namespace mt;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
}  // namespace

TEST_CASE("hardening: factories refuse shapes whose element count overflows int64") {
  CHECK_THROWS_WITH_AS(empty({1LL << 32, 1LL << 32}),
                       "[empty] the sizes [4294967296, 4294967296] have 2^64 elements, more than "
                       "int64 can count; make the tensor smaller (at most 2^63 - 1 elements)",
                       Error);
  CHECK_THROWS_WITH_AS(empty({kMax, 2}),
                       "[empty] the sizes [9223372036854775807, 2] have 1.845e+19 elements, more "
                       "than int64 can count; make the tensor smaller (at most 2^63 - 1 elements)",
                       Error);
  // wrapped to a negative count with 581,896,768 bytes really allocated
  CHECK_THROWS_WITH_AS(empty({3037000500, 3037000500}),
                       doctest::Contains("have 9.223e+18 elements"), Error);
  CHECK_THROWS_WITH_AS(zeros({(1LL << 61) + 1, 8}),
                       doctest::Contains("[empty] the sizes [2305843009213693953, 8] have"), Error);
  CHECK_THROWS_WITH_AS(
      fake_empty({1LL << 32, 1LL << 32}),
      doctest::Contains("[fake_empty] the sizes [4294967296, 4294967296] have 2^64"), Error);
  {
    FakeMode fake;
    CHECK_THROWS_WITH_AS(empty({1LL << 40, 1LL << 40}), doctest::Contains("have 2^80 elements"),
                         Error);
  }
  CHECK_THROWS_WITH_AS(rand({1LL << 32, 1LL << 32}), doctest::Contains("[rand] the sizes"), Error);
  CHECK_THROWS_WITH_AS(randn({1LL << 32, 1LL << 32}), doctest::Contains("[randn] the sizes"),
                       Error);
  float x = 0;
  CHECK_THROWS_WITH_AS(
      from_blob(&x, {1LL << 32, 1LL << 32}, DType::Float32),
      doctest::Contains("[from_blob] the sizes [4294967296, 4294967296] have 2^64"), Error);
  // no elements, but the strides of the nonzero sizes would overflow
  CHECK_THROWS_WITH_AS(empty({0, 1LL << 32, 1LL << 32}),
                       "[empty] the sizes [0, 4294967296, 4294967296] have no elements, but their "
                       "nonzero sizes multiply to 2^64, more than int64 can count, so the strides "
                       "cannot be computed; make the other sizes smaller",
                       Error);
  // what still works: an empty tensor with one huge size, and the negative-size message
  CHECK(empty({0, kMax}).numel() == 0);
  CHECK_THROWS_WITH_AS(empty({2, -3}),
                       "[empty] negative size -3 in shape [2, -3]; sizes must be >= 0", Error);
}

TEST_CASE("hardening: factories refuse byte counts past int64") {
  // 2^62 float32 elements are 2^64 bytes: this was 0 bytes, and silu on 2^62 + 4 elements
  // (16 bytes of storage) a segmentation fault
  CHECK_THROWS_WITH_AS(empty({1LL << 62}),
                       "[empty] a float32 tensor of sizes [4611686018427387904] takes 2^64 bytes, "
                       "more than int64 can count; make the tensor smaller",
                       Error);
  CHECK_THROWS_WITH_AS(silu(empty({(1LL << 62) + 4})),
                       doctest::Contains("[empty] a float32 tensor"), Error);
  CHECK_THROWS_WITH_AS(empty({1LL << 61}, {.dtype = DType::Float64}),
                       doctest::Contains("takes 2^64 bytes"), Error);
  CHECK_THROWS_WITH_AS(empty({kMax}), doctest::Contains("[empty] a float32 tensor"), Error);
  CHECK_THROWS_WITH_AS(fake_empty({1LL << 62}), doctest::Contains("[fake_empty] a float32 tensor"),
                       Error);
  // arange and linspace stored through a null pointer
  CHECK_THROWS_WITH_AS(
      arange(double(1LL << 62)),
      doctest::Contains("[arange] a float32 tensor of sizes [4611686018427387904]"), Error);
  CHECK_THROWS_WITH_AS(
      linspace(0, 1, 1LL << 62),
      doctest::Contains("[linspace] a float32 tensor of sizes [4611686018427387904]"), Error);
  // a byte count just under int64 reaches the allocator, which says it is out of memory
  CHECK_THROWS_WITH_AS(empty({kMax - 30}, {.dtype = DType::Bool}),
                       doctest::Contains("[cpu allocator] out of memory"), Error);
}

TEST_CASE("hardening: storage extents of strided tensors are checked") {
  // (3 - 1) * (INT64_MAX / 2) + 1 elements wrapped; fill_ then crashed
  CHECK_THROWS_WITH_AS(empty_strided({3, 2}, {kMax / 2, 1}),
                       "[empty_strided] the sizes [3, 2] with strides [4611686018427387903, 1] "
                       "reach past element 2^63 - 1, more than int64 can count; use smaller sizes "
                       "or strides",
                       Error);
  CHECK_THROWS_WITH_AS(empty_strided({2}, {kMax / 2}),
                       doctest::Contains("[empty_strided] a float32 tensor of sizes [2] takes"),
                       Error);
  float x = 0;
  CHECK_THROWS_WITH_AS(from_blob(&x, {3}, {kMax / 2 + 1}, DType::Float32),
                       doctest::Contains("[from_blob] the sizes [3] with strides "
                                         "[4611686018427387904] reach past element 2^63 - 1"),
                       Error);
  CHECK_THROWS_WITH_AS(empty_strided({2}, {-1}),
                       "[empty_strided] negative stride -1 in strides [-1] is not supported; use "
                       "strides >= 0",
                       Error);
  CHECK(empty_strided({0, 3}, {kMax, kMax}).numel() == 0);  // no element: no extent
  Tensor t = empty_strided({2, 3}, {1, 2});
  CHECK(t.storage()->nbytes() == 6 * 4);
}

TEST_CASE("hardening: view, reshape and expand refuse shapes that overflow") {
  CHECK_THROWS_WITH_AS(zeros({0}).view({1LL << 32, 1LL << 32}),
                       doctest::Contains("[view] the sizes [4294967296, 4294967296] have 2^64"),
                       Error);
  CHECK_THROWS_WITH_AS(zeros({0}).reshape({1LL << 32, 1LL << 32}),
                       doctest::Contains("[reshape] the sizes [4294967296, 4294967296] have 2^64"),
                       Error);
  CHECK_THROWS_WITH_AS(zeros({0}).view({-1, 1LL << 32, 1LL << 32}),
                       doctest::Contains("[view] the sizes [4294967296, 4294967296] have 2^64"),
                       Error);
  CHECK_THROWS_WITH_AS(ones({1, 1}).expand({1LL << 32, 1LL << 32}),
                       doctest::Contains("[expand] the sizes [4294967296, 4294967296] have 2^64"),
                       Error);
  CHECK_THROWS_WITH_AS(ones({1}, {.dtype = DType::Float64}).expand({1LL << 62}),
                       "[expand] a float64 tensor of sizes [4611686018427387904] takes 2^65 bytes, "
                       "more than int64 can count; make the tensor smaller",
                       Error);
  // matmul of two expanded tensors: the output shape [2^32, 2^32] is refused
  Tensor a = ones({1, 1}).expand({1LL << 32, 1});
  Tensor b = ones({1, 1}).expand({1, 1LL << 32});
  CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("have 2^64 elements"), Error);
  // a large expand that fits still works, and reduces without touching 2^40 elements
  CHECK(ones({1}).expand({1LL << 40}).numel() == 1LL << 40);
  CHECK(ones({1}).expand({1LL << 40}).view({1LL << 20, 1LL << 20}).numel() == 1LL << 40);
}

TEST_CASE("hardening: expand refuses negative sizes other than -1") {
  CHECK_THROWS_WITH_AS(zeros({1}).expand({-2}),
                       "[expand] cannot expand shape [1] to [-2]: size -2 in dimension 0 is "
                       "negative; sizes must be >= 0, or -1 to keep the size",
                       Error);
  // this was a SIGFPE in the sum
  CHECK_THROWS_WITH_AS(sum(ones({1}).expand({-3})), doctest::Contains("size -3 in dimension 0"),
                       Error);
  CHECK_THROWS_WITH_AS(zeros({2}).expand({-1, 2}),
                       "[expand] size -1 is not allowed in the new leading dimension 0 of [-1, 2]; "
                       "sizes must be >= 0",
                       Error);
  CHECK(zeros({1, 3}).expand({2, -1}).sizes() == Shape{2, 3});
  CHECK(zeros({1}).expand({0}).numel() == 0);
}

TEST_CASE("hardening: slice with a huge step and narrow with a huge length") {
  Tensor t = arange(4);
  Tensor s = t.slice(0, 0, 4, kMax);  // was 0 elements: (4 + step - 1) wrapped
  CHECK(s.sizes() == Shape{1});
  CHECK(s.item<double>() == 0);
  Tensor s1 = t.slice(0, 1, 4, kMax);
  CHECK(s1.item<double>() == 1);
  CHECK(t.slice(0, 1, 4, 2).to_vector<double>() == std::vector<double>{1, 3});
  CHECK(t.slice(0, 4, 4, 3).numel() == 0);
  // a stride times a huge step overflows, but one element never steps
  Tensor m = arange(8).view({2, 4}).t();  // strides [1, 4]
  Tensor ms = m.slice(1, 1, 2, kMax);
  CHECK(ms.sizes() == Shape{4, 1});
  CHECK(ms.to_vector<double>() == std::vector<double>{4, 5, 6, 7});
  CHECK_THROWS_WITH_AS(t.narrow(0, 1, kMax),
                       "[narrow] start 1 and length 9223372036854775807 are out of range for "
                       "dimension 0 of size 4",
                       Error);
  CHECK_THROWS_WITH_AS(t.narrow(0, -1, kMax), doctest::Contains("[narrow] start 3 and length"),
                       Error);
  CHECK_THROWS_WITH_AS(t.narrow(0, 5, 0), doctest::Contains("[narrow] start 5 and length 0"),
                       Error);
  CHECK(t.narrow(0, 4, 0).numel() == 0);
  CHECK(t.narrow(0, 1, 3).to_vector<double>() == std::vector<double>{1, 2, 3});
}

TEST_CASE("hardening: a select of a shape that used to wrap no longer writes outside") {
  // zeros({2^61 + 1, 8}) allocated 32 bytes; select(0, 1000).fill_ wrote past them
  CHECK_THROWS_AS(zeros({(1LL << 61) + 1, 8}).select(0, 1000).fill_(7), Error);
  CHECK_THROWS_AS(empty({kMax}).slice(0, 0, 10).fill_(1), Error);
}

TEST_CASE("hardening: arange's size, step and range errors") {
  CHECK_THROWS_WITH_AS(arange(0, 1e30),
                       "[arange] the range from 0 to 1e+30 with step 1 has 1e+30 elements, more "
                       "than int64 can count; use a larger step or a shorter range",
                       Error);
  CHECK_THROWS_WITH_AS(arange(0, 0x1p63), doctest::Contains("has 2^63 elements"), Error);
  CHECK_THROWS_WITH_AS(arange(0, 1, NAN),
                       "[arange] start, end and step must be finite, got 0, 1 and nan", Error);
  CHECK_THROWS_WITH_AS(arange(0, 1, -1), doctest::Contains("goes the wrong way"), Error);
  CHECK(arange(0, 1, 0.3).numel() == 4);
}

TEST_CASE("hardening: float to int64 conversion saturates, NaN gives 0") {
  // Note [Float to integer conversion]; these were undefined behaviour
  std::vector<float> f = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 0x1p63f, -0x1p63f, 2.9f, -2.9f};
  std::vector<int64_t> want = {0, kMax, kMin, kMax, kMin, kMax, kMin, 2, -2};
  CHECK(from_vector<float>(f).to(DType::Int64).to_vector<int64_t>() == want);
  std::vector<double> d(f.begin(), f.end());
  d.push_back(0x1p63 - 1024);  // the largest double below 2^63 fits
  std::vector<int64_t> want_d = want;
  want_d.push_back(int64_t(0x1p63 - 1024));
  CHECK(from_vector<double>(d).to(DType::Int64).to_vector<int64_t>() == want_d);
  for (DType t : {DType::Float16, DType::BFloat16}) {
    CAPTURE(t);
    Tensor h = from_vector<float>({NAN, INFINITY, -INFINITY, 3.5f}).to(t);
    CHECK(h.to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, kMax, kMin, 3});
  }
  // a strided source (the element-by-element path), fill_ and full
  Tensor src = from_vector<double>({NAN, 0, -INFINITY, 0, 1e300, 0});
  Tensor dst = zeros({3}, {.dtype = DType::Int64});
  dst.copy_(src.slice(0, 0, 6, 2));
  CHECK(dst.to_vector<int64_t>() == std::vector<int64_t>{0, kMin, kMax});
  dst.fill_(NAN);
  CHECK(dst.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
  CHECK(full({2}, 1e30, {.dtype = DType::Int64}).to_vector<int64_t>() ==
        std::vector<int64_t>{kMax, kMax});
  CHECK(full({1}, -INFINITY, {.dtype = DType::Int64}).item<int64_t>() == kMin);
}

TEST_CASE("hardening: in-place ops refuse results they cannot cast into self") {
  Tensor i = from_vector<int64_t>({1, 2});
  CHECK_THROWS_WITH_AS(add_(i, from_vector<float>({0.5f, 0.5f})),
                       "[add_] result type float32 can't be cast to the desired output type int64 "
                       "(self's dtype): add_ writes into self. Convert self first "
                       "(self.to(mt::DType::Float32)) or use the out-of-place mt::add",
                       Error);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 2});  // untouched
  CHECK_THROWS_WITH_AS(sub_(i, ones({2}, {.dtype = DType::Float64})),
                       doctest::Contains("[sub_] result type float64 can't be cast to the desired "
                                         "output type int64"),
                       Error);
  CHECK_THROWS_WITH_AS(mul_(i, ones({2})), doctest::Contains("[mul_] result type float32"), Error);
  Tensor b = from_vector<int64_t>({0, 1}).to(DType::Bool);
  CHECK_THROWS_WITH_AS(add_(b, i),
                       doctest::Contains("[add_] result type int64 can't be cast to "
                                         "the desired output type bool"),
                       Error);
  CHECK_THROWS_WITH_AS(
      mul_(i, 2.5),
      "[mul_] result type float32 can't be cast to the desired output type int64 "
      "(self's dtype): the scalar 2.5 has no exact int64 value. Convert self first "
      "(self.to(mt::DType::Float32)) or use the out-of-place mt::mul",
      Error);
  CHECK_THROWS_WITH_AS(add_(i, i, 0.5),
                       "[add_] alpha 0.5 is not an integer, so the result can't be written into "
                       "self of dtype int64; use an integer alpha or a floating self",
                       Error);
  {
    FakeMode fake;  // the fake kernel checks the same
    Tensor fi = empty({2}, {.dtype = DType::Int64});
    CHECK_THROWS_WITH_AS(add_(fi, empty({2})), doctest::Contains("[add_] result type float32"),
                         Error);
  }
  // what is allowed: same category, or a wider value into a narrower float
  add_(i, i);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 4});
  mul_(i, 3.0);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{6, 12});
  Tensor f = ones({2});
  add_(f, from_vector<double>({0.5, 1.5}));
  CHECK(f.to_vector<double>() == std::vector<double>{1.5, 2.5});
  add_(f, i);
  CHECK(f.to_vector<double>() == std::vector<double>{7.5, 14.5});
  CHECK(can_cast(DType::Int64, DType::Float16));
  CHECK(can_cast(DType::Bool, DType::Int64));
  CHECK_FALSE(can_cast(DType::Float16, DType::Int64));
  CHECK_FALSE(can_cast(DType::Int64, DType::Bool));
}

namespace {
Tensor hardening_identity(const Tensor& x) { return x.clone(); }
}  // namespace

TEST_CASE("hardening: a backward returning another dtype is cast to the input's") {
  auto op = custom_op("hardening::double_grad", hardening_identity);
  op.register_fake([](const Tensor& x) { return empty_like(x); });
  op.register_autograd(
      [](AutogradContext&, const Tensor& g) { return mul(g.to(DType::Float64), 2.0); },
      [](AutogradContext&, const Tensor&, const Tensor&) {});
  Tensor x = from_vector<float>({1, 2, 3});
  x.requires_grad_();
  backward(sum(op(x)));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::Float32);  // was float64
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
  // through a non-leaf too: the gradient reaching mul's backward is float32
  Tensor y = from_vector<float>({1, 2});
  y.requires_grad_();
  backward(sum(mul(op(y), y)));
  CHECK(y.grad().dtype() == DType::Float32);
  CHECK(y.grad().to_vector<double>() == std::vector<double>{3, 6});  // 2 * y + y

  auto bad = custom_op("hardening::cuda_grad", hardening_identity);
  bad.register_fake([](const Tensor& x) { return empty_like(x); });
  bad.register_autograd(
      [](AutogradContext&, const Tensor& g) {
        return fake_empty(g.sizes(), {.dtype = g.dtype(), .device = Device("cuda:0")});
      },
      [](AutogradContext&, const Tensor&, const Tensor&) {});
  Tensor z = from_vector<float>({1, 2});
  z.requires_grad_();
  CHECK_THROWS_WITH_AS(backward(sum(bad(z))),
                       "[backward] the backward of 'hardening::cuda_grad' returned a gradient on "
                       "cuda:0 for input 0, which is on cpu; return each gradient on its input's "
                       "device (.to(device))",
                       Error);
}
