// SPDX-License-Identifier: MIT
// The runtime core: dtypes, devices, storage, views, copies, factories, printing, errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "kernels/ops.h"
#include "minitensor.h"
#include "runtime/cpu_cache.h"
#include "runtime/philox.h"
#include "runtime/version.h"
#include "runtime/view.h"
#include "tests/child.h"
#include "tests/helpers.h"

using namespace mt;

TEST_CASE("dtype: sizes, names and promotion") {
  CHECK(dtype_size(DType::Float32) == 4);
  CHECK(dtype_size(DType::Float64) == 8);
  CHECK(dtype_size(DType::Float16) == 2);
  CHECK(dtype_size(DType::BFloat16) == 2);
  CHECK(dtype_size(DType::Int64) == 8);
  CHECK(dtype_size(DType::Bool) == 1);
  CHECK(dtype_name(DType::BFloat16) == "bfloat16");
  CHECK(parse_dtype("float16") == DType::Float16);
  CHECK(parse_dtype("bf16") == DType::BFloat16);
  CHECK_THROWS_WITH_AS(parse_dtype("float8"),
                       "[dtype] unknown dtype 'float8'; expected one of float32, float64, "
                       "float16, bfloat16, int64, bool",
                       Error);
  CHECK(promote_types(DType::Int64, DType::Float32) == DType::Float32);
  CHECK(promote_types(DType::Float32, DType::Float64) == DType::Float64);
  CHECK(promote_types(DType::Float16, DType::BFloat16) == DType::Float32);
  CHECK(promote_types(DType::Bool, DType::Int64) == DType::Int64);
  CHECK(promote_types(DType::Float16, DType::Int64) == DType::Float16);
}

TEST_CASE("dtype: float16 rounds to nearest even, with subnormals, inf and nan") {
  CHECK(Half(1.0f).bits == 0x3c00);
  CHECK(Half(-2.0f).bits == 0xc000);
  CHECK(Half(65504.0f).bits == 0x7bff);                          // largest finite
  CHECK(Half(65520.0f).bits == 0x7c00);                          // rounds to inf
  CHECK(Half(std::ldexp(1.0f, -24)).bits == 0x0001);             // smallest subnormal
  CHECK(Half(std::ldexp(1.0f, -25)).bits == 0x0000);             // halfway to zero: ties to even
  CHECK(Half(std::ldexp(3.0f, -26)).bits == 0x0001);             // above halfway
  CHECK(Half(1.0f + std::ldexp(1.0f, -11)).bits == 0x3c00);      // tie -> even
  CHECK(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits == 0x3c02);  // tie -> even (up)
  CHECK(std::isnan(float(Half(NAN))));
  CHECK(float(Half(INFINITY)) == INFINITY);
  // every finite half survives a round trip through float
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint16_t h = uint16_t(b);
    if ((h & 0x7c00) == 0x7c00) continue;
    CHECK_MESSAGE(Half::from_float(Half::to_float(h)) == h, "bits ", b);
  }
}

TEST_CASE("dtype: bfloat16 keeps float32's range and rounds to nearest even") {
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(float(BFloat16(3.0e38f)) > 2.9e38f);
  CHECK(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);      // tie -> even
  CHECK(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits == 0x3f82);  // tie -> even (up)
  CHECK(std::isnan(float(BFloat16(NAN))));
}

TEST_CASE("device: parse and print") {
  CHECK(Device("cpu").str() == "cpu");
  CHECK(Device("cuda") == Device(DeviceType::CUDA, 0));
  CHECK(Device("cuda:1").index == 1);
  CHECK(Device("cuda:1").str() == "cuda:1");
  CHECK(fmt::format("{}", Device("cuda:3")) == "cuda:3");
  CHECK_THROWS_WITH_AS(Device("gpu"),
                       "[device] cannot parse device 'gpu'; expected 'cpu', 'cuda' or 'cuda:N' "
                       "with N >= 0",
                       Error);
  CHECK_THROWS_AS(Device("cuda:"), Error);
  CHECK_THROWS_AS(Device("cuda:-1"), Error);
  CHECK_THROWS_AS(Device("cuda:1x"), Error);
  CHECK_THROWS_AS(Device("cpu:1"), Error);
}

