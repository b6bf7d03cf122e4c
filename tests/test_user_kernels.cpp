// SPDX-License-Identifier: MIT
// A user's own GPU kernel: the typed launch (mt::jit::kernel + launch(config, args...)) and
// the pointwise builder (mt::jit::pointwise). Without a GPU: the expression language, the
// CPU evaluation, the signature checks against NVRTC's output, the CUBIN compiles of every
// generated kernel, and the pointwise.cuh templates run through a CPU emulation of the
// grid. Cases marked "(gpu)" run on cuda:0 and are skipped where there is none.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "helpers.h"
#include "kernels/jit/builtin.h"
#include "kernels/jit/expr.h"
#include "kernels/jit/module.h"
#include "kernels/jit/nvrtc.h"
#include "minitensor.h"

// kernels/cuda_device/pointwise.cuh compiled as host C++: one "thread" at a time walks the grid
// (the kernels are grid-stride loops without shared memory), as in test_jit.cpp.
namespace pw_emu {
struct Dim {
  unsigned x = 1, y = 1, z = 1;
};
Dim threadIdx, blockIdx, blockDim, gridDim;
namespace mt {
using ::mt::kMaxKernelDims;
using ::mt::kMaxKernelOperands;
using ::mt::StridedLayout;
}  // namespace mt
#define __global__
#define __device__
#define __forceinline__ inline
#include "kernels/cuda_device/pointwise.cuh"
#undef __global__
#undef __device__
#undef __forceinline__

// out0 = x * y + s0, out1 = x - y: what a generated functor looks like.
struct FmaAndDiff {
  template <class C>
  void operator()(const C* in, C* out, const C* s) const {
    out[0] = in[0] * in[1] + s[0];
    out[1] = in[0] - in[1];
  }
};

template <typename F>
void launch(unsigned grid, unsigned block, F&& kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < block; ++t) {
      blockIdx = {b, 0, 0};
      threadIdx = {t, 0, 0};
      kernel();
    }
}
}  // namespace pw_emu

using namespace mt;
using mt::jit::PointwiseSpec;

namespace {

// A float64 reference of x / (1 + exp(-x)).
Tensor silu_ref(const Tensor& x) {
  Tensor xd = x.cpu().to(DType::Float64).contiguous();
  Tensor out = empty(x.sizes(), {.dtype = DType::Float64});
  const double* in = xd.data_ptr<double>();
  double* o = out.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] / (1.0 + std::exp(-in[i]));
  return out;
}

double max_diff64(const Tensor& a, const Tensor& b) {
  return max_abs_diff(a.cpu().to(DType::Float64), b.cpu().to(DType::Float64));
}

const char* kRawSilu =
    "#include \"common.cuh\"\n"
    "template <typename T>\n"
    "__global__ void my_silu(const T* x, T* y, long long n) {\n"
    "  for (long long i = mt::global_thread_index(); i < n; i += mt::grid_stride()) {\n"
    "    const float v = mt::load_compute(x[i]);\n"
    "    y[i] = mt::store_compute<T>(v / (1.0f + expf(-v)));\n"
    "  }\n"
    "}\n";

// Hopper-only PTX (Note [Arch-specific targets]): ptxas takes it for sm_90a, not sm_90.
// wgmma.fence is .aligned: a whole warpgroup (128 threads) runs it.
const char* kWgmmaFence =
    "__global__ void wg_fence(float* out, float v) {\n"
    "  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
    "  out[threadIdx.x] = v + threadIdx.x;\n"
    "}\n";

jit::UserKernel wgmma_fence_kernel(bool arch_specific) {
  return jit::kernel({.name = "wg_fence.cu", .source = kWgmmaFence, .arch_specific = arch_specific},
                     "wg_fence");
}

}  // namespace

