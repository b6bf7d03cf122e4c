// SPDX-License-Identifier: MIT
// The JIT layer: NVRTC compiles of every embedded kernel (no GPU needed), the disk
// cache's consistency (corruption, LRU, concurrent processes), and the device code
// itself, run on the CPU through a small emulation of the CUDA grid. Cases marked
// "(gpu)" run the same kernels on cuda:0 and are skipped where there is none; cases
// that need NVRTC are skipped only where libnvrtc cannot be loaded.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "helpers.h"
#include "kernels/cuda_device/layout.h"
#include "kernels/cuda_host/names.h"
#include "kernels/elementwise_rows.h"
#include "kernels/jit/builtin.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/embedded.h"
#include "kernels/jit/module.h"
#include "kernels/jit/nvrtc.h"
#include "kernels/jit/sha256.h"
#include "kernels/ops/folders.h"
#include "kernels/ops/silu/silu.h"
#include "runtime/cuda/cuda.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/philox.h"
#include "runtime/tensor.h"
#ifdef MT_HAVE_CUDA
#include "runtime/cuda/driver.h"
#endif

// The device code, compiled as host C++: one "thread" at a time walks the grid.
// The kernels are grid-stride loops without shared memory or barriers, so running
// their threads one after another computes exactly what the GPU computes (with
// the host's expf and the software float16/bfloat16 conversions of common.cuh).
namespace emu {
struct Dim {
  unsigned x = 1, y = 1, z = 1;
};
Dim threadIdx, blockIdx, blockDim, gridDim;
namespace mt {
using ::mt::ForeachTable;
using ::mt::kForeachChunk;
using ::mt::kMaxKernelDims;
using ::mt::kMaxKernelOperands;
using ::mt::Philox4x32;
using ::mt::philox_block;
using ::mt::philox_uniform;
using ::mt::philox_uniform01;
using ::mt::philox_uniform_bits;
using ::mt::StridedLayout;
}  // namespace mt
// Warp shuffles exist only on the GPU: reduce_rows compiles here but is not run.
template <typename T>
T __shfl_down_sync(unsigned, T v, int) {
  return v;
}
#define __global__
#define __device__
#define __forceinline__ inline
#include "kernels/cuda_device/copy.cu"
#include "kernels/cuda_device/elementwise.cu"
#include "kernels/cuda_device/random.cu"
#include "kernels/cuda_device/reduce.cu"
#include "kernels/ops/silu/silu.cu"
#undef __global__
#undef __device__
#undef __forceinline__
// Every row's functor type, declared (kOwnKernels rows have none: theirs stay incomplete).
namespace mt::op {
#define MT_EW_DECLARE(Id, ...) struct Id;
MT_ELEMENTWISE_OPS(MT_EW_DECLARE)
#undef MT_EW_DECLARE
}  // namespace mt::op

template <typename F>
void launch(::mt::jit::LaunchShape s, F&& kernel) {
  gridDim = {s.grid.x, 1, 1};
  blockDim = {s.block.x, 1, 1};
  for (unsigned b = 0; b < s.grid.x; ++b)
    for (unsigned t = 0; t < s.block.x; ++t) {
      blockIdx = {b, 0, 0};
      threadIdx = {t, 0, 0};
      kernel();
    }
}
}  // namespace emu

namespace fs = std::filesystem;
using namespace mt::jit;
using mt::DType;
using mt::StridedLayout;
using mt::gpu::kSiluDTypes;
using mt::gpu::kSiluUnroll;
using mt::gpu::launch_silu_bwd;
using mt::gpu::launch_silu_fwd;
using mt::gpu::silu_name_expression;
using mt::gpu::SiluKernel;

namespace {

// Every embedded kernel file with all its name expressions: the shared ones
// (gpu::all_kernel_files) and each op folder's (kernels/ops/folders.def).
std::vector<EmbeddedKernelFile> every_kernel_file() {
  std::vector<EmbeddedKernelFile> files = mt::gpu::all_kernel_files();
  for (const mt::ops::OpFolder& f : mt::ops::op_folders())
    for (EmbeddedKernelFile& k : f.kernel_files()) files.push_back(std::move(k));
  return files;
}

// A fresh directory under /tmp, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_test_jit_XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    REQUIRE(p != nullptr);
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

// Sets (or unsets, with nullptr) an environment variable for one scope.
struct EnvGuard {
  std::string name;
  bool had = false;
  std::string old;
  EnvGuard(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) had = true, old = v;
    if (value)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ~EnvGuard() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), std::streamsize(data.size()));
}
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file()) out.push_back(it->path().filename().string());
  return out;
}
void set_mtime(const std::string& path, double seconds_ago) {
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  struct timespec t[2];
  t[0] = t[1] = {now.tv_sec - time_t(seconds_ago), 0};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
}

// A tiny kernel; a different tag gives a different source, hence a different key.
CompileRequest tiny_request(int tag, int arch = 90) {
  CompileRequest r;
  r.name = "tiny.cu";
  r.source = "template <typename T>\n__global__ void tiny(T* p) { p[threadIdx.x] = T(" +
             std::to_string(tag) + "); }\n";
  r.name_expressions = {"tiny<float>"};
  r.arch = arch;
  return r;
}

bool is_elf_cubin(const std::string& b) {
  // ELF magic, 64-bit, e_machine EM_CUDA (190) at offset 18.
  return b.size() > 64 && b.starts_with("\177ELF") && b[4] == 2 &&
         (uint8_t(b[18]) | uint8_t(b[19]) << 8) == 190;
}

// ---- reference math in float64 ----

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double silu_grad_ref(double g, double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return g * s * (1.0 + x * (1.0 - s));
}

template <typename T>
double to_double(T v) {
  return double(float(v));
}
template <>
double to_double(float v) {
  return v;
}
template <>
double to_double(double v) {
  return v;
}

// Absolute error allowed for a result of magnitude `ref` whose inputs have scale `scale`.
template <typename T>
double tolerance(double ref, double scale) {
  if constexpr (std::is_same_v<T, double>) return 16 * 0x1p-52 * (std::abs(ref) + scale) + 1e-300;
  if constexpr (std::is_same_v<T, float>) return 8 * 0x1p-23 * (std::abs(ref) + scale) + 1e-37;
  if constexpr (std::is_same_v<T, mt::Half>)
    return 0x1p-10 * std::abs(ref) + 1e-5 * scale + 0x1p-24;
  return 0x1p-7 * std::abs(ref) + 1e-5 * scale + 1e-38;  // bfloat16
}

// Inputs spread over the interesting range, with the edge values first.
template <typename T>
std::vector<T> make_inputs(size_t n, uint32_t seed) {
  const double edges[] = {0.0, -0.0, 1.0, -1.0, -1.2785, 5.0, -5.0, 20.0, -20.0, 80.0, -80.0};
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-12.0, 12.0);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(i < std::size(edges) ? edges[i] : dist(gen));
  return v;
}

template <typename T>
struct emu_type {
  using type = T;
};
template <>
struct emu_type<mt::Half> {
  using type = emu::mt::Half;
};
template <>
struct emu_type<mt::BFloat16> {
  using type = emu::mt::BFloat16;
};
template <typename T>
using emu_t = typename emu_type<T>::type;
// A plain array (std::vector<bool> has no data()).
template <typename T>
struct HostArray {
  std::unique_ptr<T[]> p;
  size_t n = 0;
  explicit HostArray(size_t count, T value = T()) : p(new T[count]), n(count) {
    std::fill(p.get(), p.get() + n, value);
  }
  T* data() { return p.get(); }
  const T* data() const { return p.get(); }
  T& operator[](size_t i) { return p[i]; }
  const T& operator[](size_t i) const { return p[i]; }
  size_t size() const { return n; }
};

template <typename T>
emu_t<T>* as_emu(T* p) {
  return reinterpret_cast<emu_t<T>*>(p);
}
template <typename T>
const emu_t<T>* as_emu(const T* p) {
  return reinterpret_cast<const emu_t<T>*>(p);
}

}  // namespace