TEST_CASE("fmt: Device, DType, Shape and Tensor print as text, with a string's format spec") {
  CHECK(fmt::format("{} {} {}", DType::BFloat16, Device("cuda:2"), Shape{2, 3}) ==
        "bfloat16 cuda:2 [2, 3]");
  CHECK(fmt::format("{}", Shape{}) == "[]");
  CHECK(fmt::format("[{:>8}]", DType::Float32) == "[ float32]");
  CHECK(fmt::format("[{:<6}]", Device("cpu")) == "[cpu   ]");
  CHECK(fmt::format("[{:^10}]", Shape{2, 3}) == "[  [2, 3]  ]");
  CHECK(fmt::format("{:.6}", ones({1})) == "tensor");
}

TEST_CASE("dispatch keys: highest wins, set algebra") {
  DispatchKeySet s{DispatchKey::CPU, DispatchKey::Autograd};
  CHECK(s.highest() == DispatchKey::Autograd);
  CHECK(s.below(DispatchKey::Autograd) == DispatchKeySet(DispatchKey::CPU));
  CHECK(s.remove(DispatchKey::Autograd).highest() == DispatchKey::CPU);
  CHECK(s.str() == "{Autograd, CPU}");
  CHECK((s | DispatchKey::Trace).highest() == DispatchKey::Trace);
  CHECK((s - s).empty());
}

TEST_CASE("storage: small CPU blocks are reused per thread, stay aligned and never overlap") {
  // Note [Small CPU blocks]: sizes up to 1 KiB come back from a per-thread free list.
  std::vector<Tensor> live;
  for (int round = 0; round < 3; ++round) {
    for (int64_t n = 1; n <= 300; n += 7) {
      Tensor t = full({n}, double(n));
      CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 == 0);
      live.push_back(t);
    }
    // Every live tensor still holds its own value: no block was handed out twice.
    for (const Tensor& t : live) {
      const float want = float(t.numel());
      const float* p = t.data_ptr<float>();
      bool ok = true;
      for (int64_t i = 0; i < t.numel(); ++i) ok = ok && p[i] == want;
      CHECK(ok);
    }
    live.resize(live.size() / 2);  // free half, newest first
  }
  // Blocks made on one thread and freed on another join the freeing thread's list; a
  // thread that ends returns its list (checked by the sanitizer and leak builds).
  std::vector<Tensor> made;
  std::thread maker([&] {
    for (int i = 0; i < 100; ++i) made.push_back(full({int64_t(i % 40 + 1)}, 2.0));
  });
  maker.join();
  std::thread freer([&] {
    made.clear();
    for (int i = 0; i < 50; ++i)
      CHECK(sum(full({int64_t(i + 1)}, 1.0)).item<float>() == float(i + 1));
  });
  freer.join();
  Tensor after = full({16}, 3.0);
  CHECK(sum(after).item<float>() == 48.0f);
}

TEST_CASE("storage: small object blocks are aligned, never overlap, and survive reuse") {
  // detail::object_alloc backs TensorImpl, StorageImpl and tape entries (Note [Small CPU
  // blocks]): fill blocks of many sizes (some past the 1 KiB lists), free half, allocate
  // again, and check that every live block still holds its own bytes.
  struct Block {
    unsigned char* p;
    size_t n;
    unsigned char tag;
  };
  std::vector<Block> live;
  unsigned char next_tag = 1;
  auto make = [&](size_t n) {
    auto* p = static_cast<unsigned char*>(detail::object_alloc(n));
    CHECK(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t) == 0);
    std::memset(p, next_tag, n);
    live.push_back({p, n, next_tag++});
  };
  for (int round = 0; round < 4; ++round) {
    for (size_t n = 8; n <= 1300; n += 37) make(n);
    bool intact = true;
    for (const Block& b : live)
      for (size_t i = 0; i < b.n; ++i) intact = intact && b.p[i] == b.tag;
    CHECK(intact);
    for (size_t i = live.size() / 2; i < live.size(); ++i)
      detail::object_free(live[i].p, live[i].n);
    live.resize(live.size() / 2);
  }
  for (const Block& b : live) detail::object_free(b.p, b.n);
  // make_object: a shared_ptr whose object and counts share one such block.
  auto sp = detail::make_object<std::vector<int>>(3, 7);
  std::weak_ptr<std::vector<int>> w = sp;
  CHECK((*sp)[2] == 7);
  sp.reset();
  CHECK(w.expired());
}

