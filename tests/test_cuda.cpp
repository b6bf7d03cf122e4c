// SPDX-License-Identifier: MIT
// The CUDA runtime layer: driver loading, devices, streams, the caching allocator, copies.
// Cases marked "(gpu)" are skipped where no CUDA device is found; tests/main.cpp counts them
// and says why.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "helpers.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/hooks.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#ifdef MT_HAVE_CUDA
#include "runtime/cuda/driver.h"
#endif

namespace cuda = mt::cuda;

namespace {

constexpr size_t kMiB = size_t(1) << 20;
const mt::Device kCuda0("cuda:0");

}  // namespace

TEST_CASE("cuda: is_available, device_count and unavailable_reason agree") {
  CHECK(cuda::is_available() == cuda::unavailable_reason().empty());
  CHECK(cuda::is_available() == (cuda::device_count() > 0));
  CHECK(cuda::device_count() >= 0);
}

TEST_CASE("cuda: without a GPU every entry point says CUDA is unavailable and why" *
          doctest::skip(cuda::is_available())) {
  CHECK_FALSE(cuda::is_available());
  CHECK(cuda::device_count() == 0);
  const std::string reason = cuda::unavailable_reason();
  REQUIRE_FALSE(reason.empty());
  const std::string expected = "[cuda] CUDA is unavailable: " + reason;
  CHECK(error_of([] { cuda::caching_allocator(0); }) == expected);
  CHECK(error_of([] { mt::allocator_for(kCuda0); }) == expected);
  CHECK(error_of([] { cuda::allocator_stats(0); }) == expected);
  CHECK(error_of([] { cuda::empty_cache(0); }) == expected);
  CHECK(error_of([] { cuda::device_props(0); }) == expected);
  CHECK(error_of([] { cuda::synchronize(0); }) == expected);
  CHECK(error_of([] { cuda::EventTimer t(0); }) == expected);
  CHECK(error_of([] { mt::empty({4}, {.device = kCuda0}); }) == expected);
  // CUDA graphs: capture needs the device; queries answer without one.
  cuda::Graph graph;
  CHECK(error_of([&] { graph.capture_begin(0); }) == expected);
  CHECK_FALSE(graph.captured());
  CHECK(graph.device_index() == -1);
  CHECK(graph.num_nodes() == 0);
  CHECK(graph.pool_bytes() == 0);
  CHECK_FALSE(cuda::is_capturing(0));
  CHECK(error_of([] { cuda::memory_snapshot(0); }) == expected);
  CHECK(error_of([] { cuda::record_memory_history(true); }) == expected);
  CHECK(error_of([] { cuda::memory_history(0); }) == expected);
#ifdef MT_HAVE_CUDA
  CHECK(error_of([&] { graph.replay(); }) ==
        "[cuda] Graph::replay: nothing was captured; call capture_begin(device), queue the "
        "work, then capture_end");
#else
  CHECK(error_of([&] { graph.replay(); }) == expected);
  CHECK(error_of([&] { graph.capture_end(); }) == expected);
#endif
#ifdef MT_HAVE_CUDA
  CHECK(error_of([] { cuda::driver(); }) == expected);
  CHECK(error_of([] { cuda::DeviceGuard g(0); }) == expected);
  CHECK(error_of([] { cuda::current_stream(0); }) == expected);
  // The reason quotes the loader or the driver.
  const bool named = reason.starts_with("libcuda.so.1 could not be loaded: ") ||
                     reason.starts_with("cuInit failed: CUDA_ERROR_") ||
                     reason.starts_with("cuGetProcAddress_v2(") ||
                     reason.starts_with("libcuda.so.1 has no ") ||
                     reason.starts_with("the driver sees no CUDA device");
  CHECK_MESSAGE(named, reason);
#else
  CHECK(reason.find("-Dcuda=enabled") != std::string::npos);
#endif
}

TEST_CASE("cuda (gpu): device properties are sane" * doctest::skip(no_gpu())) {
  REQUIRE(cuda::device_count() >= 1);
  CHECK(cuda::driver_version() >= 12000);
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceProps& p = cuda::device_props(i);
    CAPTURE(p.name);
    CHECK_FALSE(p.name.empty());
    CHECK(p.major >= 5);
    CHECK(p.minor >= 0);
    CHECK(p.sm_count > 0);
    CHECK(p.total_memory > 256 * kMiB);
    CHECK(p.max_threads_per_block >= 512);
    CHECK(p.max_shared_per_block >= 16 * 1024);
    CHECK(p.max_shared_per_block_optin >= p.max_shared_per_block);
    CHECK(p.l2_bytes > 0);
    CHECK(p.warp_size == 32);
    CHECK(&cuda::device_props(i) == &p);  // queried once
  }
  const int n = cuda::device_count();
  CHECK(error_of([n] { cuda::device_props(n); }) ==
        fmt::format("[cuda] invalid device cuda:{}: this machine has {} CUDA device(s), cuda:0 "
                    "to cuda:{}",
                    n, n, n - 1));
  CHECK(error_of([] { cuda::caching_allocator(-1); }).starts_with("[cuda] invalid device cuda:-1"));
}

