// SPDX-License-Identifier: MIT
// The CUDA runtime layer: driver loading, devices, streams, the caching allocator, copies.
// Cases marked "(gpu)" are skipped where no CUDA device is found; tests/main.cpp counts them
// and says why.
#include <doctest/doctest.h>

#include "helpers.h"

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda.h"
#include "runtime/error.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"
#ifdef MT_HAVE_CUDA
#include "runtime/cuda/driver.h"
#endif

namespace cuda = mt::cuda;

namespace {

bool no_gpu() { return !cuda::is_available(); }


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
  {
    mt::Tensor t = mt::zeros({1000}, {.device = kCuda0});
    CHECK(cuda::allocator_stats(0).allocated_bytes >= 4000);
  }
  cuda::empty_cache(0);
  const cuda::AllocatorStats s = cuda::allocator_stats(0);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.reserved_bytes == 0);
  CHECK(s.driver_frees == s.driver_allocs);
}