TEST_SUITE("user kernels") {
  // ------------------------------------------------------------ the expression language

  TEST_CASE("pointwise: the inputs are the free names in order of first appearance") {
    auto f = jit::pointwise("axpy", "a * x + y");
    CHECK(mt::jit::expr::program_of(f).inputs == std::vector<std::string>{"a", "x", "y"});
    CHECK(mt::jit::expr::program_of(f).outputs == std::vector<std::string>{"out"});
    auto g = jit::pointwise("silu", "x / (1.0f + expf(-x))");
    CHECK(mt::jit::expr::program_of(g).inputs == std::vector<std::string>{"x"});
  }

  TEST_CASE("pointwise: mistakes in the expression are errors with a caret under them") {
    CHECK(error_of([] {
            jit::pointwise(PointwiseSpec{.name = "f", .inputs = {"x"}, .body = "x + y"});
          }) ==
          "[jit] pointwise 'f': unknown name 'y'; the inputs are [x], the scalars [] (line 1, "
          "column 5)\n  x + y\n      ^");
    CHECK(error_of([] { jit::pointwise("f", "x * expo(x)"); })
              .starts_with("[jit] pointwise 'f': unknown function 'expo'; the functions are abs, "
                           "ceil, cos, erf, "
                           "exp,"));
    CHECK(error_of([] { jit::pointwise("f", "pow(x)"); }) ==
          "[jit] pointwise 'f': pow takes 2 arguments, got 1 (line 1, column 1)\n  pow(x)\n  ^");
    CHECK(error_of([] { jit::pointwise("f", "x +"); }) ==
          "[jit] pointwise 'f': expected a value at the end of the body (line 1, column 4)\n"
          "  x +\n     ^");
    CHECK(error_of([] { jit::pointwise("f", "(x + 1"); }) ==
          "[jit] pointwise 'f': expected ')' at the end of the body (line 1, column 7)\n"
          "  (x + 1\n        ^");
    CHECK(error_of([] { jit::pointwise("f", "x # 2"); }) ==
          "[jit] pointwise 'f': unexpected character '#' (line 1, column 3)\n  x # 2\n    ^");
    CHECK(error_of([] {
            jit::pointwise({.name = "f", .inputs = {"x"}, .outputs = {"a", "b"}, .body = "a = x;"});
          }).starts_with("[jit] pointwise 'f': output 'b' is never assigned; write `b = ...;`"));
    CHECK(error_of([] {
            jit::pointwise({.name = "f", .inputs = {"x"}, .outputs = {"a", "b"}, .body = "x * 2"});
          })
              .starts_with("[jit] pointwise 'f': the final expression sets the output, but there "
                           "are 2 outputs (a, b); assign each one by name"));
    CHECK(error_of([] {
            jit::pointwise({.name = "f", .inputs = {"x"}, .body = "x = x * 2; out = x;"});
          }).starts_with("[jit] pointwise 'f': 'x' is an input; inputs are read-only"));
    CHECK(error_of([] {
            jit::pointwise({.name = "f", .inputs = {"x", "x"}, .body = "x"});
          }) ==
          "[jit] pointwise 'f': the name 'x' is used twice among inputs, scalars and outputs");
    CHECK(error_of([] { jit::pointwise("f", "2.0f * 3"); }) ==
          "[jit] pointwise 'f': the expression reads no input tensor, so there is no shape to "
          "compute over; name at least one input");
    CHECK(error_of([] { jit::pointwise("f", "x +\n  y z"); }) ==
          "[jit] pointwise 'f': unexpected 'z' after the final expression (line 2, column 5)\n"
          "    y z\n      ^");
  }

  TEST_CASE("pointwise: on CPU tensors the expression is evaluated on the host") {
    manual_seed(1);
    auto silu = jit::pointwise("my_silu", "x / (1.0f + expf(-x))");
    for (DType t : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
      CAPTURE(t);
      Tensor x = randn({1000}).to(t);
      Tensor y = silu(x);
      CHECK(y.dtype() == t);
      CHECK(y.sizes() == x.sizes());
      const double tol = t == DType::Float64 ? 1e-14 : t == DType::Float32 ? 1e-6 : 1e-2;
      CHECK(max_diff64(y, silu_ref(x.to(DType::Float64))) < tol);
      CHECK(max_diff64(y, mt::silu(x)) <=
            (t == DType::Float64 || t == DType::Float32 ? 1e-6 : 1e-2));
    }
    // A transposed view and an int64 input (which computes in float32, as mt ops do).
    Tensor m = randn({7, 5}).t();
    CHECK(max_diff64(silu(m), silu_ref(m)) < 1e-6);
    Tensor i = arange(0, 6, 1, {.dtype = DType::Int64});
    CHECK(silu(i).dtype() == DType::Float32);
    CHECK(max_diff64(silu(i), silu_ref(i)) < 1e-6);
  }

  TEST_CASE("pointwise: statements, temporaries, C declarations, scalars and two outputs") {
    manual_seed(2);
    // The fused SiLU backward, written the way the user writes it.
    auto bwd = jit::pointwise({.name = "my_silu_bwd",
                               .inputs = {"g", "x"},
                               .body = "float s = 1.0f / (1.0f + expf(-x));\n"
                                       "return g * s * (1.0f + x * (1.0f - s));"});
    Tensor g = randn({64}), x = randn({64});
    CHECK(max_diff64(bwd(g, x), silu_backward(g, x)) < 1e-6);

    auto two = jit::pointwise({.name = "two",
                               .inputs = {"x", "y"},
                               .scalars = {"alpha"},
                               .outputs = {"sum", "pos"},
                               .body = "let t = x + alpha * y;\n"
                                       "sum = t;\n"
                                       "pos = t > 0 ? t : 0.0;  // a comparison and a select"});
    // y broadcasts: [3, 4] with [4].
    Tensor a = randn({3, 4}), b = randn({4});
    const Tensor in[] = {a, b};
    const double alpha[] = {0.5};
    auto outs = two.call(in, alpha);
    REQUIRE(outs.size() == 2);
    Tensor want = add(a, mul(b, 0.5));
    CHECK(outs[0].sizes() == Shape{3, 4});
    CHECK(max_diff64(outs[0], want) < 1e-6);
    CHECK(max_diff64(outs[1], relu(want)) < 1e-6);
    CHECK(error_of([&] { two(a, b); }) == "[two] takes 1 scalar: alpha, got 0");
    CHECK(error_of([&] { two.call(in); }) == "[two] takes 1 scalar: alpha, got 0");
    const Tensor one[] = {a};
    CHECK(error_of([&] { two.call(one, alpha); }) == "[two] takes 2 input tensors (x, y), got 1");
    CHECK(error_of([&] { (void)bwd(randn({3}), randn({4})); }).starts_with("[my_silu_bwd]"));

    // Logic and the functions that take two arguments.
    auto clamp = jit::pointwise("clamp01", "min(max(x, 0.0f), 1.0f) + (x != x && !(x == x))");
    Tensor c = from_vector(std::vector<float>{-1.0f, 0.25f, 3.0f});
    Tensor r = clamp(c);
    CHECK(r.data_ptr<float>()[0] == 0.0f);
    CHECK(r.data_ptr<float>()[1] == 0.25f);
    CHECK(r.data_ptr<float>()[2] == 1.0f);
  }

  TEST_CASE("pointwise: fake inputs give fake outputs of the broadcast shape and promoted dtype") {
    auto f = jit::pointwise("mix", "a * b");
    Tensor a = fake_empty({2, 1, 3}, {.dtype = DType::Float16, .device = Device("cuda:0")});
    Tensor b = fake_empty({4, 1}, {.dtype = DType::Float32, .device = Device("cuda:0")});
    Tensor y = f(a, b);
    CHECK(y.is_fake());
    CHECK(y.sizes() == Shape{2, 4, 3});
    CHECK(y.dtype() == DType::Float32);
    CHECK(y.device() == Device("cuda:0"));
    CHECK(error_of([&] {
            f(randn({4, 1}), a);
          }).starts_with("[mix] the inputs are on different devices (a has cpu, b has cuda:0)"));
  }

  TEST_CASE(
      "pointwise: the generated source names the functor, and every kernel compiles to CUBIN" *
      doctest::skip(no_nvrtc())) {
    auto f = jit::pointwise(
        {.name = "demo::fma", .inputs = {"x", "y"}, .scalars = {"s"}, .body = "x * y + s"});
    const std::string& src = f.cuda_source();
    CHECK(src.find("struct pw_demo__fma {") != std::string::npos);
    CHECK(src.find("#include \"pointwise.cuh\"") != std::string::npos);
    CHECK(src.find("//   x * y + s") != std::string::npos);
    CHECK(f.name_expression(DType::BFloat16, jit::PointwiseVariant::Vec) ==
          "pointwise_vec<mt::BFloat16, pw_demo__fma, 2, 1, 2>");
    const auto names = f.name_expressions();
    CHECK(names.size() == 12);
    for (int arch : {80, 90}) {
      CAPTURE(arch);
      const auto r = jit::compile(src, "demo__fma.cu", names, jit::default_options(), arch);
      CHECK(r.lowered_names.size() == names.size());
      CHECK(r.binary.size() > 1000);
    }
  }

  TEST_CASE("pointwise: the pointwise.cuh templates compute every variant (CPU emulation)") {
    using pw_emu::FmaAndDiff;
    constexpr long long n = 1000 + 3;  // not a multiple of any pack
    std::vector<float> x(n), y(n), o0(n, -1), o1(n, -1);
    for (long long i = 0; i < n; ++i) x[size_t(i)] = float(i) * 0.5f, y[size_t(i)] = float(i % 7);
    auto check = [&](const char* what) {
      CAPTURE(what);
      for (long long i = 0; i < n; ++i) {
        REQUIRE(o0[size_t(i)] == x[size_t(i)] * y[size_t(i)] + 2.0f);
        REQUIRE(o1[size_t(i)] == x[size_t(i)] - y[size_t(i)]);
      }
    };
    pw_emu::mt::PwPointers<4> ptr{{x.data(), y.data(), o0.data(), o1.data()}};
    pw_emu::mt::PwScalars sc{{2.0}};
    pw_emu::launch(3, 64, [&] { pw_emu::pointwise_vec<float, FmaAndDiff, 2, 2, 2>(ptr, n, sc); });
    check("vec");
    std::fill(o0.begin(), o0.end(), -1.f);
    std::fill(o1.begin(), o1.end(), -1.f);
    pw_emu::launch(2, 32, [&] { pw_emu::pointwise_flat<float, FmaAndDiff, 2, 2>(ptr, n, sc); });
    check("flat");

    // Strided: x is [m, k] read transposed from a [k, m] buffer, y broadcasts along rows.
    constexpr long long m = 6, k = 5;
    std::vector<float> xt(m * k), yr(k), s0(m * k), s1(m * k);
    for (long long i = 0; i < m * k; ++i) xt[size_t(i)] = float(i);
    for (long long j = 0; j < k; ++j) yr[size_t(j)] = float(10 * j);
    pw_emu::mt::PwPointers<4> sp{{xt.data(), yr.data(), s0.data(), s1.data()}};
    pw_emu::mt::PwLayout<4> l{};
    l.ndim = 2;
    l.sizes[0] = m, l.sizes[1] = k;
    l.strides[0][0] = 1, l.strides[0][1] = m;  // x[i, j] = xt[j * m + i]
    l.strides[1][0] = 0, l.strides[1][1] = 1;  // y[i, j] = yr[j]
    l.strides[2][0] = k, l.strides[2][1] = 1;
    l.strides[3][0] = k, l.strides[3][1] = 1;
    pw_emu::launch(1, 16,
                   [&] { pw_emu::pointwise_strided<float, FmaAndDiff, 2, 2>(sp, m * k, sc, l); });
    for (long long i = 0; i < m; ++i)
      for (long long j = 0; j < k; ++j) {
        const float xv = xt[size_t(j * m + i)], yv = yr[size_t(j)];
        CHECK(s0[size_t(i * k + j)] == xv * yv + 2.0f);
        CHECK(s1[size_t(i * k + j)] == xv - yv);
      }
  }

  // ------------------------------------------------------------------------ typed launch

  TEST_CASE("typed launch: parameter types come from a demangled signature") {
    CHECK(jit::split_parameter_types("void my_silu<float>(float const*, float*, long long)") ==
          std::vector<std::string>{"float const*", "float*", "long long"});
    CHECK(jit::split_parameter_types("void f(mt::PwPointers<2>, void (*)(int, int), int)") ==
          std::vector<std::string>{"mt::PwPointers<2>", "void (*)(int, int)", "int"});
    CHECK(jit::split_parameter_types("void g()").empty());
    CHECK(jit::grid_for(1000, 256) == 4);
    CHECK(jit::grid_for(0, 256) == 1);
    CHECK(error_of([] { jit::grid_for(int64_t(1) << 50, 128); })
              .starts_with("[jit] grid_for: 1125899906842624 items in blocks of 128 need "
                           "8796093022208 blocks"));
  }

  TEST_CASE("typed launch: arguments are checked against the kernel's signature before launching" *
            doctest::skip(no_nvrtc())) {
    auto k = jit::kernel(kRawSilu, "my_silu<float>");
    const auto params = k.parameters(90);
    REQUIRE(params.known);
    CHECK(params.types == std::vector<std::string>{"float const*", "float*", "long long"});
    Tensor x = randn({8}), y = empty({8});
    const int64_t n = 8;
    CHECK_NOTHROW(k.check_args(90, x, y, n));
    CHECK_NOTHROW(k.check_args(90, x, y, 8));  // an int that fits widens to long long
    CHECK(error_of([&] { k.check_args(90, x, y); }) ==
          "[jit] my_silu<float> takes 3 arguments (float const*, float*, long long), but the "
          "launch passed 2");
    CHECK(error_of([&] { k.check_args(90, x.to(DType::Float64), y, n); }) ==
          "[jit] my_silu<float>: argument 1 is a Tensor (float64, cpu), but the kernel's "
          "parameter 1 is float const* (float const*, float*, long long); convert the tensor "
          "with .to(), or instantiate the kernel for double");
    CHECK(error_of([&] { k.check_args(90, x, y, 2.5); }) ==
          "[jit] my_silu<float>: argument 3 is double 2.5, but the kernel's parameter 3 is long "
          "long (float const*, float*, long long); a floating value does not convert to an "
          "integer parameter implicitly; cast it");
    CHECK(error_of([&] { k.check_args(90, x, n, n); })
              .starts_with("[jit] my_silu<float>: argument 2 is long 8, but the kernel's parameter "
                           "2 is float*"));
    Tensor m = randn({4, 2}).t();
    CHECK(error_of([&] { k.check_args(90, m, y, n); }) ==
          "[jit] my_silu<float>: argument 1 (a Tensor of sizes [2, 4] and strides [1, 2]) is not "
          "contiguous, so a kernel that indexes it as x[i] would read the wrong elements; pass "
          "x.contiguous(), or mt::jit::allow_strided(x) if the kernel reads strides itself");
    CHECK_NOTHROW(k.check_args(90, jit::allow_strided(m), y, n));
    CHECK(error_of([&] {
            k.check_args(90, fake_like(x), y, n);
          }).starts_with("[jit] my_silu<float>: argument 1 is a fake tensor"));

    // float parameters take a double only when it is exactly a float.
    auto scale = jit::kernel(
        "__global__ void scale(float* y, float a, unsigned int n) { if (threadIdx.x < n) "
        "y[threadIdx.x] *= a; }",
        "scale");
    CHECK(scale.parameters(90).types ==
          std::vector<std::string>{"float*", "float", "unsigned int"});
    CHECK_NOTHROW(scale.check_args(90, y, 0.5, 8));
    CHECK(error_of([&] {
            scale.check_args(90, y, 0.1, 8);
          }).ends_with("0.1 is not exactly a float: pass a float (0.1f)"));
    CHECK(error_of([&] {
            scale.check_args(90, y, 0.5f, -1);
          }).ends_with("the value does not fit that type"));

    // extern "C": the symbol carries no types, so nothing can be checked.
    auto c = jit::kernel("extern \"C\" __global__ void plain(float* y) { y[0] = 1; }", "plain");
    CHECK_FALSE(c.parameters(90).known);
    CHECK_NOTHROW(c.check_args(90, y, 1, 2.0));
  }

  TEST_CASE("typed launch: a compile error names the user's file and shows the line" *
            doctest::skip(no_nvrtc())) {
    auto k = jit::kernel("__global__ void broken(float* y) { y[0] = undefined_name; }", "broken");
    const std::string e = error_of([&] { k.parameters(90); });
    CHECK(e.find("broken.cu") != std::string::npos);
    CHECK(e.find("undefined_name") != std::string::npos);
  }

  TEST_CASE(
      "typed launch: a wgmma kernel compiles to an sm_90a CUBIN only when it asks for "
      "the arch-specific target" *
      doctest::skip(no_nvrtc())) {
    const std::string refused = error_of([] { wgmma_fence_kernel(false).parameters(90); });
    CAPTURE(refused);
    CHECK(refused.starts_with("[jit] NVRTC failed to compile 'wg_fence.cu' for sm_90:\n"));
    CHECK(refused.find("not supported on .target 'sm_90'") != std::string::npos);
    CHECK(refused.find("needs the arch-specific target sm_90a: ask for it with "
                       "KernelSpec::arch_specific = true") != std::string::npos);

    const jit::UserKernel k = wgmma_fence_kernel(true);
    CHECK(k.spec().arch_specific);
    CHECK(k.parameters(90).types == std::vector<std::string>{"float*", "float"});
    Tensor y = empty({128});
    CHECK_NOTHROW(k.check_args(90, y, 1.5f));
    const auto r = jit::kernel_cache().get(jit::kernel_request(k.spec(), 90, "wg_fence"));
    CHECK(r->target == "sm_90a");
    CHECK(r->is_cubin());
    CHECK(r->binary.starts_with("\177ELF"));
    CHECK(error_of([&] { k.parameters(80); }) ==
          "[jit] 'wg_fence.cu' asks for the arch-specific target, which exists from sm_90a on; "
          "this device is sm_80: compile it without arch_specific (and without the Hopper-only "
          "instructions) or run it on a compute capability 9.0 or later GPU");
  }

  TEST_CASE("typed launch: CPU tensors and builds without a GPU get a clear error" *
            doctest::skip(!no_gpu())) {
    auto k = jit::kernel(kRawSilu, "my_silu<float>");
    Tensor x = randn({8}), y = empty({8});
    const std::string e = error_of([&] { k.launch({.grid = 1}, x, y, int64_t(8)); });
    CHECK(
        e.starts_with("[jit] my_silu<float>: argument 1 is a Tensor on cpu; a CUDA kernel "
                      "takes CUDA tensors"));
  }

  // --------------------------------------------------------------------------- on cuda:0

  TEST_CASE("pointwise (gpu): a user's SiLU matches mt::silu for every dtype, layout and tail" *
            doctest::skip(no_gpu())) {
    manual_seed(3);
    auto silu = jit::pointwise("my_silu", "x / (1.0f + expf(-x))");
    const Device cuda("cuda:0");
    for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
      for (int64_t n : {1, 7, 4096, 100003}) {
        CAPTURE(t);
        CAPTURE(n);
        Tensor x = randn({n}).to(t).to(cuda);
        Tensor y = silu(x);
        CHECK(y.device() == cuda);
        const double tol = t == DType::Float64 ? 1e-14 : t == DType::Float32 ? 2e-6 : 1e-2;
        CHECK(max_diff64(y, silu_ref(x)) < tol);
        // Unaligned (flat) and strided inputs.
        Tensor u = x.slice(0, n > 1 ? 1 : 0, n);
        CHECK(max_diff64(silu(u), silu_ref(u)) < tol);
      }
    Tensor m = randn({33, 17}).to(cuda).t();
    CHECK(max_diff64(silu(m), silu_ref(m)) < 2e-6);
  }

  TEST_CASE("pointwise (gpu): broadcasting, scalars and two outputs on cuda:0" *
            doctest::skip(no_gpu())) {
    manual_seed(4);
    auto two = jit::pointwise({.name = "two",
                               .inputs = {"x", "y"},
                               .scalars = {"alpha"},
                               .outputs = {"sum", "pos"},
                               .body = "let t = x + alpha * y; sum = t; pos = t > 0 ? t : 0.0;"});
    Tensor a = randn({300, 40}), b = randn({40});
    const Device cuda("cuda:0");
    const Tensor in[] = {a.to(cuda), b.to(cuda)};
    const double alpha[] = {-1.5};
    auto outs = two.call(in, alpha);
    Tensor want = add(a, mul(b, -1.5));
    CHECK(max_diff64(outs[0], want) < 1e-5);
    CHECK(max_diff64(outs[1], relu(want)) < 1e-5);
  }

  TEST_CASE("typed launch (gpu): a raw kernel runs on cuda:0 through launch(config, args...)" *
            doctest::skip(no_gpu())) {
    manual_seed(5);
    const Device cuda("cuda:0");
    for (int64_t n : {1, 1000, 1 << 20}) {
      Tensor x = randn({n}).to(cuda), y = empty({n}, {.device = cuda});
      auto k = jit::kernel(kRawSilu, "my_silu<float>");
      k.launch({.grid = jit::grid_for(n)}, x, y, n);
      CHECK(max_diff64(y, silu_ref(x)) < 2e-6);
      auto kh = jit::kernel(kRawSilu, "my_silu<mt::Half>");
      Tensor xh = x.to(DType::Float16), yh = empty({n}, {.dtype = DType::Float16, .device = cuda});
      kh.launch({.grid = jit::grid_stride_for(n, 0)}, xh, yh, n);
      CHECK(max_diff64(yh, silu_ref(xh)) < 1e-2);
      CHECK(error_of([&] { kh.launch({.grid = 1}, x, yh, n); })
                .starts_with("[jit] my_silu<mt::Half>: argument 1 is a Tensor (float32, cuda:0), "
                             "but the kernel's "
                             "parameter 1 is mt::Half const*"));
    }
  }
}