TEST_SUITE("jit") {
  // ---------------------------------------------------------------- building blocks

  TEST_CASE("jit: sha256 matches the FIPS 180-4 examples, whole or in pieces") {
    CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(to_hex(sha256("abc")) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(to_hex(sha256(two_blocks)) ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const std::string million(1000000, 'a');
    CHECK(to_hex(sha256(million)) ==
          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    Sha256 h;
    for (size_t i = 0; i < two_blocks.size(); i += 7)
      h.update(std::string_view(two_blocks).substr(i, 7));
    CHECK(h.finish() == sha256(two_blocks));
    CHECK(Sha256().field("ab").field("c").finish() != Sha256().field("a").field("bc").finish());
  }

  TEST_CASE("jit: the .cu files are embedded, and every kernel file lists its name expressions") {
    const auto names = embedded_source_names();
    for (const char* n : {"common.cuh", "copy.cu", "layout.h", "silu.cu"})
      CHECK(std::find(names.begin(), names.end(), n) != names.end());
    CHECK(has_embedded_source("silu.cu"));
    CHECK_FALSE(has_embedded_source("nope.cu"));
    CHECK(embedded_source("silu.cu").find("__global__ void silu_fwd_vec") !=
          std::string_view::npos);
    CHECK(error_of([] { embedded_source("nope.cu"); }) ==
          "[jit] no embedded source named 'nope.cu'; the embedded sources are: common.cuh, "
          "copy.cu, elementwise.cu, layout.h, philox.h, pointwise.cuh, random.cu, reduce.cu, "
          "silu.cu, softmax.cu");
    // A new .cu file without an entry in all_kernel_files() (or its op folder's
    // kernel_files()) would go untested.
    const auto kernels = every_kernel_file();
    for (std::string_view n : names) {
      if (!n.ends_with(".cu")) continue;
      CHECK_MESSAGE(std::any_of(kernels.begin(), kernels.end(),
                                [&](const EmbeddedKernelFile& k) { return k.file == n; }),
                    n << " has no entry in gpu::all_kernel_files() or an op folder's "
                         "kernel_files()");
    }
    auto file = [&](std::string_view name) {
      auto it = std::find_if(kernels.begin(), kernels.end(),
                             [&](const EmbeddedKernelFile& k) { return k.file == name; });
      REQUIRE(it != kernels.end());
      return *it;
    };
    CHECK(file("silu.cu").name_expressions.size() == 24);   // 6 kernels x 4 dtypes
    CHECK(file("copy.cu").name_expressions.size() == 120);  // fill 2 x 6, copy_cast 3 x 36
    CHECK(silu_name_expression(SiluKernel::FwdVec, DType::BFloat16) ==
          "silu_fwd_vec<mt::BFloat16, 2>");
    CHECK(copy_cast_name_expression(DType::Int64, DType::Float16, true) ==
          "copy_cast_strided<long long, mt::Half>");
    CHECK(fill_name_expression(DType::Bool, false) == "fill<bool>");
    CHECK(copy_cast_vec_name_expression(DType::BFloat16, DType::Float32) ==
          "copy_cast_vec<mt::BFloat16, float>");
    // the vector cast's pack: 16 bytes of the narrower type, at most 8 elements
    CHECK(copy_cast_vec_elements(DType::BFloat16, DType::Float32) == 8);
    CHECK(copy_cast_vec_elements(DType::Float32, DType::Float64) == 4);
    CHECK(copy_cast_vec_elements(DType::Bool, DType::Int64) == 8);
    CHECK(copy_cast_vec_elements(DType::Float64, DType::Float64) == 2);
  }

  TEST_CASE("jit: NVRTC availability is reported with a reason") {
    if (!nvrtc_available()) MESSAGE("NVRTC cases are skipped: " << nvrtc_unavailable_reason());
    CHECK(nvrtc_available() == nvrtc_unavailable_reason().empty());
    if (nvrtc_available()) {
      CHECK(nvrtc_version().major >= 12);
      CHECK(nvrtc_library_path().find("libnvrtc") != std::string::npos);
    } else {
      CHECK(error_of([] { compile("", "x.cu", {}, {}, 90); }).starts_with("[jit] "));
    }
  }

  TEST_CASE("jit: make_strided_layout drops size-1 dims and merges contiguous ones") {
    const int64_t sizes[] = {2, 3, 4}, contig[] = {12, 4, 1};
    StridedLayout l = make_strided_layout(sizes, {contig, contig});
    CHECK(l.ndim == 1);
    CHECK(l.sizes[0] == 24);
    CHECK(l.strides[0][0] == 1);
    CHECK(l.strides[1][0] == 1);

    const int64_t tsizes[] = {3, 1, 4}, out[] = {4, 4, 1}, transposed[] = {1, 99, 3};
    l = make_strided_layout(tsizes, {out, transposed});
    CHECK(l.ndim == 2);
    CHECK((l.sizes[0] == 3 && l.sizes[1] == 4));
    CHECK((l.strides[0][0] == 4 && l.strides[0][1] == 1));
    CHECK((l.strides[1][0] == 1 && l.strides[1][1] == 3));

    const int64_t bsizes[] = {5, 6}, bout[] = {6, 1}, broadcast[] = {0, 1};
    l = make_strided_layout(bsizes, {bout, broadcast});
    CHECK(l.ndim == 2);

    const int64_t one[] = {1, 1}, ones_stride[] = {7, 7};
    l = make_strided_layout(one, {ones_stride});
    CHECK((l.ndim == 1 && l.sizes[0] == 1));

    std::vector<int64_t> nine(9, 2), alternating(9);
    for (int d = 0; d < 9; ++d)
      alternating[size_t(d)] = (d % 2) ? int64_t(1) << (2 * d) : int64_t(1) << (20 + d);
    CHECK(error_of([&] { make_strided_layout(nine, {alternating}); }) ==
          "[jit] a strided kernel handles up to 8 dims after merging; this layout has 9");
  }

  TEST_CASE(
      "jit: launch shapes: 256 threads; at most 8 blocks a SM, uncapped for SiLU's vec kernels") {
    CHECK(elementwise_launch_shape(0, 132).grid.x == 1);
    CHECK(elementwise_launch_shape(1000, 132).grid.x == 4);
    CHECK(elementwise_launch_shape(int64_t(1) << 28, 132).grid.x == 132 * 8);
    CHECK(elementwise_launch_shape(1000, 132).block.x == 256);
    // SiLU's vec kernels: one block per 256 items, uncapped (Note [SiLU's launch shape]).
    CHECK(vec_launch_shape(0).grid.x == 1);
    CHECK(vec_launch_shape(1000).grid.x == 4);
    CHECK(vec_launch_shape(int64_t(1) << 28).grid.x == (1u << 20));
    CHECK(vec_launch_shape(int64_t(1) << 50).grid.x == 0x7fffffffu);
    CHECK(vec_launch_shape(1000).block.x == 256);
    alignas(16) char buf[32];
    CHECK(aligned16({buf, buf + 16}));
    CHECK_FALSE(aligned16({buf, buf + 4}));
  }

  // ---------------------------------------------------------------- NVRTC

  TEST_CASE(
      "jit: every embedded kernel compiles to an ELF CUBIN for sm_80 and sm_90 with its "
      "lowered names (skipped only without libnvrtc)" *
      doctest::skip(no_nvrtc())) {
    // Chunks of a file's name expressions, compiled on every core: NVRTC compiles
    // distinct programs concurrently (about 11 s of CPU per arch for all of them).
    struct Job {
      EmbeddedKernelFile file;
      int arch;
      CompileResult result;
      std::string error;
    };
    std::vector<Job> jobs;
    constexpr size_t kChunk = 12;
    // The sanitizer build checks the host code around NVRTC (sources, options, lowered
    // names) on each file's first chunk for sm_90; NVRTC itself is not instrumented, and
    // the plain build (CI runs both) compiles everything.
#if defined(__SANITIZE_ADDRESS__)
    constexpr bool kSample = true;
    MESSAGE("sanitizer build: each file's first " << kChunk << " kernels for sm_90 only");
#else
    constexpr bool kSample = false;
#endif
    for (const auto& f : every_kernel_file())
      for (int arch : {80, 90})
        for (size_t at = 0; at < f.name_expressions.size(); at += kChunk) {
          if (kSample && (arch != 90 || at > 0)) continue;
          EmbeddedKernelFile part{f.file, {}};
          for (size_t i = at; i < std::min(at + kChunk, f.name_expressions.size()); ++i)
            part.name_expressions.push_back(f.name_expressions[i]);
          jobs.push_back({part, arch, {}, ""});
        }
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t)
      threads.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
          Job& j = jobs[i];
          try {
            j.result = compile(embedded_source(j.file.file), j.file.file, j.file.name_expressions,
                               default_options(), j.arch);
          } catch (const std::exception& e) {
            j.error = e.what();
          }
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& j : jobs) {
      CAPTURE(j.file.file);
      CAPTURE(j.arch);
      REQUIRE(j.error == "");
      CHECK(j.result.target == "sm_" + std::to_string(j.arch));
      CHECK(j.result.is_cubin());
      CHECK(is_elf_cubin(j.result.binary));
      CHECK(j.result.log == "");  // no warnings in our own kernels
      REQUIRE(j.result.lowered_names.size() == j.file.name_expressions.size());
      for (size_t i = 0; i < j.file.name_expressions.size(); ++i) {
        const auto& l = j.result.lowered_names[i];
        CAPTURE(l.expression);
        CHECK(l.expression == j.file.name_expressions[i]);
        CHECK(l.lowered.starts_with("_Z"));
        CHECK(j.result.binary.find(l.lowered + '\0') != std::string::npos);  // in the symbol table
        CHECK(j.result.lowered_name(l.expression) == l.lowered);
      }
    }
    // silu.cu, sm_90, first chunk (the sanitizer build's sample keeps it)
    const auto silu = std::find_if(jobs.begin(), jobs.end(), [](const Job& j) {
      return j.file.file == "silu.cu" && j.arch == 90;
    });
    REQUIRE(silu != jobs.end());
    const CompileResult& silu90 = silu->result;
    CHECK(silu90.lowered_name("silu_fwd<float>") == "_Z8silu_fwdIfEvPKT_PS0_x");
    CHECK(error_of([&] { silu90.lowered_name("silu_fwd<int>"); })
              .starts_with("[jit] 'silu_fwd<int>' was not compiled into 'silu.cu' (sm_90); add it "
                           "to the name expressions (compiled: silu_fwd<float>, "));
  }

  TEST_CASE(
      "jit: an arch NVRTC cannot emit CUBIN for gets PTX of the newest older one, and the "
      "vec kernels load and store 16 bytes at a time" *
      doctest::skip(no_nvrtc())) {
    const std::vector<int> archs = nvrtc_supported_archs();
    REQUIRE(!archs.empty());
    CHECK(std::is_sorted(archs.begin(), archs.end()));
    const int newest = archs.back();
    CHECK(nvrtc_target(newest) == "sm_" + std::to_string(newest));
    CHECK(nvrtc_target(newest + 1) == "compute_" + std::to_string(newest));
    CHECK(error_of([&] {
            nvrtc_target(archs.front() - 1);
          }).find("cannot target sm_" + std::to_string(archs.front() - 1)) != std::string::npos);

    std::vector<std::string> vec;
    for (DType t : kSiluDTypes)
      for (SiluKernel k : {SiluKernel::FwdVec, SiluKernel::BwdVec})
        vec.push_back(silu_name_expression(k, t));
    const CompileResult r =
        compile(embedded_source("silu.cu"), "silu.cu", vec, default_options(), newest + 1);
    CHECK(r.target == "compute_" + std::to_string(newest));
    CHECK_FALSE(r.is_cubin());
    REQUIRE(!r.binary.empty());
    CHECK(r.binary.back() == '\0');
    const std::string ptx = r.binary;
    CHECK(ptx.find(".target sm_" + std::to_string(newest)) != std::string::npos);
    for (const auto& l : r.lowered_names) {
      CAPTURE(l.expression);
      const size_t begin = ptx.find(".entry " + l.lowered + "(");
      REQUIRE(begin != std::string::npos);
      const std::string body = ptx.substr(begin, ptx.find(".entry ", begin + 1) - begin);
      CHECK(body.find("ld.global.nc.v") != std::string::npos);
      CHECK((body.find("st.global.v4") != std::string::npos ||
             body.find("st.global.v2.f64") != std::string::npos));
      // Precise math: no approximate division (the default; --use_fast_math would add it).
      CHECK(body.find("div.approx") == std::string::npos);
    }
  }

  TEST_CASE("jit: a compile error shows NVRTC's log and the source lines around it" *
            doctest::skip(no_nvrtc())) {
    const std::string src =
        "// a kernel with a typo\n"
        "__global__ void broken(float* y) {\n"
        "  y[threadIdx.x] = undefined_thing;\n"
        "}\n";
    const std::string err = error_of([&] { compile(src, "broken.cu", {}, default_options(), 90); });
    CHECK(
        err.starts_with("[jit] NVRTC failed to compile 'broken.cu' for sm_90:\n"
                        " broken.cu(3): error: identifier \"undefined_thing\" is undefined\n"));
    CHECK(err.find("   2 | __global__ void broken(float* y) {\n"
                   " > 3 |   y[threadIdx.x] = undefined_thing;\n"
                   "   4 | }\n") != std::string::npos);
    CHECK(err.find("options: --gpu-architecture=sm_90 -std=c++17 -default-device -lineinfo") !=
          std::string::npos);

    // In a header: the lines come from the header.
    const std::string err2 = error_of([] {
      compile("#include \"helper.cuh\"\n__global__ void k(float* y) { y[0] = helper(1.f); }\n",
              "user.cu", {"k"}, default_options(), 90,
              {{"helper.cuh",
                "// helper\n__device__ float helper(float x) {\n  return x * missing;\n}\n"}});
    });
    CHECK(err2.find(" helper.cuh(3): error: identifier \"missing\" is undefined") !=
          std::string::npos);
    CHECK(err2.find(" > 3 |   return x * missing;") != std::string::npos);

    const std::string err3 = error_of([] {
      compile("__global__ void k(float*) {}", "ok.cu", {"no_such<float>"}, default_options(), 90);
    });
    CHECK(err3.find("note: each name expression must name a __global__ function") !=
          std::string::npos);

    CHECK(
        error_of([] { compile("__global__ void k() {}", "ok.cu", {}, {"--bogus-option"}, 90); }) ==
        "[jit] nvrtcCompileProgram failed for 'ok.cu' (sm_90): NVRTC_ERROR_INVALID_OPTION\n"
        "nvrtc: error: unrecognized option --bogus-option found");
    CHECK(error_of([] { compile("__global__ void k() {}", "ok.cu", {}, {"-arch=sm_80"}, 90); }) ==
          "[jit] option '-arch=sm_80' for 'ok.cu': pass the architecture as the arch argument (and "
          "arch_specific for sm_90a), not as an option");
    // Warnings of a successful compile stay in the log.
    const CompileResult w = compile("__global__ void k() { int unused_var = 3; }", "warn.cu", {"k"},
                                    default_options(), 90);
    CHECK(w.log.find("warn.cu(1): warning") != std::string::npos);
  }

  TEST_CASE(
      "jit: the cache key changes with source, name, options, arch, name expressions and "
      "headers" *
      doctest::skip(no_nvrtc())) {
    const CompileRequest base = tiny_request(1);
    const std::string k = cache_key(base);
    CHECK(k.size() == 64);
    CHECK(k.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(cache_key(base) == k);
    auto changed = [&](auto&& edit) {
      CompileRequest r = base;
      edit(r);
      return cache_key(r);
    };
    CHECK(changed([](CompileRequest& r) { r.source += " "; }) != k);
    CHECK(changed([](CompileRequest& r) { r.name = "other.cu"; }) != k);
    CHECK(changed([](CompileRequest& r) { r.options.push_back("-DFOO=1"); }) != k);
    CHECK(changed([](CompileRequest& r) { r.options = {"-std=c++17"}; }) != k);
    CHECK(changed([](CompileRequest& r) { r.arch = 80; }) != k);
    CHECK(changed([](CompileRequest& r) { r.name_expressions.push_back("tiny<double>"); }) != k);
    CHECK(changed([](CompileRequest& r) { r.name_expressions = {"tiny<double>"}; }) != k);
    CHECK(changed([](CompileRequest& r) { r.headers.push_back({"extra.cuh", "// x"}); }) != k);
    // Fields do not run into each other.
    CHECK(changed([](CompileRequest& r) { r.name_expressions = {"tiny<float>", ""}; }) != k);
    CHECK(changed([](CompileRequest& r) { r.arch_specific = true; }) != k);
  }

  TEST_CASE("jit cache: an sm_90 and an sm_90a CUBIN of one source are two entries" *
            doctest::skip(no_nvrtc())) {
    CHECK(nvrtc_target(90, true) == "sm_90a");
    CHECK(error_of([] { nvrtc_target(86, true, "k.cu"); }) ==
          "[jit] 'k.cu' asks for the arch-specific target, which exists from sm_90a on; this "
          "device is sm_86: compile it without arch_specific (and without the Hopper-only "
          "instructions) or run it on a compute capability 9.0 or later GPU");
    TempDir dir;
    KernelCache cache({.dir = dir.path});
    const CompileRequest plain = tiny_request(1);
    CompileRequest specific = plain;
    specific.arch_specific = true;
    std::vector<std::string> lines;
    mt::dispatcher().set_log_sink([&](std::string_view l) { lines.emplace_back(l); });
    cache.set_log(true);
    const auto a = cache.get(specific);
    cache.set_log(false);
    mt::dispatcher().set_log_sink(nullptr);
    const auto p = cache.get(plain);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].starts_with("[jit] compile    tiny.cu [tiny<float>] for sm_90a, "));
    CHECK(a->target == "sm_90a");
    CHECK(p->target == "sm_90");
    CHECK(is_elf_cubin(a->binary));
    CHECK(cache.stats().misses == 2);
    std::vector<std::string> targets;
    for (const auto& e : cache.list()) {
      CHECK(e.valid);
      targets.push_back(e.target);
    }
    std::sort(targets.begin(), targets.end());
    CHECK(targets == std::vector<std::string>{"sm_90", "sm_90a"});
    // An sm_90a CUBIN stored under the sm_90 request's key is refused (and deleted) when that
    // request loads it, though its checksum and key are right.
    REQUIRE(cache.store(cache_key(plain), *a, &plain));
    CHECK_FALSE(cache.load(cache_key(plain), &plain).has_value());
    CHECK(cache.stats().corrupt_files == 1);
    CHECK(cache.list().size() == 1);
  }

  // ---------------------------------------------------------------- the disk cache

  TEST_CASE("jit cache: a miss compiles and stores, a hit comes from memory, then from disk" *
            doctest::skip(no_nvrtc())) {
    TempDir dir;
    const CompileRequest req = tiny_request(1);
    const std::string key = cache_key(req);
    std::shared_ptr<const CompileResult> first;
    {
      KernelCache cache({.dir = dir.path});
      first = cache.get(req);
      CHECK(cache.stats().misses == 1);
      CHECK(cache.stats().disk_writes == 1);
      CHECK(cache.stats().compile_ms > 0);
      CHECK(fs::exists(cache.path_for(key)));
      CHECK(cache.get(req) == first);  // the same object
      CHECK(cache.stats().memory_hits == 1);
      CHECK(cache.stats().misses == 1);
    }
    KernelCache cache({.dir = dir.path});  // a new process, in effect
    const auto again = cache.get(req);
    CHECK(cache.stats().disk_hits == 1);
    CHECK(cache.stats().misses == 0);
    CHECK(again->binary == first->binary);
    CHECK(again->target == "sm_90");
    CHECK(again->name == "tiny.cu");
    REQUIRE(again->lowered_names.size() == 1);
    CHECK(again->lowered_names[0].expression == "tiny<float>");
    CHECK(again->lowered_names[0].lowered == first->lowered_names[0].lowered);
    CHECK(std::abs(again->compile_ms - first->compile_ms) < 0.01);

    const auto entries = cache.list();
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].key == key);
    CHECK(entries[0].name == "tiny.cu");
    CHECK(entries[0].target == "sm_90");
    CHECK(entries[0].valid);
    CHECK(entries[0].size_bytes == fs::file_size(cache.path_for(key)));
    CHECK(entries[0].age_s < 60);
    CHECK(cache.disk_bytes() == entries[0].size_bytes);

    // MT_LOG=jit (set_log here): one line a get, naming the level that served it.
    std::vector<std::string> lines;
    mt::dispatcher().set_log_sink([&](std::string_view l) { lines.emplace_back(l); });
    cache.set_log(true);
    cache.get(req);
    KernelCache other({.dir = dir.path, .log = true});
    other.get(req);
    other.get(tiny_request(1, 80));
    cache.set_log(false);
    cache.get(req);
    mt::dispatcher().set_log_sink(nullptr);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == fmt::format("[jit] memory hit tiny.cu [tiny<float>] for sm_90 (key {})",
                                  key.substr(0, 16)));
    CHECK(lines[1].starts_with("[jit] disk hit   tiny.cu [tiny<float>] for sm_90, "));
    CHECK(lines[2].starts_with("[jit] compile    tiny.cu [tiny<float>] for sm_80, "));
    CHECK(lines[2].ends_with(
        fmt::format(" ms (key {})", cache_key(tiny_request(1, 80)).substr(0, 16))));

    // Another arch is another entry.
    cache.get(tiny_request(1, 80));
    CHECK(cache.list().size() == 2);
    cache.clear();
    CHECK(cache.list().empty());
    CHECK(files_in(dir.path).empty());
  }

  TEST_CASE(
      "jit cache: a truncated or corrupted file is detected, deleted and recompiled, never "
      "loaded" *
      doctest::skip(no_nvrtc())) {
    TempDir dir;
    KernelCache cache({.dir = dir.path});
    const CompileRequest req = tiny_request(2);
    const std::string key = cache_key(req);
    const std::string path = cache.path_for(key);
    const auto good = cache.get(req);
    const std::string bytes = read_bytes(path);
    REQUIRE(bytes.size() > 200);
    const size_t payload_at = bytes.find("\177ELF");
    REQUIRE(payload_at != std::string::npos);

    struct Damage {
      const char* what;
      std::function<std::string(std::string)> apply;
      const char* problem;
    };
    auto flip = [](size_t at) {
      return [at](std::string s) {
        s[at] = char(s[at] ^ 0x10);
        return s;
      };
    };
    const std::vector<Damage> damages = {
        {"truncated to half", [](std::string s) { return s.substr(0, s.size() / 2); }, "truncated"},
        {"truncated inside the header", [](std::string s) { return s.substr(0, 10); },
         "truncated header"},
        {"empty", [](std::string) { return std::string(); }, "truncated header"},
        {"one byte short", [](std::string s) { return s.substr(0, s.size() - 1); }, "truncated"},
        {"trailing garbage", [](std::string s) { return s + "xx"; }, "trailing bytes"},
        {"a flipped payload byte", flip(payload_at + 100), "checksum mismatch"},
        {"a flipped last byte", flip(bytes.size() - 1), "checksum mismatch"},
        {"a flipped metadata byte", flip(payload_at - 5), "checksum mismatch"},
        {"a flipped checksum byte", flip(100), "checksum mismatch"},
        {"a flipped key byte", flip(40), "key mismatch"},
        {"a flipped magic byte", flip(0), "bad magic"},
        {"another format version", flip(8), "unknown format version"},
    };
    for (const auto& d : damages) {
      CAPTURE(d.what);
      REQUIRE(cache.store(key, *good));
      write_bytes(path, d.apply(bytes));
      const auto entries = cache.list();
      REQUIRE(entries.size() == 1);
      CHECK_FALSE(entries[0].valid);
      CHECK(entries[0].problem == d.problem);
      const uint64_t corrupt = cache.stats().corrupt_files;
      CHECK_FALSE(cache.load(key).has_value());
      CHECK(cache.stats().corrupt_files == corrupt + 1);
      CHECK_FALSE(fs::exists(path));
    }

    // Through get(): a fresh cache finds the damaged file, recompiles and rewrites it.
    write_bytes(path, flip(payload_at + 100)(bytes));
    KernelCache fresh({.dir = dir.path});
    const auto res = fresh.get(req);
    CHECK(fresh.stats().corrupt_files == 1);
    CHECK(fresh.stats().disk_hits == 0);
    CHECK(fresh.stats().misses == 1);
    CHECK(res->binary == good->binary);
    CHECK(fresh.list().at(0).valid);
    CHECK(fresh.load(key)->binary == good->binary);
  }

  TEST_CASE(
      "jit cache: the directory comes from MT_KERNEL_CACHE, XDG_CACHE_HOME or HOME, and "
      "MT_KERNEL_CACHE=0 turns the disk off") {
    TempDir dir;
    {
      EnvGuard a("MT_KERNEL_CACHE", dir.sub("explicit").c_str()),
          b("MT_KERNEL_CACHE_MAX_MB", nullptr);
      CHECK(CacheConfig::from_env().dir == dir.sub("explicit"));
      CHECK(CacheConfig::from_env().max_bytes == uint64_t(256) << 20);
    }
    {
      EnvGuard a("MT_KERNEL_CACHE", nullptr), b("XDG_CACHE_HOME", "/xdg");
      CHECK(CacheConfig::from_env().dir == "/xdg/minitensor/kernels");
    }
    {
      EnvGuard a("MT_KERNEL_CACHE", nullptr), b("XDG_CACHE_HOME", nullptr), c("HOME", "/home/u");
      CHECK(CacheConfig::from_env().dir == "/home/u/.cache/minitensor/kernels");
    }
    {
      EnvGuard a("MT_KERNEL_CACHE", nullptr), b("XDG_CACHE_HOME", nullptr), c("HOME", nullptr);
      CHECK(CacheConfig::from_env().dir == "");
    }
    {
      EnvGuard a("MT_KERNEL_CACHE_MAX_MB", "3");
      CHECK(CacheConfig::from_env().max_bytes == uint64_t(3) << 20);
    }
    {
      EnvGuard a("MT_KERNEL_CACHE_MAX_MB", "lots");
      CHECK(
          error_of([] { CacheConfig::from_env(); }) ==
          "[jit] MT_KERNEL_CACHE_MAX_MB='lots' is not a size in MiB; set it to a whole number such "
          "as 256, or unset it");
    }
    if (no_nvrtc()) return;
    EnvGuard a("MT_KERNEL_CACHE", "0"), b("XDG_CACHE_HOME", dir.path.c_str()),
        c("HOME", dir.path.c_str());
    const CacheConfig config = CacheConfig::from_env();
    CHECK(config.dir == "");
    KernelCache cache(config);
    CHECK_FALSE(cache.disk_enabled());
    const auto r = cache.get(tiny_request(3));
    CHECK(is_elf_cubin(r->binary));
    CHECK(cache.get(tiny_request(3)) == r);
    CHECK(cache.stats().misses == 1);
    CHECK(cache.stats().memory_hits == 1);
    CHECK(cache.stats().disk_writes == 0);
    CHECK_FALSE(cache.store(cache_key(tiny_request(3)), *r));
    CHECK(cache.list().empty());
    CHECK(files_in(dir.path).empty());
  }

  TEST_CASE("jit cache: the disk cache stays under its bound by evicting the least recently used" *
            doctest::skip(no_nvrtc())) {
    TempDir dir;
    std::vector<CompileRequest> reqs;
    std::vector<std::string> paths;
    KernelCache first({.dir = dir.path});
    for (int tag : {10, 11, 12, 13}) {
      reqs.push_back(tiny_request(tag));
      paths.push_back(first.path_for(cache_key(reqs.back())));
    }
    for (int i = 0; i < 3; ++i) first.get(reqs[size_t(i)]);  // A, B, C
    set_mtime(paths[0], 300);
    set_mtime(paths[1], 200);
    set_mtime(paths[2], 100);
    const uint64_t entry = fs::file_size(paths[0]);

    KernelCache cache({.dir = dir.path});
    cache.get(reqs[0]);  // a disk hit makes A the most recent
    CHECK(cache.stats().disk_hits == 1);
    cache.set_max_bytes(2 * entry + entry / 2);  // room for two: B, the oldest, goes
    CHECK_FALSE(fs::exists(paths[1]));
    CHECK(fs::exists(paths[0]));
    CHECK(fs::exists(paths[2]));
    cache.get(reqs[3]);  // D is stored; C is now the oldest and goes
    CHECK(fs::exists(paths[0]));
    CHECK_FALSE(fs::exists(paths[2]));
    CHECK(fs::exists(paths[3]));
    CHECK(cache.stats().evictions == 2);
    CHECK(cache.disk_bytes() <= 2 * entry + entry / 2);

    // A bound smaller than one file keeps only the file just written.
    cache.set_max_bytes(0);
    CHECK(cache.disk_bytes() == 0);
    cache.clear_memory();
    cache.get(reqs[1]);
    CHECK(files_in(dir.path).size() == 1);
    CHECK(fs::exists(paths[1]));
  }

  TEST_CASE("jit cache: the history records hits, compiles, writes, evictions, corrupt entries" *
            doctest::skip(no_nvrtc())) {
    TempDir dir;
    KernelCache cache({.dir = dir.path, .event_log = true});
    const std::string key20 = cache_key(tiny_request(20)), key21 = cache_key(tiny_request(21));
    cache.get(tiny_request(20));  // compiled and written, not recorded in memory: off
    CHECK(cache.history().empty());
    cache.record_history(true, 100);
    cache.get(tiny_request(20));  // memory hit
    cache.clear_memory();
    cache.get(tiny_request(20));  // disk hit
    cache.get(tiny_request(21));  // compile, write
    const uint64_t entry = fs::file_size(cache.path_for(key20));
    cache.set_max_bytes(entry + entry / 2);  // room for one: 20, the older, goes
    write_bytes(cache.path_for(key21), "garbage");
    cache.clear_memory();
    cache.get(tiny_request(21));  // corrupt: deleted, compiled and written again
    const auto kinds = [](const std::vector<CacheEvent>& events) {
      std::vector<std::string> out;
      for (const auto& e : events) out.push_back(event_name(e.kind));
      return out;
    };
    const std::vector<CacheEvent> h = cache.history();
    CHECK(kinds(h) == std::vector<std::string>{"memory_hit", "disk_hit", "compile", "write",
                                               "eviction", "corrupt", "compile", "write"});
    REQUIRE(h.size() == 8);
    CHECK(h[0].key == key20);
    CHECK(h[0].name == "tiny.cu");
    CHECK(h[2].key == key21);
    CHECK(h[4].key == key20);
    CHECK(h[4].name.empty());
    CHECK(h[4].bytes == entry);
    CHECK(h[5].key == key21);
    CHECK(h[5].bytes == 7);
    for (size_t i = 1; i < h.size(); ++i) CHECK(h[i].time_s >= h[i - 1].time_s);

    // The disk events of every KernelCache on the directory, from events.log, memory hits
    // left out; another cache object (another process) reads the same.
    const std::vector<std::string> disk = {"compile",  "write",   "disk_hit", "compile", "write",
                                           "eviction", "corrupt", "compile",  "write"};
    CHECK(kinds(cache.disk_log()) == disk);
    KernelCache other({.dir = dir.path});
    CHECK(kinds(other.disk_log()) == disk);
    // Malformed lines are skipped.
    {
      std::ofstream log(dir.sub("events.log"), std::ios::app | std::ios::binary);
      log << "garbage\n1.5 compile nothex 10 x.cu\n2.5 frob " << key20 << " 10 x.cu\n"
          << "nan disk_hit " << key20 << " 10 x.cu\n3.5 disk_hit " << key20 << " 10 x.cu\n"
          << "4.5 disk_hit " << key20;  // torn: no newline
    }
    const std::vector<CacheEvent> log = other.disk_log();
    REQUIRE(log.size() == disk.size() + 1);
    CHECK(log.front().time_s == 3.5);  // sorted by time
    CHECK(log.front().name == "x.cu");

    // The ring keeps the last max_events; turning recording off clears and stops it.
    cache.record_history(true, 2);
    for (int i = 0; i < 3; ++i) cache.get(tiny_request(21));
    CHECK(cache.history().size() == 2);
    cache.record_history(false);
    cache.get(tiny_request(21));
    CHECK(cache.history().empty());
    // A cache without `log` writes none; clear deletes the log with the entries.
    TempDir quiet;
    KernelCache q({.dir = quiet.path});
    q.get(tiny_request(22));
    CHECK(files_in(quiet.path).size() == 1);
    cache.clear();
    CHECK(files_in(dir.path).empty());
  }

  TEST_CASE("jit cache: a directory that cannot be written still gives the compiled result" *
            doctest::skip(no_nvrtc())) {
    TempDir dir;
    write_bytes(dir.sub("file"), "not a directory");
    KernelCache cache({.dir = dir.sub("file/kernels")});
    const auto r = cache.get(tiny_request(4));
    CHECK(is_elf_cubin(r->binary));
    CHECK(cache.stats().misses == 1);
    CHECK(cache.stats().write_failures == 1);
    CHECK(cache.stats().disk_writes == 0);
    CHECK(cache.list().empty());
  }

  TEST_CASE("jit cache: processes filling one directory at once leave only valid files" *
            doctest::skip(no_nvrtc())) {
    TempDir dir;
    constexpr int kChildren = 4;
    // Each child compiles two shared keys and one of its own, re-reads them from disk
    // after dropping its memory cache, and re-stores one shared key many times while
    // the others read it: a reader must never see a partial file.
    auto child = [&](int i, uint64_t max_bytes) -> int {
      try {
        KernelCache cache({.dir = dir.path, .max_bytes = max_bytes});
        const std::vector<CompileRequest> reqs = {tiny_request(100), tiny_request(101),
                                                  tiny_request(200 + i)};
        for (int round = 0; round < 3; ++round) {
          cache.clear_memory();
          for (const auto& r : reqs)
            if (!is_elf_cubin(cache.get(r)->binary)) return 2;
        }
        const std::string key = cache_key(reqs[0]);
        const auto res = cache.get(reqs[0]);
        for (int j = 0; j < 100; ++j) {
          if (!cache.store(key, *res)) return 3;
          const auto loaded = cache.load(key);  // may be gone (evicted), never corrupt
          if (loaded && loaded->binary != res->binary) return 4;
        }
        return cache.stats().corrupt_files == 0 ? 0 : 5;
      } catch (...) {
        return 1;
      }
    };
    for (uint64_t max_bytes : {uint64_t(256) << 20, uint64_t(8) << 10}) {
      CAPTURE(max_bytes);
      std::vector<pid_t> pids;
      for (int i = 0; i < kChildren; ++i) {
        const pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) ::_exit(child(i, max_bytes));
        pids.push_back(pid);
      }
      for (pid_t pid : pids) {
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
      }
      KernelCache check({.dir = dir.path});
      const auto entries = check.list();
      for (const auto& e : entries) {
        CAPTURE(e.path);
        CHECK(e.valid);
        CHECK(e.problem == "");
      }
      for (const auto& name : files_in(dir.path)) CHECK_MESSAGE(!name.starts_with(".tmp-"), name);
      uint64_t largest = 0;
      for (const auto& e : entries) largest = std::max(largest, e.size_bytes);
      // Each process keeps the file it just wrote, so the bound can be passed by one file each.
      if (max_bytes > (uint64_t(1) << 20))
        CHECK(entries.size() == 2 + kChildren);
      else
        CHECK(check.disk_bytes() <= max_bytes + kChildren * largest);
      check.clear();
    }
  }

  TEST_CASE("jit: a user's own kernel source compiles through the cache like a built-in" *
            doctest::skip(no_nvrtc())) {
    // What the tutorial's triton_demo::silu registers as its CUDA kernel.
    KernelSpec spec;
    spec.name = "triton_demo_silu.cu";
    spec.source =
        "#include \"common.cuh\"\n"
        "extern \"C\" __global__ void triton_demo_silu(const float* x, float* y, long long n) {\n"
        "  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())\n"
        "    y[i] = x[i] / (1.0f + expf(-x[i]));\n"
        "}\n";
    const CompileRequest req = kernel_request(spec, 90, "triton_demo_silu");
    CHECK(req.source == spec.source);
    CHECK(req.name_expressions == std::vector<std::string>{"triton_demo_silu"});
    TempDir dir;
    KernelCache cache({.dir = dir.path});
    const auto r = cache.get(req);
    CHECK(is_elf_cubin(r->binary));
    CHECK(r->lowered_name("triton_demo_silu") == "triton_demo_silu");  // extern "C": unmangled

    // A built-in spec reads the embedded file; listed name expressions must include the one asked.
    const CompileRequest b = kernel_request(builtin_spec("silu.cu"), 80, "silu_fwd<float>");
    CHECK(b.source == embedded_source("silu.cu"));
    CHECK(b.options == default_options());
    KernelSpec group = builtin_spec("silu.cu");
    group.name_expressions = {"silu_fwd<float>", "silu_bwd<float>"};
    CHECK(kernel_request(group, 90, "silu_bwd<float>").name_expressions.size() == 2);
    CHECK(error_of([&] { kernel_request(group, 90, "silu_fwd<double>"); }) ==
          "[jit] 'silu_fwd<double>' is not among the name expressions of 'silu.cu'; add it to "
          "KernelSpec::name_expressions (or leave them empty to compile kernels one by one)");
  }

  // ---------------------------------------------------------------- device code on the CPU

  TEST_CASE("jit emu: float16 and bfloat16 conversions in common.cuh match the runtime's") {
    for (uint32_t h = 0; h < 65536; ++h) {
      const float want = mt::Half::to_float(uint16_t(h));
      const float got = emu::mt::half_bits_to_float(uint16_t(h));
      if (std::isnan(want))
        CHECK(std::isnan(got));
      else if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want))
        CHECK(got == want);
      const float b = emu::mt::to_float(emu::mt::BFloat16{uint16_t(h)});
      if (std::bit_cast<uint32_t>(b) != h << 16) CHECK(std::bit_cast<uint32_t>(b) == h << 16);
    }
    std::mt19937 gen(7);
    int mismatches = 0;
    for (int i = 0; i < 200000; ++i) {
      const float f = std::bit_cast<float>(uint32_t(gen()));
      if (emu::mt::float_to_half_bits(f) != mt::Half::from_float(f)) ++mismatches;
      if (emu::mt::float_to_bfloat16_bits(f) != mt::BFloat16::from_float(f)) ++mismatches;
    }
    CHECK(mismatches == 0);
  }

  TEST_CASE_TEMPLATE("jit emu: silu forward and fused backward, every variant, match float64", T,
                     float, double, mt::Half, mt::BFloat16) {
    using E = emu_t<T>;
    const DType dt = mt::dtype_v<T>;
    constexpr int64_t kPack = 16 / int64_t(sizeof(T));
    for (int64_t n : {int64_t(1), int64_t(7), kPack, kPack + 1, int64_t(257), int64_t(4099)}) {
      CAPTURE(n);
      // One element of slack in front, so the unaligned variant can start off a 16-byte line.
      std::vector<T> xs = make_inputs<T>(size_t(n) + kPack, 1),
                     gs = make_inputs<T>(size_t(n) + kPack, 2);
      alignas(16) static T x_buf[4099 + 16], g_buf[4099 + 16], y_buf[4099 + 16];
      std::copy(xs.begin(), xs.end(), x_buf);
      std::copy(gs.begin(), gs.end(), g_buf);
      for (int64_t offset : {int64_t(0), int64_t(1)}) {
        CAPTURE(offset);
        const T* x = x_buf + offset;
        const T* g = g_buf + offset;
        T* y = y_buf + offset;
        for (const char* variant : {"scalar", "vec", "vec_small_grid"}) {
          CAPTURE(variant);
          const bool vec = variant[0] == 'v';
          if (vec && offset != 0) continue;  // the launcher never picks vec off-alignment
          const LaunchShape shape =
              std::string(variant) == "vec_small_grid" ? LaunchShape{{1, 1, 1}, {32, 1, 1}}
              : vec ? vec_launch_shape((n / kPack + kSiluUnroll - 1) / kSiluUnroll)
                    : elementwise_launch_shape(n, 1);
          std::fill(y_buf, y_buf + n + kPack, T(-777.0f));
          emu::launch(shape, [&] {
            if (vec)
              emu::silu_fwd_vec<E, kSiluUnroll>(as_emu(x), as_emu(y), n);
            else
              emu::silu_fwd<E>(as_emu(x), as_emu(y), n);
          });
          for (int64_t i = 0; i < n; ++i) {
            const double xi = to_double(x[i]), ref = silu_ref(xi);
            CHECK_MESSAGE(std::abs(to_double(y[i]) - ref) <= tolerance<T>(ref, 0),
                          "silu(" << xi << ") at " << i);
          }
          CHECK(to_double(y[n]) == to_double(T(-777.0f)));  // nothing past the end
          emu::launch(shape, [&] {
            if (vec)
              emu::silu_bwd_vec<E, kSiluUnroll>(as_emu(g), as_emu(x), as_emu(y), n);
            else
              emu::silu_bwd<E>(as_emu(g), as_emu(x), as_emu(y), n);
          });
          for (int64_t i = 0; i < n; ++i) {
            const double xi = to_double(x[i]), gi = to_double(g[i]), ref = silu_grad_ref(gi, xi);
            CHECK_MESSAGE(std::abs(to_double(y[i]) - ref) <=
                              tolerance<T>(ref, std::abs(gi) * (1 + std::abs(xi))),
                          "silu_grad(" << gi << ", " << xi << ") at " << i);
          }
          CHECK(to_double(y[n]) == to_double(T(-777.0f)));
        }
      }
    }
    (void)dt;
  }

  TEST_CASE_TEMPLATE("jit emu: the strided silu kernels read a permuted view", T, float, mt::Half) {
    using E = emu_t<T>;
    // x: a (7, 6, 5) buffer seen as (6, 5, 7) through strides (5, 1, 30); y and grad contiguous.
    const int64_t sizes[] = {6, 5, 7}, xs[] = {5, 1, 30}, ys[] = {35, 7, 1};
    const std::vector<T> x = make_inputs<T>(210, 3), g = make_inputs<T>(210, 4);
    std::vector<T> y(210);
    const StridedLayout fwd = make_strided_layout(sizes, {ys, xs});
    const StridedLayout bwd = make_strided_layout(sizes, {ys, ys, xs});
    for (LaunchShape shape :
         {elementwise_launch_shape(210, 1), LaunchShape{{2, 1, 1}, {32, 1, 1}}}) {
      emu::launch(shape,
                  [&] { emu::silu_fwd_strided<E>(as_emu(x.data()), as_emu(y.data()), 210, fwd); });
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t j = 0; j < 5; ++j)
          for (int64_t k = 0; k < 7; ++k) {
            const double xi = to_double(x[size_t(i * 5 + j + k * 30)]), ref = silu_ref(xi);
            CHECK(std::abs(to_double(y[size_t(i * 35 + j * 7 + k)]) - ref) <= tolerance<T>(ref, 0));
          }
      emu::launch(shape, [&] {
        emu::silu_bwd_strided<E>(as_emu(g.data()), as_emu(x.data()), as_emu(y.data()), 210, bwd);
      });
      for (int64_t i = 0; i < 210; ++i) {
        const int64_t a = i / 35, b = i / 7 % 5, c = i % 7;
        const double xi = to_double(x[size_t(a * 5 + b + c * 30)]), gi = to_double(g[size_t(i)]);
        const double ref = silu_grad_ref(gi, xi);
        CHECK(std::abs(to_double(y[size_t(i)]) - ref) <=
              tolerance<T>(ref, std::abs(gi) * (1 + std::abs(xi))));
      }
    }
  }

  namespace {
  // What a conversion should give, computed with the runtime's own host types.
  template <typename To, typename From>
  To host_convert(From v) {
    if constexpr (std::is_same_v<To, bool>)
      return double(v) != 0.0 || std::isnan(double(v));
    else if constexpr (std::is_same_v<To, mt::Half> || std::is_same_v<To, mt::BFloat16>)
      return To(float(v));
    else
      return To(v);
  }
  template <typename T>
  double as_double(T v) {
    if constexpr (std::is_same_v<T, mt::Half> || std::is_same_v<T, mt::BFloat16>)
      return float(v);
    else
      return double(v);
  }
  template <typename T>
  bool same_value(T a, T b) {
    const double x = as_double(a), y = as_double(b);
    return (std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y));
  }

  template <typename Dst, typename Src>
  void check_copy_cast_pair() {
    using ED = emu_t<Dst>;
    using ES = emu_t<Src>;
    std::vector<double> values = {0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -7.0, 100.0, 1000.25, 3e-5};
    if constexpr (!std::is_same_v<Dst, int64_t> && !std::is_same_v<Dst, bool>) {
      values.push_back(65504.0);  // float16 max
      values.push_back(70000.0);  // beyond float16: inf
    }
    if constexpr (!std::is_same_v<Dst, int64_t> && !std::is_same_v<Src, int64_t> &&
                  !std::is_same_v<Src, bool>) {
      values.push_back(std::numeric_limits<double>::infinity());
      values.push_back(std::nan(""));
    }
    HostArray<Src> src(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const double v = values[i];
      if constexpr (std::is_same_v<Src, bool>)
        src[i] = v != 0.0;
      else if constexpr (std::is_same_v<Src, int64_t>)
        src[i] = int64_t(v);
      else if constexpr (std::is_same_v<Src, double>)
        src[i] = v;
      else
        src[i] = Src(float(v));
    }
    const int64_t n = int64_t(src.size());
    HostArray<Dst> dst(static_cast<size_t>(n));
    emu::launch(elementwise_launch_shape(n, 1),
                [&] { emu::copy_cast<ED, ES>(as_emu(dst.data()), as_emu(src.data()), n); });
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(as_double(src[size_t(i)]));
      CHECK(same_value(dst[size_t(i)], host_convert<Dst>(src[size_t(i)])));
    }
    // Strided: src broadcast along rows (stride 0), dst written transposed.
    const int64_t sizes[] = {3, n}, dst_strides[] = {1, 3}, src_strides[] = {0, 1};
    HostArray<Dst> dst2(size_t(3 * n));
    const StridedLayout l = make_strided_layout(sizes, {dst_strides, src_strides});
    emu::launch(LaunchShape{{1, 1, 1}, {32, 1, 1}}, [&] {
      emu::copy_cast_strided<ED, ES>(as_emu(dst2.data()), as_emu(src.data()), 3 * n, l);
    });
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i < n; ++i)
        CHECK(same_value(dst2[size_t(i * 3 + r)], host_convert<Dst>(src[size_t(i)])));
  }

  template <typename Dst>
  void check_copy_cast_from_all() {
    check_copy_cast_pair<Dst, float>();
    check_copy_cast_pair<Dst, double>();
    check_copy_cast_pair<Dst, mt::Half>();
    check_copy_cast_pair<Dst, mt::BFloat16>();
    check_copy_cast_pair<Dst, int64_t>();
    check_copy_cast_pair<Dst, bool>();
  }
  }  // namespace

  TEST_CASE_TEMPLATE("jit emu: copy_cast converts from every dtype, contiguous and strided", Dst,
                     float, double, mt::Half, mt::BFloat16, int64_t, bool) {
    check_copy_cast_from_all<Dst>();
  }

  namespace {
  // Runs the elementwise templates of elementwise.cu on the CPU: contiguous (scalar and
  // 16-byte packs) and strided with a broadcast operand, against ref (float64). y, a divisor
  // for div, keeps |y| >= 0.5.
  template <typename T, typename Functor, int arity, typename Ref>
  void check_elementwise(double a, Ref ref, double lo, double hi) {
    using E = emu_t<T>;
    std::mt19937 gen(11);
    std::uniform_real_distribution<double> dist(lo, hi), mag(0.5, 4);
    const int64_t rows = 5, cols = 37, n = rows * cols;
    alignas(16) static T x[5 * 37 + 8], y[5 * 37 + 8], out[5 * 37 + 8];
    for (int64_t i = 0; i < n; ++i) {
      x[i] = T(dist(gen));
      y[i] = T(i % 2 ? mag(gen) : -mag(gen));
    }
    const emu::mt::OpScalars sc{a, 0};
    auto want = [&](int64_t i, int64_t j) {
      if constexpr (arity == 1)
        return ref(to_double(x[i]), 0.0, a);
      else
        return ref(to_double(x[i]), to_double(y[j]), a);
    };
    for (int vec : {0, 1}) {
      CAPTURE(vec);
      std::fill(out, out + n + 8, T(-777.0f));
      const LaunchShape shape = elementwise_launch_shape(vec ? (n + 3) / 4 : n, 1);
      emu::launch(shape, [&] {
        if constexpr (arity == 1)
          emu::unary_op<E, Functor>(as_emu(out), as_emu(x), n, sc, vec);
        else
          emu::binary_op<E, Functor>(as_emu(out), as_emu(x), as_emu(y), n, sc, vec);
      });
      for (int64_t i = 0; i < n; ++i) {
        const double w = want(i, i);
        if (std::isnan(w)) continue;
        CHECK_MESSAGE(std::abs(to_double(out[i]) - w) <= tolerance<T>(w, 1), "element " << i);
      }
      CHECK(to_double(out[n]) == to_double(T(-777.0f)));
    }
    // Strided: out transposed (column-major), x row-major, y one row broadcast (stride 0).
    const int64_t sizes[] = {rows, cols}, so[] = {1, rows}, sx[] = {cols, 1}, sy[] = {0, 1};
    const StridedLayout l = arity == 1 ? make_strided_layout(sizes, {so, sx})
                                       : make_strided_layout(sizes, {so, sx, sy});
    emu::launch(LaunchShape{{2, 1, 1}, {32, 1, 1}}, [&] {
      if constexpr (arity == 1)
        emu::unary_op_strided<E, Functor>(as_emu(out), as_emu(x), n, sc, l);
      else
        emu::binary_op_strided<E, Functor>(as_emu(out), as_emu(x), as_emu(y), n, sc, l);
    });
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const double w = want(r * cols + c, c);
        if (std::isnan(w)) continue;
        CHECK(std::abs(to_double(out[c * rows + r]) - w) <= tolerance<T>(w, 1));
      }
  }

  // One row of the elementwise table: its device functor against its float64 CPU functor.
  // Scalar rows get s = 3 (pow: x^3), Binary rows alpha = 0.5; kPositive rows take x > 0.
  template <typename T, typename Functor, unsigned kFlags, mt::ew::Arity kArity>
  void check_row(mt::ew::Fn fn, int& checked) {
    if constexpr (!(kFlags & mt::ew::kOwnKernels)) {
      const mt::ew::Row& r = mt::ew::row(fn);
      CAPTURE(r.name);
      CAPTURE(r.id);
      REQUIRE(bool(r.f64));
      const double lo = r.positive() ? 0.5 : -4, hi = 4;
      if constexpr (kArity == mt::ew::Arity::Unary)
        check_elementwise<T, Functor, 1>(0, r.f64, lo, hi);
      else if constexpr (kArity == mt::ew::Arity::Scalar)
        check_elementwise<T, Functor, 1>(3, r.f64, lo, hi);
      else
        check_elementwise<T, Functor, 2>(0.5, r.f64, lo, hi);
      ++checked;
    }
  }
  }  // namespace

  TEST_CASE_TEMPLATE(
      "jit emu: every functor of the elementwise table matches its CPU functor in "
      "float64, contiguous and strided",
      T, float, double, mt::Half, mt::BFloat16) {
    using namespace mt::ew;  // the rows' flags
    int checked = 0;
#define MT_EW_CHECK(Id, name, arity, flags, ...) \
  check_row<T, emu::mt::op::Id, (flags), Arity::arity>(Fn::Id, checked);
    MT_ELEMENTWISE_OPS(MT_EW_CHECK)
#undef MT_EW_CHECK
    int with_functor = 0;
    for (const Row& r : kRows) with_functor += r.has_device_functor();
    CHECK(checked == with_functor);
    CHECK(checked >= 20);
  }

  TEST_CASE("jit: every functor of elementwise.cu is a row of the elementwise table") {
    // A functor no row names is dead code that no test runs (the emulated test above goes
    // by the rows).
    const std::string_view src = embedded_source("elementwise.cu");
    const std::string_view open = "namespace op {", close = "}  // namespace op";
    const size_t begin = src.find(open), end = src.find(close);
    REQUIRE((begin != std::string_view::npos && end != std::string_view::npos));
    std::vector<std::string> functors;
    for (size_t at = src.find("struct ", begin); at < end; at = src.find("struct ", at + 1)) {
      const size_t name = at + 7;
      functors.emplace_back(src.substr(name, src.find_first_of(" {", name) - name));
    }
    CHECK(functors.size() >= 20);
    for (const std::string& f : functors) {
      CAPTURE(f);
      CHECK(std::any_of(std::begin(mt::ew::kRows), std::end(mt::ew::kRows),
                        [&](const mt::ew::Row& r) { return r.id == f && r.has_device_functor(); }));
    }
    for (const mt::ew::Row& r : mt::ew::kRows) {
      CAPTURE(r.id);
      if (r.has_device_functor())
        CHECK(std::find(functors.begin(), functors.end(), std::string(r.id)) != functors.end());
    }
  }

  TEST_CASE("jit emu: int64 elementwise kernels compute in int64, powers by squaring") {
    using emu::mt::OpScalars;
    const int64_t n = 9;
    HostArray<long long> x(n), y(n), out(n);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = i - 4, y[size_t(i)] = 3 * i;
    emu::launch(elementwise_launch_shape(n, 1), [&] {
      emu::binary_op<long long, emu::mt::op::Sub>(out.data(), x.data(), y.data(), n,
                                                  OpScalars{2, 0}, 0);
    });
    for (int64_t i = 0; i < n; ++i) CHECK(out[size_t(i)] == (i - 4) - 2 * 3 * i);
    emu::launch(elementwise_launch_shape(n, 1), [&] {
      emu::unary_op<long long, emu::mt::op::Pow>(out.data(), x.data(), n, OpScalars{3, 0}, 0);
    });
    for (int64_t i = 0; i < n; ++i) CHECK(out[size_t(i)] == (i - 4) * (i - 4) * (i - 4));
    emu::launch(elementwise_launch_shape(n, 1), [&] {
      emu::unary_op<long long, emu::mt::op::Abs>(out.data(), x.data(), n, OpScalars{0, 0}, 0);
    });
    for (int64_t i = 0; i < n; ++i) CHECK(out[size_t(i)] == std::abs(i - 4));
  }

  TEST_CASE("jit: foreach_tables cuts a list into tables of at most 64 pairs and 320 chunks") {
    // Pointers are only carried, never read here: the numbers stand for device addresses.
    auto tables_of = [](const std::vector<int64_t>& n) {
      std::vector<void*> s(n.size());
      std::vector<const void*> o(n.size());
      for (size_t i = 0; i < n.size(); ++i)
        s[i] = reinterpret_cast<void*>(0x1000 * (i + 1)),
        o[i] = reinterpret_cast<const void*>(0x100000 * (i + 1));
      std::vector<std::vector<std::pair<long long, int>>>
          got;  // per launch: (numel, chunk) a block
      foreach_tables(s, o, n, [&](const mt::ForeachTable& t, int blocks) {
        got.emplace_back();
        for (int b = 0; b < blocks; ++b) {
          const int k = t.block_tensor[b];
          CHECK(t.self[k] == s[size_t(reinterpret_cast<uintptr_t>(t.self[k]) / 0x1000 - 1)]);
          CHECK(reinterpret_cast<uintptr_t>(t.other[k]) / 0x100000 ==
                reinterpret_cast<uintptr_t>(t.self[k]) / 0x1000);
          got.back().emplace_back(t.numel[k], t.block_chunk[b]);
        }
      });
      return got;
    };
    const long long C = mt::kForeachChunk;
    auto small = tables_of({5, 0, C, C + 1});  // an empty pair takes no block
    REQUIRE(small.size() == 1);
    CHECK(small[0] ==
          std::vector<std::pair<long long, int>>{{5, 0}, {C, 0}, {C + 1, 0}, {C + 1, 1}});
    auto many = tables_of(std::vector<int64_t>(130, 7));  // 64 + 64 + 2 pairs
    REQUIRE(many.size() == 3);
    CHECK((many[0].size() == 64 && many[1].size() == 64 && many[2].size() == 2));
    auto big = tables_of({3, 400 * C});  // 401 chunks: 320 blocks, then 81
    REQUIRE(big.size() == 2);
    CHECK(big[0].size() == 320);
    CHECK(big[1].size() == 81);
    CHECK(big[1].front() == std::pair<long long, int>{400 * C, 319});
    CHECK(big[1].back() == std::pair<long long, int>{400 * C, 399});
    CHECK(tables_of({0, 0}).empty());
  }

  TEST_CASE_TEMPLATE("jit emu: foreach_binary_op adds alpha * other into every self of a list", T,
                     float, mt::Half, long long) {
    // Sizes around a chunk and a pack, an empty pair, one pair off its 16-byte alignment,
    // and more pairs than a table holds (two launches). Small integers: exact in every T.
    std::vector<int64_t> n = {1, 7, 8, 0, mt::kForeachChunk + 9, 2 * mt::kForeachChunk, 33};
    for (int i = 0; i < 62; ++i) n.push_back(i % 5 + 1);
    auto x0 = [](size_t i, int64_t k) { return double((int64_t(i) + k) % 11 - 5); };
    auto y0 = [](size_t i, int64_t k) { return double((3 * k + int64_t(i)) % 7 - 3); };
    std::vector<HostArray<T>> xs, ys;
    std::vector<void*> ps;
    std::vector<const void*> po;
    for (size_t i = 0; i < n.size(); ++i) {
      xs.emplace_back(size_t(n[i]) + 2);  // one element of slack at each end
      ys.emplace_back(size_t(n[i]) + 2);
      for (int64_t k = 0; k < n[i] + 2; ++k)
        xs[i][size_t(k)] = T(float(x0(i, k))), ys[i][size_t(k)] = T(float(y0(i, k)));
      const size_t shift = i == 6 ? 1 : 0;  // pair 6 is misaligned for every T
      ps.push_back(as_emu(xs[i].data() + shift));
      po.push_back(as_emu(ys[i].data() + shift));
    }
    const double alpha = -2;
    int launches = 0;
    foreach_tables(ps, po, n, [&](mt::ForeachTable& table, int blocks) {
      ++launches;
      emu::launch({mt::jit::Dim3(unsigned(blocks)), mt::jit::Dim3(256)}, [&] {
        emu::foreach_binary_op<emu_t<T>, emu::mt::op::Add>(table, emu::mt::OpScalars{alpha, 0});
      });
    });
    CHECK(launches == 2);
    for (size_t i = 0; i < n.size(); ++i) {
      CAPTURE(i);
      const int64_t shift = i == 6 ? 1 : 0;
      int64_t first_bad = -1;
      for (int64_t k = 0; k < n[i] + 2 && first_bad < 0; ++k) {
        const bool written = k >= shift && k < n[i] + shift;
        const double want = written ? x0(i, k) + alpha * y0(i, k) : x0(i, k);
        if (to_double(xs[i][size_t(k)]) != want) first_bad = k;
      }
      CHECK(first_bad == -1);
    }
  }

  TEST_CASE("jit emu: reduce_cols sums and takes the max with its first index, over chunks") {
    using A = emu::mt::Acc<float>;
    // x: [O=3, R=50, I=7]; a few NaN-free ties for max; chunked in 4 chunks of 13.
    const long long O = 3, R = 50, I = 7, chunks = 4, chunk_len = 13;
    std::vector<float> x(size_t(O * R * I));
    std::mt19937 gen(5);
    for (auto& v : x) v = float(int(gen() % 21) - 10) / 4;  // many equal values: ties
    std::vector<A> partial(size_t(O * chunks * I));
    std::vector<float> out(size_t(O * I));
    std::vector<long long> idx(size_t(O * I));
    for (int kind = 0; kind < 2; ++kind) {
      CAPTURE(kind);
      emu::launch(elementwise_launch_shape(O * chunks * I, 1), [&] {
        if (kind == 0)
          emu::reduce_cols<float, float, emu::mt::SumR, false>(
              x.data(), out.data(), nullptr, partial.data(), O, R, I, chunk_len, chunks, 1.0);
        else
          emu::reduce_cols<float, float, emu::mt::MaxR, false>(
              x.data(), out.data(), nullptr, partial.data(), O, R, I, chunk_len, chunks, 1.0);
      });
      // The second pass reads the partials as [O, chunks, I], scaled (a mean) for sum.
      const double scale = kind == 0 ? 1.0 / double(R) : 1.0;
      emu::launch(LaunchShape{{1, 1, 1}, {8, 1, 1}}, [&] {
        if (kind == 0)
          emu::reduce_cols<float, float, emu::mt::SumR, true>(
              partial.data(), out.data(), idx.data(), nullptr, O, chunks, I, chunks, 1, scale);
        else
          emu::reduce_cols<float, float, emu::mt::MaxR, true>(
              partial.data(), out.data(), idx.data(), nullptr, O, chunks, I, chunks, 1, scale);
      });
      for (long long o = 0; o < O; ++o)
        for (long long i = 0; i < I; ++i) {
          double s = 0, m = -1e30;
          long long at = -1;
          for (long long r = 0; r < R; ++r) {
            const double v = x[size_t((o * R + r) * I + i)];
            s += v;
            if (v > m) m = v, at = r;
          }
          const size_t k = size_t(o * I + i);
          if (kind == 0) {
            CHECK(out[k] == doctest::Approx(s / double(R)).epsilon(1e-6));
          } else {
            CHECK(out[k] == float(m));
            CHECK(idx[k] == at);  // the first of equal maxima
          }
        }
    }
  }

  TEST_CASE("jit emu: reduce_cols lets NaN win a max and sums bool into int64") {
    const float nan = std::nanf("");
    std::vector<float> x = {1, nan, 3, 2};  // [O=1, R=4, I=1]
    float out = 0;
    long long idx = -1;
    emu::launch(LaunchShape{{1, 1, 1}, {32, 1, 1}}, [&] {
      emu::reduce_cols<float, float, emu::mt::MaxR, false>(x.data(), &out, &idx, nullptr, 1, 4, 1,
                                                           4, 1, 1.0);
    });
    CHECK(std::isnan(out));
    CHECK(idx == 1);
    HostArray<bool> b(5, true);
    b[2] = false;
    long long count = 0;
    emu::launch(LaunchShape{{1, 1, 1}, {32, 1, 1}}, [&] {
      emu::reduce_cols<bool, long long, emu::mt::SumR, false>(b.data(), &count, nullptr, nullptr, 1,
                                                              5, 1, 5, 1, 1.0);
    });
    CHECK(count == 4);
  }

  TEST_CASE("jit emu: the random kernels draw exactly the host generator's stream") {
    const int64_t n = 1000;
    mt::Generator g(1234);
    mt::Tensor u = mt::rand({n}, {.dtype = DType::Float64}, &g);
    mt::Tensor z = mt::randn({n}, {.dtype = DType::Float64}, &g);
    std::vector<double> du(n), dz(n);
    // rand took counters [0, n), randn [n, 2n) (one Philox block an element).
    emu::launch(LaunchShape{{3, 1, 1}, {64, 1, 1}},
                [&] { emu::random_uniform<double>(du.data(), n, 1234, 0); });
    emu::launch(LaunchShape{{1, 1, 1}, {32, 1, 1}},
                [&] { emu::random_normal<double>(dz.data(), n, 1234, n); });
    CHECK(du == u.to_vector<double>());
    CHECK(dz == z.to_vector<double>());
  }

  TEST_CASE_TEMPLATE("jit emu: rand's kernel draws the host's values in every float dtype, below 1",
                     T, float, mt::Half, mt::BFloat16) {
    // The kernel and the host take philox_uniform's bits for the dtype (runtime/philox.h).
    const int64_t n = 4096;
    const DType dt = std::is_same_v<T, float>      ? DType::Float32
                     : std::is_same_v<T, mt::Half> ? DType::Float16
                                                   : DType::BFloat16;
    mt::Generator g(99);
    const std::vector<T> host = mt::rand({n}, {.dtype = dt}, &g).to_vector<T>();
    HostArray<T> dev(size_t(n), T(0.0f));
    emu::launch(LaunchShape{{2, 1, 1}, {64, 1, 1}},
                [&] { emu::random_uniform<emu_t<T>>(as_emu(dev.data()), n, 99, 0); });
    for (int64_t i = 0; i < n; ++i) {
      CHECK(same_value(dev[size_t(i)], host[size_t(i)]));
      CHECK(float(host[size_t(i)]) < 1.0f);
    }
  }

  TEST_CASE_TEMPLATE("jit emu: fill writes every element of a contiguous or strided tensor", T,
                     float, double, mt::Half, mt::BFloat16, int64_t, bool) {
    using E = emu_t<T>;
    const T value = T(1), zero = T(0);
    HostArray<T> out(1000, zero);
    emu::launch(elementwise_launch_shape(999, 1),
                [&] { emu::fill<E>(as_emu(out.data()), 999, *as_emu(&value)); });
    for (size_t i = 0; i < 999; ++i) CHECK(same_value(out[i], value));
    CHECK(same_value(out[999], zero));
    // Every other column of a (10, 20) tensor: sizes (10, 10), strides (20, 2).
    HostArray<T> grid(200, zero);
    const int64_t sizes[] = {10, 10}, strides[] = {20, 2};
    const StridedLayout l = make_strided_layout(sizes, {strides});
    emu::launch(LaunchShape{{1, 1, 1}, {32, 1, 1}},
                [&] { emu::fill_strided<E>(as_emu(grid.data()), 100, *as_emu(&value), l); });
    for (size_t i = 0; i < 200; ++i) CHECK(same_value(grid[i], i % 2 == 0 ? value : zero));
  }

  // ---------------------------------------------------------------- on a GPU