#ifdef MT_HAVE_CUDA
TEST_CASE("cuda (gpu): driver errors name the call and the driver's error" *
          doctest::skip(no_gpu())) {
  CHECK(error_of([] { cuda::check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"); }) ==
        "[cuda] cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  CUdevice dev = 0;
  const std::string msg = error_of([&] { MT_CU_CHECK(cuda::driver().cuDeviceGet(&dev, 1 << 20)); });
  CHECK(msg.starts_with("[cuda] cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE ("));
  CHECK_NOTHROW(cuda::check(CUDA_SUCCESS, "cuInit"));
}

TEST_CASE("cuda (gpu): DeviceGuard makes the primary context current, then restores" *
          doctest::skip(no_gpu())) {
  const cuda::DriverApi& api = cuda::driver();
  CUcontext before = nullptr, inside = nullptr, after = nullptr;
  MT_CU_CHECK(api.cuCtxSetCurrent(nullptr));
  MT_CU_CHECK(api.cuCtxGetCurrent(&before));
  {
    cuda::DeviceGuard guard(0);
    MT_CU_CHECK(api.cuCtxGetCurrent(&inside));
    cuda::DeviceGuard nested(0);  // already current: a no-op
  }
  MT_CU_CHECK(api.cuCtxGetCurrent(&after));
  CHECK(before == nullptr);
  CHECK(inside == cuda::primary_context(0));
  CHECK(inside != nullptr);
  CHECK(after == before);
}

TEST_CASE("cuda (gpu): each device has its own current stream, which can be replaced" *
          doctest::skip(no_gpu())) {
  CUstream own = cuda::current_stream(0);
  CHECK(own != nullptr);
  CHECK(cuda::current_stream(0) == own);
  CUstream other = nullptr;
  {
    cuda::DeviceGuard guard(0);
    MT_CU_CHECK(cuda::driver().cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  }
  {
    cuda::StreamGuard sg(0, other);
    CHECK(cuda::current_stream(0) == other);
    cuda::synchronize(0);
  }
  CHECK(cuda::current_stream(0) == own);
  cuda::set_current_stream(0, other);
  CHECK(cuda::current_stream(0) == other);
  cuda::set_current_stream(0, nullptr);
  CHECK(cuda::current_stream(0) == own);
  cuda::DeviceGuard guard(0);
  MT_CU_CHECK(cuda::driver().cuStreamDestroy(other));
}

TEST_CASE("cuda (gpu): bytes round trip host -> device -> host on the current stream" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  CHECK(a->device() == kCuda0);
  CHECK(a->allocate(0) == nullptr);
  const size_t n = 3 * kMiB + 7;
  std::vector<unsigned char> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i * 131 + 7);
  void* d = a->allocate(n);
  REQUIRE(d != nullptr);
  auto dptr = reinterpret_cast<CUdeviceptr>(d);
  CUstream s = cuda::current_stream(0);
  {
    cuda::DeviceGuard guard(0);
    const cuda::DriverApi& api = cuda::driver();
    MT_CU_CHECK(api.cuMemcpyHtoDAsync(dptr, in.data(), n, s));
    MT_CU_CHECK(api.cuMemsetD8Async(dptr + n - 7, 0xab, 7, s));
    MT_CU_CHECK(api.cuMemcpyDtoHAsync(out.data(), dptr, n, s));
    MT_CU_CHECK(api.cuStreamSynchronize(s));
  }
  CHECK(std::memcmp(in.data(), out.data(), n - 7) == 0);
  CHECK(out[n - 1] == 0xab);
  a->deallocate(d, n);
  a->deallocate(nullptr, 0);  // a no-op
}
#endif  // MT_HAVE_CUDA

TEST_CASE("caching allocator (gpu): a freed block is reused without the driver" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  CHECK(cuda::caching_allocator(0) == a);
  cuda::empty_cache(0);
  const cuda::AllocatorStats s0 = cuda::allocator_stats(0);
  void* p = a->allocate(1000);
  const cuda::AllocatorStats s1 = cuda::allocator_stats(0);
  CHECK(s1.driver_allocs == s0.driver_allocs + 1);
  CHECK(s1.cache_misses == s0.cache_misses + 1);
  CHECK(s1.allocated_bytes == s0.allocated_bytes + 1024);  // rounded to 512 bytes
  CHECK(s1.reserved_bytes == s0.reserved_bytes + 1024);
  a->deallocate(p, 1000);
  const cuda::AllocatorStats s2 = cuda::allocator_stats(0);
  CHECK(s2.allocated_bytes == s0.allocated_bytes);
  CHECK(s2.reserved_bytes == s1.reserved_bytes);  // cached, not freed
  CHECK(s2.driver_frees == s0.driver_frees);

  void* q = a->allocate(1000);
  const cuda::AllocatorStats s3 = cuda::allocator_stats(0);
  CHECK(q == p);
  CHECK(s3.cache_hits == s2.cache_hits + 1);
  CHECK(s3.driver_allocs == s2.driver_allocs);
  a->deallocate(q, 1000);

  // Steady state: the same sizes over and over cost no driver call.
  const auto step = [a] {
    void* x = a->allocate(5 * kMiB);
    void* y = a->allocate(100);
    a->deallocate(x, 5 * kMiB);
    a->deallocate(y, 100);
  };
  step();
  const cuda::AllocatorStats s4 = cuda::allocator_stats(0);
  CHECK(s4.driver_allocs <= s3.driver_allocs + 2);
  for (int i = 0; i < 100; ++i) step();
  const cuda::AllocatorStats s5 = cuda::allocator_stats(0);
  CHECK(s5.driver_allocs == s4.driver_allocs);
  CHECK(s5.cache_hits == s4.cache_hits + 200);
}

TEST_CASE("caching allocator (gpu): sizes round to 512 bytes below 1 MiB, to 2 MiB above" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  const auto grows_by = [&](size_t n) {
    cuda::empty_cache(0);  // so that the block comes from the driver, at the rounded size
    size_t before = cuda::allocator_stats(0).allocated_bytes;
    void* p = a->allocate(n);
    size_t grown = cuda::allocator_stats(0).allocated_bytes - before;
    a->deallocate(p, n);
    return grown;
  };
  CHECK(grows_by(1) == 512);
  CHECK(grows_by(512) == 512);
  CHECK(grows_by(513) == 1024);
  CHECK(grows_by(kMiB - 1) == kMiB);
  CHECK(grows_by(kMiB) == 2 * kMiB);
  CHECK(grows_by(2 * kMiB + 1) == 4 * kMiB);
}

TEST_CASE("caching allocator (gpu): a small request does not take a much larger block" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  cuda::empty_cache(0);
  void* big = a->allocate(64 * kMiB);
  a->deallocate(big, 64 * kMiB);
  const cuda::AllocatorStats s0 = cuda::allocator_stats(0);
  void* small = a->allocate(4 * kMiB);
  CHECK(small != big);
  CHECK(cuda::allocator_stats(0).driver_allocs == s0.driver_allocs + 1);
  void* again = a->allocate(40 * kMiB);  // within twice its size: reused
  CHECK(again == big);
  a->deallocate(small, 4 * kMiB);
  a->deallocate(again, 40 * kMiB);
}

#ifdef MT_HAVE_CUDA
TEST_CASE("caching allocator (gpu): a block freed on one stream is not reused on another" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  cuda::empty_cache(0);
  void* p = a->allocate(8 * kMiB);
  a->deallocate(p, 8 * kMiB);
  CUstream other = nullptr;
  {
    cuda::DeviceGuard guard(0);
    MT_CU_CHECK(cuda::driver().cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  }
  const cuda::AllocatorStats s0 = cuda::allocator_stats(0);
  void* q = nullptr;
  {
    cuda::StreamGuard sg(0, other);
    q = a->allocate(8 * kMiB);
    a->deallocate(q, 8 * kMiB);  // back to `other`'s free list
  }
  CHECK(q != p);
  CHECK(cuda::allocator_stats(0).driver_allocs == s0.driver_allocs + 1);
  void* r = a->allocate(8 * kMiB);  // the current stream's own block again
  CHECK(r == p);
  a->deallocate(r, 8 * kMiB);
  cuda::empty_cache(0);  // before the stream goes away
  cuda::DeviceGuard guard(0);
  MT_CU_CHECK(cuda::driver().cuStreamDestroy(other));
}
#endif

TEST_CASE("caching allocator (gpu): empty_cache returns cached blocks to the driver" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  void* keep = a->allocate(2 * kMiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a->allocate(6 * kMiB));
  for (void* b : blocks) a->deallocate(b, 6 * kMiB);
  const cuda::AllocatorStats s0 = cuda::allocator_stats(0);
  CHECK(s0.reserved_bytes >= s0.allocated_bytes + 4 * 6 * kMiB);
  cuda::empty_cache(0);
  const cuda::AllocatorStats s1 = cuda::allocator_stats(0);
  CHECK(s1.reserved_bytes == s1.allocated_bytes);
  CHECK(s1.allocated_bytes == s0.allocated_bytes);
  CHECK(s1.driver_frees >= s0.driver_frees + 4);
  a->deallocate(keep, 2 * kMiB);  // still valid after empty_cache
  cuda::empty_cache(0);
  CHECK(cuda::allocator_stats(0).reserved_bytes == cuda::allocator_stats(0).allocated_bytes);
}

TEST_CASE("caching allocator (gpu): peak stats follow allocations and reset" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  cuda::empty_cache(0);  // so that each block is exactly 4 MiB
  cuda::reset_peak_stats(0);
  const size_t base = cuda::allocator_stats(0).allocated_bytes;
  CHECK(cuda::allocator_stats(0).peak_allocated_bytes == base);
  void* x = a->allocate(4 * kMiB);
  void* y = a->allocate(4 * kMiB);
  void* z = a->allocate(4 * kMiB);
  a->deallocate(y, 4 * kMiB);
  a->deallocate(z, 4 * kMiB);
  CHECK(cuda::allocator_stats(0).peak_allocated_bytes == base + 12 * kMiB);
  CHECK(cuda::allocator_stats(0).allocated_bytes == base + 4 * kMiB);
  cuda::reset_peak_stats(0);
  CHECK(cuda::allocator_stats(0).peak_allocated_bytes == base + 4 * kMiB);
  a->deallocate(x, 4 * kMiB);
}

TEST_CASE("caching allocator (gpu): threads allocate and free at once" * doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  const size_t before = cuda::allocator_stats(0).allocated_bytes;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([a, t] {
      for (int i = 0; i < 200; ++i) {
        size_t n = size_t(512) << ((t + i) % 14);  // 512 B to 4 MiB
        void* p = a->allocate(n);
        a->deallocate(p, n);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(cuda::allocator_stats(0).allocated_bytes == before);
}

TEST_CASE("caching allocator (gpu): out of memory is a clear error and the allocator survives" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  void* cached = a->allocate(2 * kMiB);
  a->deallocate(cached, 2 * kMiB);  // something for the retry to release
  const cuda::AllocatorStats s0 = cuda::allocator_stats(0);
  const size_t tib = size_t(1) << 40;
  const std::string msg = error_of([&] { a->allocate(tib); });
  CHECK(
      msg.starts_with("[cuda] out of memory on cuda:0: tried to allocate 1.00 TiB "
                      "(1099511627776 bytes"));
  CHECK(msg.find("CUDA_ERROR_OUT_OF_MEMORY (out of memory)") != std::string::npos);
  CHECK(msg.find("cached blocks") != std::string::npos);
  const cuda::AllocatorStats s1 = cuda::allocator_stats(0);
  CHECK(s1.allocated_bytes == s0.allocated_bytes);
  CHECK(s1.reserved_bytes < s0.reserved_bytes);  // the cache was emptied for the retry
  void* p = a->allocate(kMiB);
  CHECK(p != nullptr);
  a->deallocate(p, kMiB);
  // Through a tensor factory, the same error.
  CHECK(error_of([] {
          mt::empty({int64_t(1) << 38}, {.device = kCuda0});
        }).starts_with("[cuda] out of memory on cuda:0: tried to allocate 1.00 TiB"));
}

TEST_CASE("cuda (gpu): EventTimer measures stream work" * doctest::skip(no_gpu())) {
  mt::Tensor big = mt::empty({int64_t(64) << 20}, {.device = kCuda0});  // 256 MiB
  cuda::EventTimer timer(0);
  timer.start();
  for (int i = 0; i < 4; ++i) cuda::fill(big, 0.0);
  timer.stop();
  const float ms = timer.elapsed_ms();
  CHECK(ms > 0.0f);
  CHECK(ms < 10000.0f);
  std::vector<cuda::EventTimer> many;
  for (int i = 0; i < 3; ++i) many.emplace_back(0);
  for (auto& t : many) {
    t.start();
    cuda::fill(big, 0.0);
    t.stop();
  }
  for (auto& t : many) CHECK(t.elapsed_ms() >= 0.0f);
}

TEST_CASE("cuda (gpu): tensors copy host -> device -> device -> host" * doctest::skip(no_gpu())) {
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.5f - 3.0f;
  mt::Tensor host = mt::from_vector(values, {10, 100});
  mt::Tensor dev = mt::empty({10, 100}, {.device = kCuda0});
  cuda::copy(dev, host);
  mt::Tensor dev2 = mt::empty({10, 100}, {.device = kCuda0});
  cuda::copy(dev2, dev);
  mt::Tensor back = mt::empty({10, 100});
  cuda::copy(back, dev2);
  CHECK(std::memcmp(back.data_ptr(), values.data(), values.size() * sizeof(float)) == 0);
  // Through Tensor's own API.
  CHECK(host.to(kCuda0).cpu().to_vector<float>() == values);
}

TEST_CASE("cuda (gpu): fill with zero is a memset" * doctest::skip(no_gpu())) {
  std::vector<double> ones(257, 1.0);
  mt::Tensor dev = mt::from_vector(ones, {257}, {.dtype = mt::DType::Float64, .device = kCuda0});
  cuda::fill(dev, 0.0);
  CHECK(dev.cpu().to_vector<double>() == std::vector<double>(257, 0.0));
  mt::Tensor z = mt::zeros({3, 5}, {.dtype = mt::DType::Int64, .device = kCuda0});
  CHECK(z.cpu().to_vector<int64_t>() == std::vector<int64_t>(15, 0));
}

TEST_CASE("cuda (gpu): copies and fills without a device kernel say what is not supported" *
          doctest::skip(no_gpu())) {
  // Take out any installed kernels for the duration of the case.
  cuda::CopyKernel copy_k = cuda::set_copy_kernel(nullptr);
  cuda::FillKernel fill_k = cuda::set_fill_kernel(nullptr);
  mt::Tensor a = mt::zeros({4, 6}, {.device = kCuda0});
  mt::Tensor h = mt::zeros({4, 6}, {.dtype = mt::DType::Float64});
  // Host to device converting: the bytes move, then the conversion needs the kernel.
  CHECK(error_of([&] { cuda::copy(a, h); }) ==
        "[cuda::copy] not yet supported on cuda:0: a dtype-converting copy (float64 contiguous "
        "-> float32 contiguous); no device copy kernel is installed yet");
  mt::Tensor b = mt::zeros({6, 4}, {.device = kCuda0});
  mt::Tensor bt = b.t();
  CHECK(error_of([&] { cuda::copy(a, bt); }) ==
        "[cuda::copy] not yet supported on cuda:0: a strided copy (float32 strided -> float32 "
        "contiguous); no device copy kernel is installed yet");
  CHECK(error_of([&] { cuda::fill(a, 1.5); }) ==
        "[cuda::fill] not yet supported on cuda:0: filling a contiguous float32 tensor with "
        "1.5; only a contiguous fill with zero works until a device fill kernel is installed");
  mt::Tensor c1 = mt::zeros({2, 2});
  mt::Tensor c2 = mt::zeros({2, 2});
  CHECK(error_of([&] { cuda::copy(c1, c2); }) ==
        "[cuda::copy] neither tensor is on CUDA (cpu and cpu); copy CPU tensors with copy_");
  cuda::set_copy_kernel(copy_k);
  cuda::set_fill_kernel(fill_k);
}

TEST_CASE("caching allocator (gpu): once every tensor is gone, empty_cache returns everything" *
          doctest::skip(no_gpu())) {
  // Memory the library keeps for the whole process (a thread's cuBLAS workspace, made by
  // the first matmul of an earlier test) stays allocated: measure against it.
  cuda::empty_cache(0);
  const cuda::AllocatorStats before = cuda::allocator_stats(0);
  {
    mt::Tensor t = mt::zeros({1000}, {.device = kCuda0});
    CHECK(cuda::allocator_stats(0).allocated_bytes >= before.allocated_bytes + 4000);
  }
  cuda::empty_cache(0);
  const cuda::AllocatorStats s = cuda::allocator_stats(0);
  CHECK(s.allocated_bytes == before.allocated_bytes);
  CHECK(s.reserved_bytes == s.allocated_bytes);  // nothing cached
  CHECK(s.driver_allocs - s.driver_frees == before.driver_allocs - before.driver_frees);
}

// ---- CUDA graphs (runtime/cuda/cuda.h) -----------------------------------------------------

namespace {

// The work the graph cases capture: silu, add, matmul (cuBLAS) and a device-to-device copy
// into `out`; returns the matmul's own output.
mt::Tensor graph_work(const mt::Tensor& x, const mt::Tensor& w, const mt::Tensor& out) {
  mt::Tensor h = mt::add(mt::silu(x), x);
  mt::Tensor m = mt::matmul(h, w);
  out.copy_(m);
  return m;
}

mt::Tensor graph_reference(const mt::Tensor& x, const mt::Tensor& w) {
  return mt::matmul(mt::add(mt::silu(x), x), w).cpu();
}

}  // namespace

TEST_CASE("cuda graph (gpu): a replay computes what the eager ops compute, in place" *
          doctest::skip(no_gpu())) {
  mt::Tensor x = mt::randn({64, 48}).to(kCuda0);
  mt::Tensor w = mt::randn({48, 32}).to(kCuda0);
  mt::Tensor out = mt::empty({64, 32}, {.device = kCuda0});
  graph_work(x, w, out);  // warm-up: kernels compiled and loaded, cuBLAS's handle made
  const mt::Tensor ref = graph_reference(x, w);
  cuda::fill(out, 0.0);
  cuda::synchronize(0);
  const cuda::AllocatorStats before = cuda::allocator_stats(0);

  cuda::Graph g;
  CHECK_FALSE(cuda::is_capturing(0));
  g.capture_begin(0);
  CHECK(cuda::is_capturing(0));
  CHECK(g.device_index() == 0);
  CHECK_FALSE(g.captured());
  mt::Tensor y = graph_work(x, w, out);
  g.capture_end();
  CHECK_FALSE(cuda::is_capturing(0));
  REQUIRE(g.captured());
  // silu, add, the GEMM (one kernel or more) and the memcpy at least.
  CHECK(g.num_nodes() >= 4);
  CHECK(g.pool_bytes() >= 2 * 64 * 32 * sizeof(float));
  const cuda::AllocatorStats during = cuda::allocator_stats(0);
  CHECK(during.graph_pool_bytes == g.pool_bytes());
  CHECK(during.reserved_bytes >= before.reserved_bytes + g.pool_bytes());
  // Recorded, not run: out is still all zero.
  CHECK(out.cpu().to_vector<float>() == std::vector<float>(64 * 32, 0.0f));

  const void* y_at = y.data_ptr();
  g.replay();
  CHECK(mt::max_abs_diff(out.cpu(), ref) < 1e-4);
  CHECK(mt::max_abs_diff(y.cpu(), ref) < 1e-4);

  // New contents in the same input storage: the next replay reads them.
  std::vector<float> nx(64 * 48);
  for (size_t i = 0; i < nx.size(); ++i) nx[i] = float(i % 17) * 0.25f - 2.0f;
  cuda::copy(x, mt::from_vector(nx, {64, 48}));
  const mt::Tensor ref2 = graph_reference(x, w);
  CHECK(mt::max_abs_diff(ref2, ref) > 0.1);
  cuda::fill(out, 0.0);
  const cuda::AllocatorStats s_before = cuda::allocator_stats(0);
  for (int i = 0; i < 3; ++i) g.replay();
  // Replays allocate nothing.
  const cuda::AllocatorStats s_after = cuda::allocator_stats(0);
  CHECK(s_after.driver_allocs == s_before.driver_allocs);
  CHECK(s_after.cache_hits == s_before.cache_hits);
  CHECK(s_after.allocated_bytes == s_before.allocated_bytes);
  CHECK(s_after.graph_pool_bytes == during.graph_pool_bytes);
  CHECK(mt::max_abs_diff(out.cpu(), ref2) < 1e-4);
  CHECK(mt::max_abs_diff(y.cpu(), ref2) < 1e-4);
  CHECK(y.data_ptr() == y_at);
}

TEST_CASE("cuda graph (gpu): the private pool is returned when the graph goes" *
          doctest::skip(no_gpu())) {
  mt::Tensor x = mt::randn({4096}).to(kCuda0);
  mt::silu(x);  // warm-up
  cuda::synchronize(0);
  const cuda::AllocatorStats s0 = cuda::allocator_stats(0);
  size_t pool = 0;
  const void* temp_at = nullptr;
  cuda::AllocatorStats s_kept;
  {
    cuda::Graph g;
    g.capture_begin(0);
    {
      mt::Tensor t = mt::silu(x);  // a temporary: freed during the capture...
      temp_at = t.data_ptr();
    }
    mt::Tensor u = mt::silu(x);  // ...and its block reused by the next allocation
    CHECK(u.data_ptr() == temp_at);
    mt::Tensor v = mt::add(u, x);
    g.capture_end();
    pool = g.pool_bytes();
    CHECK(pool == 2 * 16384);  // two blocks of 4096 floats: the temporary's was reused
    const cuda::AllocatorStats s1 = cuda::allocator_stats(0);
    CHECK(s1.graph_pool_bytes == s0.graph_pool_bytes + pool);
    CHECK(s1.allocated_bytes == s0.allocated_bytes + pool);
    u = mt::Tensor();
    v = mt::Tensor();
    // Freed outputs stay in the pool: replays still write there.
    const cuda::AllocatorStats s2 = cuda::allocator_stats(0);
    CHECK(s2.allocated_bytes == s0.allocated_bytes);
    CHECK(s2.reserved_bytes == s1.reserved_bytes);
    CHECK(g.pool_bytes() == pool);
    // Nor does an eager allocation on the device's stream take them.
    {
      mt::Tensor e = mt::silu(x);
      CHECK(e.data_ptr() != temp_at);
    }
    g.replay();
    cuda::empty_cache(0);  // leaves the pool alone
    s_kept = cuda::allocator_stats(0);
    CHECK(s_kept.graph_pool_bytes == s0.graph_pool_bytes + pool);
  }
  const cuda::AllocatorStats s3 = cuda::allocator_stats(0);
  CHECK(s3.graph_pool_bytes == s0.graph_pool_bytes);
  CHECK(s3.allocated_bytes == s0.allocated_bytes);
  CHECK(s3.driver_frees == s_kept.driver_frees + 2);
  CHECK(s3.reserved_bytes == s_kept.reserved_bytes - pool);
  cuda::empty_cache(0);
  CHECK(cuda::allocator_stats(0).reserved_bytes == cuda::allocator_stats(0).allocated_bytes);
}

TEST_CASE("cuda graph (gpu): an output held past the graph stays valid" * doctest::skip(no_gpu())) {
  mt::Tensor x = mt::randn({1000}).to(kCuda0);
  const mt::Tensor ref = mt::silu(x).cpu();
  mt::Tensor y;
  {
    cuda::Graph g;
    g.capture_begin(0);
    y = mt::silu(x);
    g.capture_end();
    g.replay();
  }  // waits for the replay; y's block joins the general allocator
  CHECK(mt::max_abs_diff(y.cpu(), ref) == 0.0);
  CHECK(cuda::allocator_stats(0).graph_pool_bytes == 0);
  const size_t allocated = cuda::allocator_stats(0).allocated_bytes;
  y = mt::Tensor();
  CHECK(cuda::allocator_stats(0).allocated_bytes == allocated - 4096);
}

TEST_CASE("cuda graph (gpu): misuse and synchronizing calls are clear errors" *
          doctest::skip(no_gpu())) {
  mt::Tensor x = mt::randn({256}).to(kCuda0);
  mt::silu(x);
  cuda::Graph g;
  CHECK(error_of([&] { g.replay(); }) ==
        "[cuda] Graph::replay: nothing was captured; call capture_begin(device), queue the "
        "work, then capture_end");
  CHECK(error_of([&] { g.capture_end(); }) ==
        "[cuda] Graph::capture_end without capture_begin: call capture_begin(device) first");
  CHECK(error_of([&] {
          g.capture_begin(cuda::device_count());
        }).starts_with("[cuda] invalid device cuda:"));

  g.capture_begin(0);
  CHECK(error_of([&] { g.capture_begin(0); }) ==
        "[cuda] Graph::capture_begin: this graph is already capturing cuda:0; call "
        "capture_end first");
  cuda::Graph other;
  CHECK(error_of([&] { other.capture_begin(0); }) ==
        "[cuda] Graph::capture_begin: cuda:0 is already capturing another graph; one capture "
        "at a time per device: call capture_end on that graph first");
  CHECK(error_of([&] { g.replay(); }) ==
        "[cuda] Graph::replay during the capture: call capture_end first");
  mt::Tensor y = mt::silu(x);
  g.capture_end();
  CHECK(error_of([&] { g.capture_begin(0); }) ==
        "[cuda] Graph::capture_begin: this graph was captured already (on cuda:0); a graph is "
        "captured once: replay it, or capture into a new mt::cuda::Graph");
  CHECK(error_of([&] { g.capture_end(); }) ==
        "[cuda] Graph::capture_end: this graph's capture has ended already; replay it");

  // Synchronizing calls during a capture throw, and the capture then fails with the first.
  cuda::Graph bad;
  bad.capture_begin(0);
  mt::Tensor z = mt::silu(x);
  const std::string sync = error_of([] { cuda::synchronize(0); });
  CHECK(sync ==
        "[cuda] synchronize: cuda:0 is capturing a CUDA graph (mt::cuda::Graph), and this "
        "call would break the capture; call it after Graph::capture_end (replays are "
        "asynchronous: synchronize after replay to wait for one)");
  CHECK(error_of([&] {
          z.cpu();
        }).starts_with("[cuda] copy to the host: cuda:0 is capturing a CUDA graph"));
  CHECK(error_of([&] {
          cuda::copy(z, mt::zeros({256}));
        }).starts_with("[cuda] copy from the host: cuda:0 is capturing a CUDA graph"));
  CHECK(error_of([] {
          cuda::empty_cache(0);
        }).starts_with("[cuda] empty_cache: cuda:0 is capturing a CUDA graph"));
  CHECK(error_of([&] { g.replay(); }) ==
        "[cuda] Graph::replay: cuda:0 is capturing another graph; replay after its "
        "capture_end");
  CHECK(cuda::is_capturing(0));
  CHECK(error_of([&] { bad.capture_end(); }) ==
        "[cuda] Graph::capture_end: the capture of cuda:0 failed, and the graph is left "
        "empty: " +
            sync);
  CHECK_FALSE(bad.captured());
  CHECK(bad.pool_bytes() == 0);
  CHECK_FALSE(cuda::is_capturing(0));
  // The device and the graph are usable again.
  CHECK_NOTHROW(z.cpu());  // never computed, but a valid block
  bad.capture_begin(0);
  mt::Tensor z2 = mt::silu(x);
  bad.capture_end();
  bad.replay();
  CHECK(mt::max_abs_diff(z2.cpu(), mt::silu(x).cpu()) == 0.0);
  g.replay();
  CHECK(mt::max_abs_diff(y.cpu(), mt::silu(x).cpu()) == 0.0);
}

TEST_CASE("cuda graph (gpu): a graph dropped during its capture ends it" *
          doctest::skip(no_gpu())) {
  mt::Tensor x = mt::randn({256}).to(kCuda0);
  mt::silu(x);
#ifdef MT_HAVE_CUDA
  CUstream before = cuda::current_stream(0);
#endif
  try {
    cuda::Graph g;
    g.capture_begin(0);
    mt::Tensor y = mt::silu(x);
    throw std::runtime_error("the user's code failed mid-capture");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(cuda::is_capturing(0));
#ifdef MT_HAVE_CUDA
  CHECK(cuda::current_stream(0) == before);
#endif
  CHECK(cuda::allocator_stats(0).graph_pool_bytes == 0);
  cuda::synchronize(0);
  CHECK(mt::max_abs_diff(mt::silu(x).cpu(), mt::silu(x.cpu())) < 1e-6);
}

// ---- allocator snapshot and history (runtime/cuda/cuda.h) ---------------------------------

TEST_CASE("caching allocator (gpu): the history records allocations, reuse and empty_cache" *
          doctest::skip(no_gpu())) {
  mt::Allocator* a = cuda::caching_allocator(0);
  cuda::empty_cache(0);
  void* before = a->allocate(1000);  // not recorded
  cuda::record_memory_history(true, 1000, 0);
  CHECK(cuda::memory_history(0).empty());
  void* p = nullptr;
  {
    cuda::MemoryContext outer("outer");
    cuda::MemoryContext inner("step 1");
    p = a->allocate(3000);  // a new block
  }
  a->deallocate(p, 3000);
  void* q = a->allocate(2500);  // the same block again, no context
  a->deallocate(q, 2500);
  a->deallocate(before, 1000);
  cuda::empty_cache(0);
  const std::vector<cuda::MemoryEvent> h = cuda::memory_history(0);
  std::vector<std::string> kinds;
  for (const auto& e : h) kinds.push_back(cuda::memory_event_name(e.kind));
  CHECK(kinds == std::vector<std::string>{"driver_alloc", "alloc", "free", "cache_hit", "alloc",
                                          "free", "free", "empty_cache", "driver_free",
                                          "driver_free"});
  REQUIRE(h.size() == 10);
  CHECK(h[0].address == reinterpret_cast<uintptr_t>(p));
  CHECK(h[0].size == 3072);  // rounded to 512 bytes
  CHECK(h[1].op == "step 1");
  CHECK(h[3].address == h[0].address);
  CHECK(h[4].op.empty());
  CHECK(h[6].address == reinterpret_cast<uintptr_t>(before));
#ifdef MT_HAVE_CUDA
  CHECK(h[0].stream == reinterpret_cast<uintptr_t>(cuda::current_stream(0)));
#endif
  for (size_t i = 1; i < h.size(); ++i) CHECK(h[i].time_us >= h[i - 1].time_us);

  // Allocations inside ops can be named by the op, after the thread's context.
  mt::Tensor x = mt::zeros({100}, {.device = kCuda0});
  cuda::record_memory_history(true, 1000, 0);
  {
    cuda::MemoryContext phase("phase");
    mt::NameAllocationsByOp by_op;
    mt::Tensor y = mt::silu(x);
  }
  std::vector<std::string> names;
  for (const auto& e : cuda::memory_history(0))
    if (e.kind == cuda::MemoryEvent::Kind::Alloc) names.push_back(e.op);
  CHECK(names == std::vector<std::string>{"phase / mt::silu"});
  x = mt::Tensor();

  // Bounded: the last max_events only. Off: nothing more.
  cuda::record_memory_history(true, 3, 0);
  for (int i = 0; i < 4; ++i) a->deallocate(a->allocate(512), 512);
  CHECK(cuda::memory_history(0).size() == 3);
  cuda::record_memory_history(false, 3, 0);
  a->deallocate(a->allocate(512), 512);
  CHECK(cuda::memory_history(0).empty());
}

TEST_CASE("caching allocator (gpu): a snapshot shows blocks allocated, cached and in a graph pool" *
          doctest::skip(no_gpu())) {
  cuda::empty_cache(0);
  mt::Tensor x = mt::randn({4096}).to(kCuda0);
  mt::silu(x);  // warm-up; its output is now a cached block
  cuda::record_memory_history(true, 1000, 0);
  mt::Tensor y;
  cuda::Graph g;
  {
    cuda::MemoryContext c("graph");
    g.capture_begin(0);
    y = mt::silu(x);
    mt::Tensor t = mt::silu(y);  // a temporary: cached in the pool after
    (void)t;
  }
  g.capture_end();
  const cuda::MemorySnapshot snap = cuda::memory_snapshot(0);
  CHECK(snap.device == 0);
  CHECK(snap.stats.graph_pool_bytes == g.pool_bytes());
  size_t allocated = 0, cached = 0, pool = 0, reserved = 0;
  bool found_y = false;
  for (const auto& b : snap.blocks) {
    reserved += b.size;
    if (b.state == cuda::MemoryBlock::State::Allocated) allocated += b.size;
    if (b.state == cuda::MemoryBlock::State::Cached) cached += b.size;
    if (b.state == cuda::MemoryBlock::State::Pool) pool += b.size;
    if (b.address == reinterpret_cast<uintptr_t>(y.data_ptr())) {
      found_y = true;
      CHECK(b.state == cuda::MemoryBlock::State::Allocated);
      CHECK(b.pool != 0);
      CHECK(b.op == "graph");
      CHECK(b.size == 16384);
    }
  }
  CHECK(found_y);
  CHECK(allocated == snap.stats.allocated_bytes);
  CHECK(reserved == snap.stats.reserved_bytes);
  CHECK(pool == 16384);    // t's block
  CHECK(cached >= 16384);  // the warm-up's output
  for (size_t i = 1; i < snap.blocks.size(); ++i)
    CHECK(snap.blocks[i].address > snap.blocks[i - 1].address);
  cuda::record_memory_history(false, 1, 0);
}
