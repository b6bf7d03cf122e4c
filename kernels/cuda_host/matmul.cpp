// SPDX-License-Identifier: MIT
// matmul on the GPU through cuBLAS, opened with dlopen on first use (like the driver and
// NVRTC), so a build or a machine without it still runs everything else.
//
// Note [Row-major matmul on cuBLAS]
// cuBLAS is column-major. A row-major [r, c] matrix with strides (ld, 1) is the
// column-major [c, r] matrix with leading dimension ld, i.e. its transpose; so
// C = A @ B is computed as C^T = B^T @ A^T: cuBLAS gets B first, then A, with m = n,
// n = m, and C's rows as its columns (ldc = n). A transposed view (strides (1, ld)) is
// already column-major, which cuBLAS reads with op T, without a copy. Batches go in
// one strided-batched call when each operand's batch dims collapse to one stride
// (0 for a broadcast operand); otherwise the operand is copied contiguous first.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <mutex>
#include <type_traits>

#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/cuda_host/launch.h"
#include "runtime/view.h"

#if MT_HAVE_CUDA && MT_HAVE_CUBLAS
#include <cublas_v2.h>
#include <dlfcn.h>

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#endif

namespace mt::gpu {
namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

#if MT_HAVE_CUDA && MT_HAVE_CUBLAS

namespace {

// The one overload of cublasGemmStridedBatchedEx that the library exports (cublas_api.h
// adds a C++ inline overload with 64-bit counts); the cast in decltype checks the signature
// without referencing the symbol (libcublas is opened at run time: a stored address would be
// an undefined symbol of libminitensor, which an unoptimized build keeps).
using GemmFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void*, const void*, cudaDataType, int, long long,
                                  const void*, cudaDataType, int, long long, const void*, void*,
                                  cudaDataType, int, long long, int, cublasComputeType_t,
                                  cublasGemmAlgo_t);
static_assert(std::is_same_v<decltype(static_cast<GemmFn>(&::cublasGemmStridedBatchedEx)), GemmFn>);
// cublasGemmEx, for a single matrix: on the GPU host it costs the host less per call.
using GemmOneFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                     int, const void*, const void*, cudaDataType, int, const void*,
                                     cudaDataType, int, const void*, void*, cudaDataType, int,
                                     cublasComputeType_t, cublasGemmAlgo_t);
static_assert(std::is_same_v<decltype(static_cast<GemmOneFn>(&::cublasGemmEx)), GemmOneFn>);

struct Cublas {
  std::string error, path;
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
  GemmFn gemm = nullptr;
  GemmOneFn gemm_one = nullptr;
};