#ifdef MT_HAVE_CUDA
  namespace {
  // Device memory for one test, freed at scope exit.
  struct DeviceBuffer {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    explicit DeviceBuffer(size_t n) : bytes(n) {
      mt::cuda::DeviceGuard g(0);
      MT_CU_CHECK(mt::cuda::driver().cuMemAlloc(&ptr, n));
    }
    ~DeviceBuffer() {
      mt::cuda::DeviceGuard g(0);
      mt::cuda::driver().cuMemFree(ptr);
    }
    void* get(size_t offset = 0) const { return reinterpret_cast<void*>(ptr + offset); }
    void upload(const void* src, size_t n, size_t offset = 0) {
      mt::cuda::DeviceGuard g(0);
      MT_CU_CHECK(
          mt::cuda::driver().cuMemcpyHtoDAsync(ptr + offset, src, n, mt::cuda::current_stream(0)));
      MT_CU_CHECK(mt::cuda::driver().cuStreamSynchronize(mt::cuda::current_stream(0)));
    }
    void download(void* dst, size_t n, size_t offset = 0) {
      mt::cuda::DeviceGuard g(0);
      MT_CU_CHECK(
          mt::cuda::driver().cuMemcpyDtoHAsync(dst, ptr + offset, n, mt::cuda::current_stream(0)));
      MT_CU_CHECK(mt::cuda::driver().cuStreamSynchronize(mt::cuda::current_stream(0)));
    }
  };
  }  // namespace

  TEST_CASE(
      "jit (gpu): get_kernel compiles for the device's own arch, loads once, and keeps the "
      "handle" *
      doctest::skip(no_gpu() || no_nvrtc())) {
    const auto& props = mt::cuda::device_props(0);
    const Kernel& k = get_kernel(0, builtin_spec("silu.cu"), "silu_fwd<float>");
    CHECK(&get_kernel(0, builtin_spec("silu.cu"), "silu_fwd<float>") == &k);
    CHECK(k.function() != nullptr);
    CHECK(k.device() == 0);
    CHECK(k.target() == nvrtc_target(props.major * 10 + props.minor));
    CHECK(k.lowered_name() == "_Z8silu_fwdIfEvPKT_PS0_x");
  }

  TEST_CASE_TEMPLATE("jit (gpu): silu forward and backward on cuda:0 match float64" *
                         doctest::skip(no_gpu() || no_nvrtc()),
                     T, float, double, mt::Half, mt::BFloat16) {
    const DType dt = mt::dtype_v<T>;
    const size_t es = sizeof(T);
    for (int64_t n : {int64_t(1), int64_t(9), int64_t(1000), (int64_t(1) << 20) + 3}) {
      CAPTURE(n);
      const std::vector<T> x = make_inputs<T>(size_t(n), 5), g = make_inputs<T>(size_t(n), 6);
      DeviceBuffer dx(size_t(n + 1) * es), dg(size_t(n + 1) * es), dy(size_t(n + 1) * es);
      for (size_t offset :
           {size_t(0), es}) {  // aligned (vec kernel), then one element off (scalar)
        CAPTURE(offset);
        dx.upload(x.data(), size_t(n) * es, offset);
        dg.upload(g.data(), size_t(n) * es, offset);
        std::vector<T> y(static_cast<size_t>(n));
        launch_silu_fwd(0, mt::cuda::current_stream(0), dt, dx.get(offset), dy.get(offset), n);
        dy.download(y.data(), size_t(n) * es, offset);
        for (int64_t i = 0; i < n; ++i) {
          const double ref = silu_ref(to_double(x[size_t(i)]));
          CHECK(std::abs(to_double(y[size_t(i)]) - ref) <= tolerance<T>(ref, 0));
        }
        launch_silu_bwd(0, mt::cuda::current_stream(0), dt, dg.get(offset), dx.get(offset),
                        dy.get(offset), n);
        dy.download(y.data(), size_t(n) * es, offset);
        for (int64_t i = 0; i < n; ++i) {
          const double xi = to_double(x[size_t(i)]), gi = to_double(g[size_t(i)]);
          const double ref = silu_grad_ref(gi, xi);
          CHECK(std::abs(to_double(y[size_t(i)]) - ref) <=
                tolerance<T>(ref, std::abs(gi) * (1 + std::abs(xi))));
        }
      }
    }
    // Strided: the permuted view of the emu test.
    const int64_t sizes[] = {6, 5, 7}, xs[] = {5, 1, 30}, ys[] = {35, 7, 1};
    const std::vector<T> x = make_inputs<T>(210, 3);
    DeviceBuffer dx(210 * es), dy(210 * es);
    dx.upload(x.data(), 210 * es);
    const StridedLayout l = make_strided_layout(sizes, {ys, xs});
    launch_silu_fwd(0, mt::cuda::current_stream(0), dt, dx.get(), dy.get(), 210, &l);
    std::vector<T> y(210);
    dy.download(y.data(), 210 * es);
    for (int64_t i = 0; i < 210; ++i) {
      const int64_t a = i / 35, b = i / 7 % 5, c = i % 7;
      const double ref = silu_ref(to_double(x[size_t(a * 5 + b + c * 30)]));
      CHECK(std::abs(to_double(y[size_t(i)]) - ref) <= tolerance<T>(ref, 0));
    }
  }

  TEST_CASE("jit (gpu): fill and copy_cast on cuda:0" * doctest::skip(no_gpu() || no_nvrtc())) {
    const int64_t n = 1001;
    DeviceBuffer a(size_t(n) * 8), b(size_t(n) * 8);
    const mt::Half h(2.5f);
    launch_fill(0, mt::cuda::current_stream(0), DType::Float16, a.get(), n, &h);
    launch_copy_cast(0, mt::cuda::current_stream(0), DType::Float64, b.get(), DType::Float16,
                     a.get(), n);
    std::vector<double> out(static_cast<size_t>(n));
    b.download(out.data(), size_t(n) * 8);
    for (double v : out) CHECK(v == 2.5);
    // Strided: every other element of b (as float) gets -1.
    const float m1 = -1.0f;
    const int64_t sizes[] = {n / 2}, strides[] = {2};
    const StridedLayout l = make_strided_layout(sizes, {strides});
    launch_fill(0, mt::cuda::current_stream(0), DType::Float32, b.get(), n / 2, &m1, &l);
    std::vector<float> f(size_t(n / 2) * 2);
    b.download(f.data(), f.size() * 4);
    for (size_t i = 0; i < f.size(); i += 2) CHECK(f[i] == -1.0f);
  }

  TEST_CASE("jit (gpu): a user's kernel from a source string runs on cuda:0" *
            doctest::skip(no_gpu() || no_nvrtc())) {
    KernelSpec spec;
    spec.name = "triton_demo_silu.cu";
    spec.source =
        "#include \"common.cuh\"\n"
        "extern \"C\" __global__ void triton_demo_silu(const float* x, float* y, long long n) {\n"
        "  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride())\n"
        "    y[i] = x[i] / (1.0f + expf(-x[i]));\n"
        "}\n";
    const Kernel& k = get_kernel(0, spec, "triton_demo_silu");
    const std::vector<float> x = make_inputs<float>(4096, 8);
    DeviceBuffer dx(4096 * 4), dy(4096 * 4);
    dx.upload(x.data(), 4096 * 4);
    void* xp = dx.get();
    void* yp = dy.get();
    long long n = 4096;
    void* args[] = {&xp, &yp, &n};
    const LaunchShape s = elementwise_launch_shape(n, mt::cuda::device_props(0).sm_count);
    k.launch(s.grid, s.block, 0, mt::cuda::current_stream(0), args);
    std::vector<float> y(4096);
    dy.download(y.data(), 4096 * 4);
    for (size_t i = 0; i < y.size(); ++i) {
      const double ref = silu_ref(x[i]);
      CHECK(std::abs(y[i] - ref) <= tolerance<float>(ref, 0));
    }
  }
#endif  // MT_HAVE_CUDA

}  // TEST_SUITE