TEST_CASE("storage: the CPU allocator aligns to 64 bytes; views share one version counter") {
  Tensor t = empty({3, 5});
  CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 == 0);
  Tensor v = t.transpose(0, 1);
  CHECK(v.storage() == t.storage());
  uint32_t before = t.version();
  v.fill_(1);
  CHECK(t.version() == before + 1);
  CHECK(v.version() == t.version());
}

TEST_CASE("tensor: metadata of a fresh tensor") {
  Tensor t = zeros({2, 3, 4});
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.sizes() == Shape{2, 3, 4});
  CHECK(t.strides() == Shape{12, 4, 1});
  CHECK(t.size(-1) == 4);
  CHECK(t.stride(0) == 12);
  CHECK(t.is_contiguous());
  CHECK(t.dtype() == DType::Float32);
  CHECK(t.device() == kCPU);
  CHECK(t.nbytes() == 96);
  CHECK(t.key_set() == DispatchKeySet(DispatchKey::CPU));
  CHECK_THROWS_WITH_AS(t.size(3),
                       "[size] dimension 3 is out of range for a 3-d tensor (expected a value in "
                       "[-3, 2])",
                       Error);
  Tensor undefined;
  CHECK_FALSE(undefined.defined());
  CHECK_THROWS_AS(undefined.numel(), Error);
}

TEST_CASE("tensor: data_ptr<T> is checked against the dtype") {
  Tensor t = zeros({2});
  CHECK(t.data_ptr<float>() != nullptr);
  CHECK_THROWS_WITH_AS(t.data_ptr<double>(),
                       "[data_ptr] data_ptr<T>() with T of dtype float64 was called on a float32 "
                       "tensor; use the matching T or convert first with .to(mt::DType::...)",
                       Error);
}

TEST_CASE("factories: negative sizes are refused") {
  CHECK_THROWS_WITH_AS(empty({2, -1}),
                       "[empty] negative size -1 in shape [2, -1]; sizes must be >= 0", Error);
  CHECK_THROWS_AS(zeros({-3}), Error);
  CHECK_THROWS_WITH_AS(empty(Shape(9, 1)), "[shape] tensors have at most 8 dimensions, got 9",
                       Error);
}