TEST_SUITE("user kernels") {
  TEST_CASE("typed launch (gpu): an sm_90a kernel (wgmma.fence) runs on a 9.0 device" *
            doctest::skip(no_gpu())) {
    const cuda::DeviceProps& props = cuda::device_props(0);
    const jit::UserKernel k = wgmma_fence_kernel(true);
    const Device dev("cuda:0");
    Tensor y = empty({128}, {.device = dev});
    if (props.major * 10 + props.minor < 90) {
      const std::string e = error_of([&] { k.launch({.grid = 1, .block = 128}, y, 1.5f); });
      CHECK(e.find("asks for the arch-specific target") != std::string::npos);
      return;
    }
    if (props.major * 10 + props.minor != 90) {
      MESSAGE("the sm_90a launch is skipped: cuda:0 is " << props.major << "." << props.minor
                                                         << ", wgmma needs 9.0");
      return;
    }
    CHECK(k.on(0).target() == "sm_90a");
    k.launch({.grid = 1, .block = 128}, y, 1.5f);
    const Tensor h = y.cpu();
    for (int64_t i = 0; i < 128; ++i) CHECK(h.data_ptr<float>()[i] == 1.5f + float(i));
  }

  TEST_CASE(
      "custom op (gpu): a user's pointwise CUDA kernel passes gradcheck and opcheck on cuda:0, "
      "and a wrong backward is caught" *
      doctest::skip(no_gpu())) {
    static const jit::Pointwise fwd = jit::pointwise("t_silu", "x / (1.0f + expf(-x))");
    static const jit::Pointwise bwd =
        jit::pointwise({.name = "t_silu_bwd",
                        .inputs = {"g", "x"},
                        .body = "float s = sigmoid(x); return g * s * (1.0f + x * (1.0f - s));"});
    static const jit::Pointwise wrong =
        jit::pointwise({.name = "t_silu_wrong", .inputs = {"g", "x"}, .body = "g * sigmoid(x)"});
    // The backward is an op of its own, so that mt::compile (opcheck's test_compile)
    // captures it: a kernel called directly inside a backward leaves no node to replay.
    auto make_backward = [](const char* name, const jit::Pointwise& grad) {
      auto kernel = [&grad](const Tensor& g, const Tensor& x) { return grad(g, x); };
      auto op = custom_op(name, kernel);
      op.register_kernel(DeviceType::CUDA, kernel);
      op.register_fake(kernel);  // fake in, fake out
      return op;
    };
    auto bwd_op = make_backward("user_kernels_test::silu_bwd", bwd);
    auto wrong_op = make_backward("user_kernels_test::silu_wrong_bwd", wrong);
    auto make = [](const char* name, const auto& grad_op) {
      auto op = custom_op(name, [](const Tensor& x) { return fwd(x); });
      op.register_kernel(DeviceType::CUDA, [](const Tensor& x) { return fwd(x); });
      op.register_fake([](const Tensor& x) { return fwd(x); });  // fake in, fake out
      op.register_autograd(
          [&grad_op](AutogradContext& ctx, const Tensor& g) { return grad_op(g, ctx.saved()[0]); },
          [](AutogradContext& ctx, const Tensor& x, const Tensor&) { ctx.save_for_backward({x}); });
      return op;
    };
    auto good = make("user_kernels_test::silu", bwd_op);
    auto bad = make("user_kernels_test::silu_wrong", wrong_op);
    const Device gpu("cuda:0");
    manual_seed(6);
    Tensor xd = randn({6}, {.dtype = DType::Float64}).to(gpu).requires_grad_();
    GradcheckResult gc =
        gradcheck([&](const std::vector<Tensor>& in) { return good(in[0]); }, {xd});
    CHECK_MESSAGE(gc.ok, gc.message);
    OpCheckReport r = opcheck(
        good.handle(), {Stack{randn({4, 5}).to(gpu)}, Stack{randn({7}).view({7, 1}).t().to(gpu)}});
    CHECK_MESSAGE(r.ok(), r.str());
    GradcheckResult gw = gradcheck([&](const std::vector<Tensor>& in) { return bad(in[0]); }, {xd});
    CHECK_FALSE(gw.ok);
    CHECK(gw.message.starts_with("[gradcheck] Jacobian mismatch"));
  }
}