Cublas load_cublas() {
  Cublas api;
  std::vector<std::string> candidates;
  std::vector<std::string> dirs = {""};
  if (const char* home = std::getenv("CUDA_HOME"); home && *home)
    dirs.push_back(std::string(home) + "/lib64/");
  dirs.push_back("/usr/local/cuda/lib64/");
  for (const auto& d : dirs)
    for (const char* so : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"})
      candidates.push_back(d + so);
  void* h = nullptr;
  std::string tried;
  for (const auto& c : candidates) {
    if ((h = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      api.path = c;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (!h) {
    api.error = fmt::format(
        "libcublas not found (tried {}); install the CUDA toolkit's cuBLAS "
        "or set CUDA_HOME",
        tried);
    return api;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
    if (!fn && api.error.empty()) api.error = fmt::format("{} lacks {}", api.path, name);
  };
  sym(api.create, "cublasCreate_v2");
  sym(api.set_stream, "cublasSetStream_v2");
  sym(api.set_workspace, "cublasSetWorkspace_v2");
  sym(api.status_string, "cublasGetStatusString");
  sym(api.gemm, "cublasGemmStridedBatchedEx");
  sym(api.gemm_one, "cublasGemmEx");
  return api;
}

const Cublas& cublas() {
  static const Cublas api = load_cublas();
  return api;
}

std::string status_text(cublasStatus_t s) {
  return cublas().status_string ? cublas().status_string(s) : fmt::format("status {}", int(s));
}

#define MT_CUBLAS_CHECK(expr, what)                                                                \
  do {                                                                                             \
    const cublasStatus_t s_ = (expr);                                                              \
    MT_CHECK(s_ == CUBLAS_STATUS_SUCCESS, "[matmul] cuBLAS {} failed: {}", what, status_text(s_)); \
  } while (0)

// A handle per thread and device (cuBLAS handles are not for concurrent use), with a
// workspace from the caching allocator, so steady-state calls allocate nothing.
// Handles live until the process ends: destroying them at thread exit can run after
// the driver has torn the context down.
constexpr int kMaxDevices = 16;
constexpr int64_t kWorkspaceBytes = 32 << 20;  // what cuBLAS asks for on Hopper
struct HandleSlot {
  cublasHandle_t handle = nullptr;
  CUstream stream = nullptr;
  Tensor workspace;
};

cublasHandle_t handle_for(int device, CUstream stream) {
  thread_local std::array<HandleSlot, kMaxDevices> slots;
  MT_CHECK(device >= 0 && device < kMaxDevices,
           "[matmul] cuda:{} is past the {} devices the "
           "cuBLAS handles cover",
           device, kMaxDevices);
  HandleSlot& s = slots[size_t(device)];
  if (!s.handle) {
    MT_CHECK(cublas().error.empty(), "[matmul] cuBLAS is unavailable: {}", cublas().error);
    MT_CUBLAS_CHECK(cublas().create(&s.handle), "create");
    s.workspace = empty({kWorkspaceBytes / 8},
                        {.dtype = DType::Float64, .device = {DeviceType::CUDA, device}});
  }
  if (s.stream != stream || !s.stream) {
    // Setting the stream resets the workspace to cuBLAS's own pool: set it again.
    MT_CUBLAS_CHECK(cublas().set_stream(s.handle, stream), "set stream");
    MT_CUBLAS_CHECK(
        cublas().set_workspace(s.handle, s.workspace.data_ptr(), size_t(kWorkspaceBytes)),
        "set workspace");
    s.stream = stream;
  }
  return s.handle;
}

// One operand as cuBLAS reads it: the pointer, op N or T, the leading dimension and the
// batch stride, after a contiguous copy where the strides do not allow that.
struct Operand {
  Tensor keep;  // the tensor whose data `ptr` points into
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 0, batch_stride = 0;
};

// Describes t ([batch..., r, c]) for cuBLAS, or returns false when its strides do not
// allow it: each matrix must have a unit stride along one dim, and the batch dims must
// collapse to one stride (all 0 for a broadcast operand).
bool describe(const Tensor& t, int64_t nb, Operand* o) {
  const int64_t r = t.size(nb), c = t.size(nb + 1), s_r = t.stride(nb), s_c = t.stride(nb + 1);
  if ((c == 1 || s_c == 1) && s_r >= std::max<int64_t>(c, 1)) {
    o->op = CUBLAS_OP_N, o->ld = s_r;
  } else if ((r == 1 || s_r == 1) && s_c >= std::max<int64_t>(r, 1)) {
    o->op = CUBLAS_OP_T, o->ld = s_c;
  } else {
    return false;
  }
  int64_t stride = 0, count = 0;
  for (int64_t d = nb - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (count == 0) {
      stride = t.stride(d), count = t.size(d);
    } else if (t.stride(d) == stride * count) {
      count *= t.size(d);
    } else {
      return false;
    }
  }
  o->batch_stride = stride;
  return true;
}

// x ([..., r, c]) broadcast to the output's batch dims, as cuBLAS will read it; copied
// contiguous when its strides do not suit.
Operand operand(const Tensor& x_in, const Shape& batch) {
  Shape full = batch;
  full.push_back(x_in.size(-2));
  full.push_back(x_in.size(-1));
  Tensor x = mt::detail::expand_of(x_in, full);
  const int64_t nb = int64_t(batch.size());
  Operand o;
  if (!describe(x, nb, &o)) {
    Tensor c = empty(full, {.dtype = x.dtype(), .device = x.device()});
    mt::detail::copy_impl(c, x);
    x = c;
    const bool ok = describe(x, nb, &o);
    MT_ASSERT(ok, "a contiguous operand of shape {} must suit cuBLAS", full);
  }
  o.keep = x;
  o.ptr = x.data_ptr();
  return o;
}

}  // namespace

bool cublas_available() { return cublas().error.empty(); }
std::string cublas_unavailable_reason() { return cublas().error; }

void matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  detail::check_cuda(out, "matmul");
  const DType t = out.dtype();
  MT_CHECK(is_floating(t),
           "[matmul] the CUDA kernel (cuBLAS) takes float32, float64, float16 or bfloat16, not "
           "{}; convert the operands with .to(mt::DType::Float32)",
           t);
  MT_CHECK(out.is_contiguous(), "[matmul] the CUDA kernel writes a contiguous out");
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) return mt::detail::fill_impl(out, 0);
  Shape batch(std::span<const int64_t>(out.sizes().begin(), out.sizes().size() - 2));
  int64_t batch_count = 1;
  for (int64_t s : batch) batch_count *= s;
  MT_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && batch_count <= INT_MAX,
           "[matmul] cuBLAS takes sizes up to {}; got m {}, n {}, k {}, {} batches", INT_MAX, m, n,
           k, batch_count);
  const Operand A = operand(detail::converted(a, t), batch);
  const Operand B = operand(detail::converted(b, t), batch);
  const int dev = out.device().index;
  cuda::DeviceGuard guard(dev);
  cublasHandle_t h = handle_for(dev, detail::stream_of(out));
  cudaDataType dt;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  switch (t) {
    case DType::Float32:
      dt = CUDA_R_32F;
      if (allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
      break;
    case DType::Float64:
      dt = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F;
      break;
    case DType::Float16:
      dt = CUDA_R_16F;
      break;
    default:
      dt = CUDA_R_16BF;
      break;
  }
  const float alpha32 = 1, beta32 = 0;
  const double alpha64 = 1, beta64 = 0;
  const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta64) : &beta32;
  // C^T (n x m) = op(B^T) (n x k) @ op(A^T) (k x m): Note [Row-major matmul on cuBLAS].
  if (batch_count == 1) {
    MT_CUBLAS_CHECK(cublas().gemm_one(h, B.op, A.op, int(n), int(m), int(k), alpha, B.ptr, dt,
                                      int(B.ld), A.ptr, dt, int(A.ld), beta, out.data_ptr(), dt,
                                      int(n), compute, CUBLAS_GEMM_DEFAULT),
                    fmt::format("gemm ({}x{} @ {}x{}, {})", m, k, k, n, t));
    return;
  }
  MT_CUBLAS_CHECK(
      cublas().gemm(h, B.op, A.op, int(n), int(m), int(k), alpha, B.ptr, dt, int(B.ld),
                    B.batch_stride, A.ptr, dt, int(A.ld), A.batch_stride, beta, out.data_ptr(), dt,
                    int(n), m * n, int(batch_count), compute, CUBLAS_GEMM_DEFAULT),
      fmt::format("gemm ({}x{} @ {}x{}, {} batches, {})", m, k, k, n, batch_count, t));
}

#else  // no CUDA or no cublas_v2.h at build time

bool cublas_available() { return false; }
std::string cublas_unavailable_reason() {
  return "this build has no cuBLAS support (cublas_v2.h was not found when it was configured)";
}
void matmul(const Tensor&, const Tensor&, const Tensor& out) {
  detail::check_cuda(out, "matmul");
  MT_ERROR("[matmul] CUDA matmul needs cuBLAS: {}", cublas_unavailable_reason());
}

#endif

}  // namespace mt::gpu