TEST_CASE("factories: every factory makes the values it promises") {
  CHECK(vals(zeros({3})) == std::vector<double>{0, 0, 0});
  CHECK(vals(ones({2}, {.dtype = DType::Int64})) == std::vector<double>{1, 1});
  CHECK(vals(full({2, 2}, 2.5)) == std::vector<double>{2.5, 2.5, 2.5, 2.5});
  CHECK(vals(arange(5)) == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(vals(arange(1, 2, 0.25, {.dtype = DType::Float64})) ==
        std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(vals(arange(5, 0, -2)) == std::vector<double>{5, 3, 1});
  CHECK_THROWS_AS(arange(0, 5, -1), Error);
  CHECK(vals(linspace(0, 1, 5, {.dtype = DType::Float64})) ==
        std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(linspace(0, 1, 0).numel() == 0);
  CHECK(vals(scalar_tensor(7)) == std::vector<double>{7});
  CHECK(scalar_tensor(7).dim() == 0);
  Tensor e = empty_like(zeros({4, 2}, {.dtype = DType::Float64}));
  CHECK(e.sizes() == Shape{4, 2});
  CHECK(e.dtype() == DType::Float64);
  CHECK(vals(full_like(e, -1)) == std::vector<double>(8, -1));
  Tensor v = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(v.sizes() == Shape{2, 3});
  CHECK_THROWS_WITH_AS(v.item<double>(),
                       "[item] item() needs a tensor with exactly one element, but this one has "
                       "shape [2, 3] (6 elements); index or reduce it first",
                       Error);
  CHECK(v.select(0, 1).select(0, 2).item<double>() == 6);
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), Error);
  Tensor f = from_vector<float>({1, 2}, {2}, {.dtype = DType::Float64});
  CHECK(f.dtype() == DType::Float64);
}

TEST_CASE("factories: rand and randn repeat for the same seed and look right") {
  manual_seed(42);
  Tensor a = rand({1000});
  Tensor an = randn({2000}, {.dtype = DType::Float64});
  manual_seed(42);
  Tensor b = rand({1000});
  Tensor bn = randn({2000}, {.dtype = DType::Float64});
  CHECK(equal(a, b));
  CHECK(equal(an, bn));
  Tensor c = rand({1000});
  CHECK_FALSE(equal(a, c));  // the generator advanced
  auto u = vals(a);
  double mean = 0;
  for (double x : u) {
    CHECK(x >= 0);
    CHECK(x < 1);
    mean += x / double(u.size());
  }
  CHECK(mean == doctest::Approx(0.5).epsilon(0.05));
  auto n = vals(an);
  double m = 0, var = 0;
  for (double x : n) m += x / double(n.size());
  for (double x : n) var += (x - m) * (x - m) / double(n.size());
  CHECK(std::abs(m) < 0.1);
  CHECK(var == doctest::Approx(1.0).epsilon(0.1));
  Generator g(7), h(7);
  CHECK(equal(rand({5}, {}, &g), rand({5}, {}, &h)));
  CHECK_THROWS_AS(rand({2}, {.dtype = DType::Int64}), Error);
}

TEST_CASE("version: the headers' macros are the library's mt::version()") {
  CHECK(std::string(mt::version()) ==
        fmt::format("{}.{}.{}", MT_VERSION_MAJOR, MT_VERSION_MINOR, MT_VERSION_PATCH));
  CHECK(MT_VERSION_NUMBER == MT_VERSION_MAJOR * 10000 + MT_VERSION_MINOR * 100 + MT_VERSION_PATCH);
  // The documented settings are reachable from minitensor.h (kernels/ops.h).
  const int threads = mt::num_threads();
  mt::set_num_threads(1);
  CHECK(mt::num_threads() == 1);
  mt::set_num_threads(threads);
  const bool tf32 = mt::cuda::allow_tf32();
  mt::cuda::set_allow_tf32(!tf32);
  CHECK(mt::cuda::allow_tf32() == !tf32);
  mt::cuda::set_allow_tf32(tf32);
}

TEST_CASE("random: Philox4x32-10 gives the Random123 known answers") {
  // The philox4x32 10 lines of kat_vectors in the Random123 distribution: counter, key, output.
  struct Kat {
    Philox4x32 ctr;
    unsigned k0, k1;
    Philox4x32 want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 got = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int w = 0; w < 4; ++w) CHECK(got.v[w] == k.want.v[w]);
  }
  // The stream's layout (Note [The random stream]): key = seed, counter = offset in words 0-1.
  const Philox4x32 b = philox_block(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull);
  const Philox4x32 direct = philox4x32_10({{0x243f6a88, 0x85a308d3, 0, 0}}, 0xa4093822, 0x299f31d0);
  for (int w = 0; w < 4; ++w) CHECK(b.v[w] == direct.v[w]);
  CHECK(philox_uniform01(0, 0) == 0.0);
  CHECK(philox_uniform01(0xffffffff, 0xffffffff) == 1.0 - 0x1p-53);
  // rand's first element for seed 0 is the first 64 bits of the all-zero known answer.
  Generator g(0);
  CHECK(rand({1}, {.dtype = DType::Float64}, &g).item<double>() ==
        double(0xe169c58d6627e8d5ull >> 11) * 0x1p-53);
}

TEST_CASE("random: different seeds are independent streams, not shifted copies") {
  // The splitmix64 hash this replaced made seed 1 the stream of seed 0 shifted by a constant.
  const uint64_t old_shift = 0xf98bf33101a7ab07ull;
  for (uint64_t c = 0; c < 64; ++c) {
    const Philox4x32 a = philox_block(1, c), b = philox_block(0, c + old_shift);
    CHECK_FALSE((a.v[0] == b.v[0] && a.v[1] == b.v[1]));
  }
  // No value of seed 1's first 4096 draws appears among seed 0's first 4096 (a shift by
  // less than 4096 would repeat 4095 of them), and the two are uncorrelated.
  Generator g0(0), g1(1);
  const std::vector<double> a = rand({4096}, {.dtype = DType::Float64}, &g0).to_vector<double>();
  const std::vector<double> b = rand({4096}, {.dtype = DType::Float64}, &g1).to_vector<double>();
  std::set<double> seen(a.begin(), a.end());
  int shared = 0;
  for (double x : b) shared += int(seen.count(x));
  CHECK(shared == 0);
  double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    ma += a[i] / double(a.size()), mb += b[i] / double(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  CHECK(std::abs(sab / std::sqrt(saa * sbb)) < 0.05);  // 3 standard errors at n = 4096
}

TEST_CASE("from_blob wraps user memory without copying and runs the deleter once") {
  std::vector<float> buf{1, 2, 3, 4, 5, 6};
  int deleted = 0;
  {
    Tensor t = from_blob(buf.data(), {2, 3}, DType::Float32, [&](void*) { ++deleted; });
    CHECK(t.data_ptr() == buf.data());
    t.select(0, 0).fill_(9);
    Tensor col = from_blob(buf.data(), {3}, {2}, DType::Float32);  // every other element
    CHECK(vals(col) == std::vector<double>{9, 9, 5});
  }
  CHECK(deleted == 1);
  CHECK(buf[0] == 9);
  CHECK(buf[3] == 4);
}

TEST_CASE("views: strides and values against hand-computed ones") {
  Tensor x = arange(24, {.dtype = DType::Float64}).view({2, 3, 4});
  SUBCASE("transpose") {
    Tensor t = x.transpose(0, 2);
    CHECK(t.sizes() == Shape{4, 3, 2});
    CHECK(t.strides() == Shape{1, 4, 12});
    CHECK_FALSE(t.is_contiguous());
    CHECK(t.storage() == x.storage());
    CHECK(vals(t.select(0, 1).select(0, 2)) == std::vector<double>{9, 21});
  }
  SUBCASE("permute") {
    Tensor p = x.permute({2, 0, 1});
    CHECK(p.sizes() == Shape{4, 2, 3});
    CHECK(p.strides() == Shape{1, 12, 4});
    CHECK_THROWS_WITH_AS(x.permute({0, 0, 1}), "[permute] dimension 0 appears twice in [0, 0, 1]",
                         Error);
  }
  SUBCASE("slice with step, narrow, select") {
    Tensor s = x.slice(2, 1, 4, 2);  // columns 1 and 3
    CHECK(s.sizes() == Shape{2, 3, 2});
    CHECK(s.strides() == Shape{12, 4, 2});
    CHECK(s.storage_offset() == 1);
    CHECK(vals(s.select(0, 1).select(0, 2)) == std::vector<double>{21, 23});
    Tensor n = x.narrow(1, 1, 2);
    CHECK(n.sizes() == Shape{2, 2, 4});
    CHECK(n.storage_offset() == 4);
    CHECK(x.slice(0, -1, 100).sizes() == Shape{1, 3, 4});
    CHECK_THROWS_WITH_AS(x.narrow(1, 2, 2),
                         "[narrow] start 2 and length 2 are out of range for dimension 1 of "
                         "size 3",
                         Error);
    CHECK_THROWS_WITH_AS(x.select(1, 3),
                         "[select] index 3 is out of range for dimension 1 of size 3", Error);
    CHECK(vals(x.select(-1, -1).select(0, 0)) == std::vector<double>{3, 7, 11});
  }
  SUBCASE("view of a view, and a view that cannot exist") {
    CHECK(x.view({6, 4}).view({-1}).sizes() == Shape{24});
    CHECK(x.view({4, -1}).sizes() == Shape{4, 6});
    Tensor t = x.transpose(1, 2);  // [2, 4, 3], strides [12, 1, 4]
    CHECK_THROWS_WITH_AS(t.view({2, 12}),
                         "[view] a tensor of shape [2, 4, 3] with strides [12, 1, 4] cannot be "
                         "viewed as shape [2, 12]: its elements are not laid out compatibly; use "
                         ".reshape() (which copies when it must) or .contiguous().view()",
                         Error);
    CHECK(t.view({2, 4, 3, 1}).strides() == Shape{12, 1, 4, 4});  // as torch computes it
    CHECK_THROWS_AS(t.view({8, 3}), Error);  // batch and rows do not merge either
  }
  SUBCASE("expand, squeeze, unsqueeze, flatten") {
    Tensor col = arange(3).view({3, 1});
    Tensor e = col.expand({2, 3, 4});
    CHECK(e.strides() == Shape{0, 1, 0});
    CHECK(vals(e.select(0, 1).select(0, 2)) == std::vector<double>{2, 2, 2, 2});
    CHECK(col.expand({-1, 5}).sizes() == Shape{3, 5});
    CHECK_THROWS_WITH_AS(col.expand({4, 4}),
                         "[expand] cannot expand shape [3, 1] to [4, 4]: dimension 0 has size 3, "
                         "and only size-1 dimensions can be expanded",
                         Error);
    CHECK(col.squeeze().sizes() == Shape{3});
    CHECK(col.squeeze(0).sizes() == Shape{3, 1});
    CHECK(col.unsqueeze(0).sizes() == Shape{1, 3, 1});
    CHECK(col.unsqueeze(-1).sizes() == Shape{3, 1, 1});
    CHECK(x.flatten().sizes() == Shape{24});
    CHECK(x.flatten(1).sizes() == Shape{2, 12});
    CHECK(x.flatten(0, 1).sizes() == Shape{6, 4});
  }
}

TEST_CASE("reshape views when it can and copies when it must") {
  Tensor x = arange(12, {.dtype = DType::Float64}).view({3, 4});
  Tensor r = x.reshape({2, 6});
  CHECK(r.storage() == x.storage());
  Tensor t = x.t();  // [4, 3], strides [1, 4]
  Tensor c = t.reshape({12});
  CHECK(c.storage() != x.storage());
  CHECK(vals(c) == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
}

TEST_CASE("contiguous copies only when needed; clone always copies") {
  Tensor x = arange(6).view({2, 3});
  CHECK(x.contiguous().is_same(x));
  Tensor t = x.t();
  Tensor c = t.contiguous();
  CHECK_FALSE(c.is_same(t));
  CHECK(c.is_contiguous());
  CHECK(vals(c) == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor k = x.clone();
  CHECK(k.storage() != x.storage());
  CHECK(equal(k, x));
}

TEST_CASE("copy_ between layouts and dtypes, with broadcasting") {
  Tensor src = arange(6, {.dtype = DType::Float64}).view({2, 3});
  Tensor dst = zeros({3, 2}, {.dtype = DType::Float16}).t();  // non-contiguous destination
  dst.copy_(src);
  CHECK(vals(dst) == vals(src));
  Tensor row = from_vector<double>({1, 2, 3});
  Tensor b = zeros({2, 3}, {.dtype = DType::Int64});
  b.copy_(row);
  CHECK(vals(b) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK_THROWS_WITH_AS(b.copy_(zeros({4})),
                       "[copy_] shapes [2, 3] and [4] cannot be broadcast: dimension 1 has sizes 3 "
                       "and 4; sizes must match or one of them must be 1",
                       Error);
  CHECK_THROWS_WITH_AS(row.copy_(b),
                       "[copy_] cannot copy a tensor of shape [2, 3] into one of shape [3]: the "
                       "source must have the destination's shape or broadcast to it",
                       Error);
  Tensor flags = zeros({3}, {.dtype = DType::Bool});
  flags.copy_(from_vector<double>({0, 0.5, -2}));
  CHECK(vals(flags) == std::vector<double>{0, 1, 1});
}

TEST_CASE("to(dtype) converts with rounding, and is a no-op for the same dtype") {
  Tensor x = from_vector<double>({1.0 / 3, 1e-8, 70000, -2.5});
  CHECK(x.to(DType::Float64).is_same(x));
  auto h = vals(x.to(DType::Float16));
  CHECK(h[0] == double(float(Half(float(1.0 / 3)))));
  CHECK(h[1] == 0);  // below float16's smallest subnormal
  CHECK(std::isinf(h[2]));
  CHECK(h[3] == -2.5);
  auto bf = vals(x.to(DType::BFloat16));
  CHECK(bf[2] == 70144);  // bfloat16 keeps 8 bits of mantissa
  CHECK(vals(from_vector<double>({2.7, -1.2}).to(DType::Int64)) == std::vector<double>{2, -1});
}

TEST_CASE("printing looks like PyTorch, with shape, dtype and device") {
  CHECK(from_vector<float>({1, 2, 3}).str() == "tensor([1., 2., 3.], shape=[3], dtype=float32)");
  CHECK(from_vector<double>({0.5, -1.25, 3}, {3}).str() ==
        "tensor([ 0.5000, -1.2500,  3.0000], shape=[3], dtype=float64)");
  CHECK(arange(6, {.dtype = DType::Int64}).view({2, 3}).str() ==
        "tensor([[0, 1, 2],\n        [3, 4, 5]], shape=[2, 3], dtype=int64)");
  CHECK(from_vector<double>({1e-6, 1}).str() ==
        "tensor([1.0000e-06, 1.0000e+00], shape=[2], dtype=float64)");
  CHECK(scalar_tensor(2.5).str() == "tensor(2.5000, shape=[], dtype=float32)");
  CHECK(zeros({0, 3}).str() == "tensor([], shape=[0, 3], dtype=float32)");
  CHECK(zeros({2}, {.dtype = DType::Bool}).str() ==
        "tensor([False, False], shape=[2], dtype=bool)");
  CHECK(zeros({2, 1, 2}).str() ==
        "tensor([[[0., 0.]],\n\n        [[0., 0.]]], shape=[2, 1, 2], dtype=float32)");
  std::string big = arange(2000).str();
  CHECK(big ==
        "tensor([   0.,    1.,    2., ..., 1997., 1998., 1999.], shape=[2000], "
        "dtype=float32)");
  Tensor m = arange(40 * 40).view({40, 40});
  std::string ms = m.str();
  CHECK(ms.find("...") != std::string::npos);
  CHECK(ms.find("1599.") != std::string::npos);
  CHECK(ms.find("800.") == std::string::npos);  // the middle is elided
  CHECK(fmt::format("{}", ones({1})) == "tensor([1.], shape=[1], dtype=float32)");
  std::ostringstream os;
  os << ones({1});
  CHECK(os.str() == "tensor([1.], shape=[1], dtype=float32)");
}

TEST_CASE("fake tensors carry metadata only; reading their data is an error") {
  Tensor f;
  {
    FakeMode mode;
    f = zeros({2, 3}, {.device = Device("cuda:0")});  // works without a GPU
  }
  CHECK(f.is_fake());
  CHECK(f.device() == Device("cuda:0"));
  CHECK(f.key_set() == DispatchKeySet(DispatchKey::Fake));
  CHECK(f.str() == "tensor(<fake>, shape=[2, 3], dtype=float32, device=cuda:0)");
  CHECK_THROWS_WITH_AS(f.data_ptr(),
                       "[data_ptr] cannot read the data of a fake tensor (shape [2, 3], float32, "
                       "cuda:0): fake tensors carry only metadata; run the op on a real tensor to "
                       "get values",
                       Error);
  CHECK_THROWS_AS(f.to_vector<float>(), Error);
  Tensor g = fake_like(zeros({4, 5}).t());
  CHECK(g.strides() == Shape{1, 5});
  CHECK(g.transpose(0, 1).is_fake());
  CHECK_FALSE(FakeMode::enabled());
}

TEST_CASE("empty_strided: the same checks for real and fake tensors") {
  Tensor real = empty_strided({2, 3}, {1, 2});
  CHECK(real.strides() == Shape{1, 2});
  CHECK(real.storage()->nbytes() == 6 * sizeof(float));
  const char* negative =
      "[empty_strided] negative stride -1 in strides [3, -1] is not supported; "
      "use strides >= 0";
  CHECK_THROWS_WITH_AS(empty_strided({2, 3}, {3, -1}), negative, Error);
  CHECK_THROWS_WITH_AS(empty_strided({2}, {1, 1}), doctest::Contains("different lengths"), Error);
  FakeMode mode;
  Tensor fake = empty_strided({2, 3}, {1, 2});
  CHECK(fake.is_fake());
  CHECK(fake.strides() == Shape{1, 2});
  CHECK_THROWS_WITH_AS(empty_strided({2, 3}, {3, -1}), negative, Error);
}

TEST_CASE("requires_grad: only floating tensors, and detach drops it") {
  Tensor x = zeros({2});
  x.requires_grad_();
  CHECK(x.requires_grad());
  CHECK(x.is_leaf());
  CHECK(x.key_set() == DispatchKeySet({DispatchKey::Autograd, DispatchKey::CPU}));
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage() == x.storage());
  CHECK_THROWS_WITH_AS(zeros({2}, {.dtype = DType::Int64}).requires_grad_(),
                       "[requires_grad_] only floating-point tensors can require gradients, but "
                       "this tensor is int64; convert it first with .to(mt::DType::Float32)",
                       Error);
  CHECK(ones({1}, {.requires_grad = true}).requires_grad());
}

TEST_CASE("allclose, max_abs_diff and equal") {
  Tensor a = from_vector<double>({1, 2, 3});
  Tensor b = from_vector<double>({1, 2, 3.000001});
  CHECK(allclose(a, b));
  CHECK_FALSE(allclose(a, b, 0, 1e-9));
  CHECK(max_abs_diff(a, b) == doctest::Approx(1e-6));
  CHECK_FALSE(equal(a, b));
  CHECK(equal(a, a.clone()));
  CHECK_FALSE(equal(a, a.to(DType::Float32)));
  Tensor n = from_vector<double>({NAN});
  CHECK_FALSE(allclose(n, n));
  CHECK(allclose(n, n, 1e-5, 1e-8, true));
  CHECK_FALSE(allclose(a, zeros({2})));
}

// ---- the CPU allocator's kept blocks (Note [Medium CPU blocks] in runtime/storage.cpp) ----

TEST_CASE("cpu allocator: a freed block is kept for the next tensor of its size, within bounds") {
  constexpr int64_t kMiB = int64_t(1) << 20;
  cpu_empty_cache();
  const CpuCacheStats s0 = cpu_cache_stats();
  CHECK(s0.blocks == 0);
  CHECK(s0.bytes == 0);
  if (!s0.enabled) {  // MT_NO_CPU_CACHING=1 (the next case runs this one so), or ASan
    { Tensor t = empty({65648}); }
    { Tensor t = empty({16}); }
    CHECK(cpu_cache_stats().blocks == 0);
    CHECK(cpu_cache_stats().bytes == 0);
    return;
  }
  // 65648 floats: 262,592 bytes, a size nothing else here makes
  void* p = nullptr;
  {
    Tensor t = empty({65648});
    p = t.data_ptr();
  }
  CHECK(cpu_cache_stats().bytes == s0.bytes + 262592);
  {
    Tensor t = empty({65648});
    CHECK(t.data_ptr() == p);  // the same block, no new pages
    CHECK(cpu_cache_stats().bytes == s0.bytes);
  }
  // 12 blocks of one size: 8 are kept (a size's bound), then 70 blocks of about 256 KiB,
  // each of its own size: the newest 64 are kept (the count's bound), the 8 pushed out
  {
    std::vector<Tensor> v;
    for (int i = 0; i < 12; ++i) v.push_back(empty({65648}));
  }
  CHECK(cpu_cache_stats().bytes == s0.bytes + 8 * 262592);
  std::vector<void*> ptrs;
  {
    std::vector<Tensor> v;
    for (int64_t i = 0; i < 70; ++i) {
      v.push_back(empty({65536 + 16 * i}));
      ptrs.push_back(v.back().data_ptr());
    }
  }  // freed in order, 0 first
  // kept: blocks 6 to 69, and small blocks of at most 272 KiB in all
  int64_t newest64 = 0;
  for (int64_t i = 6; i < 70; ++i) newest64 += (65536 + 16 * i) * 4;
  const CpuCacheStats s1 = cpu_cache_stats();
  CHECK(s1.bytes >= newest64);
  CHECK(s1.bytes <= newest64 + 272 * 1024);
  {
    Tensor last = empty({65536 + 16 * 69});
    CHECK(last.data_ptr() == ptrs[69]);
  }
  // five blocks of 8 MiB: the bytes stay within 32 MiB of medium blocks
  {
    std::vector<Tensor> v;
    for (int i = 0; i < 5; ++i) v.push_back(empty({2 * kMiB}));
  }
  CHECK(cpu_cache_stats().bytes >= 32 * kMiB);  // four of them
  CHECK(cpu_cache_stats().bytes <= 32 * kMiB + 272 * 1024);
  // over 8 MiB: freed at once, never kept
  const CpuCacheStats s2 = cpu_cache_stats();
  { Tensor big = empty({3 * kMiB}); }
  CHECK(cpu_cache_stats().bytes == s2.bytes);
  CHECK(cpu_cache_stats().blocks == s2.blocks);
  cpu_empty_cache();
  CHECK(cpu_cache_stats().bytes == 0);
  // another thread keeps its own (none yet)
  int64_t other = -1;
  std::thread([&] { other = cpu_cache_stats().blocks; }).join();
  CHECK(other == 0);
}

// MT_NO_CPU_CACHING is read once, when the library loads: the case above, run again in a
// new process with it set, must find the lists off and nothing kept.
TEST_CASE("cpu allocator: MT_NO_CPU_CACHING=1 keeps no block") {
  if (std::getenv("MT_NO_CPU_CACHING") != nullptr) {
    CHECK_FALSE(cpu_cache_stats().enabled);
    return;
  }
  const SelfRun r = run_self("MT_NO_CPU_CACHING=1", "cpu allocator:*");
  INFO(r.out);
  CHECK(r.exit_status == 0);
  CHECK(std::regex_search(r.out, std::regex(R"(test cases:\s+2 \|\s+2 passed)")));
}
