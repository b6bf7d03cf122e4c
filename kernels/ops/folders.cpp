// SPDX-License-Identifier: MIT
// The list of the ops with kernels of their own (kernels/ops/folders.def) as an array.
#include "kernels/ops/folders.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>

#include "kernels/ops/op_folder_count.h"  // MT_NUM_OP_FOLDERS, written by kernels/ops/meson.build
#include "runtime/view.h"

#define MT_OP_FOLDER(name)                                    \
  namespace mt::ops {                                         \
  void register_##name();                                     \
  std::vector<jit::EmbeddedKernelFile> name##_kernel_files(); \
  std::vector<OpSamples> name##_samples();                    \
  }
#include "kernels/ops/folders.def"
#undef MT_OP_FOLDER

namespace mt::ops {

// Note [One folder an op]
// An op with kernels of its own (a fused forward and backward, a reduction, a stencil)
// lives in one folder, kernels/ops/NAME/: its registration (register_NAME: every key
// through one custom_op handle), its CPU kernel, its CUDA launcher and device code
// (NAME.cu, embedded for NVRTC), and its samples for the op harness. Everything else finds
// the folder through its one line in kernels/ops/folders.def: the library's initialization
// calls register_NAME, the build compiles the folder (kernels/ops/meson.build reads the
// same file, and passes the count it read as MT_NUM_OP_FOLDERS), the CUBIN tests compile
// its kernel files, and the op harness runs its samples. What several ops share (the
// CPU loops, the AVX-512 exp, the launch helpers, the elementwise row an op may also have)
// stays in kernels/cpu, kernels/cuda_host and kernels/jit: a folder whose kernels are shared
// (reduce's loops also take mse_loss's mean, matmul's are BLAS and cuBLAS) holds the rest,
// and its NAME_kernel_files() returns none.
namespace {
constexpr OpFolder kOpFolders[] = {
#define MT_OP_FOLDER(name) {#name, register_##name, name##_kernel_files, name##_samples},
#include "kernels/ops/folders.def"
#undef MT_OP_FOLDER
};
}  // namespace

// The build and the preprocessor read folders.def alike: a folder the build did not compile
// (or one it compiled that is not in the array) fails here, not at link or run time.
static_assert(std::size(kOpFolders) == MT_NUM_OP_FOLDERS,
              "kernels/ops/meson.build and kernels/ops/folders.cpp read a different number of "
              "entries from kernels/ops/folders.def: write each MT_OP_FOLDER(NAME) on a line "
              "of its own");

std::span<const OpFolder> op_folders() { return kOpFolders; }

Tensor sample_tensor(const Shape& shape, DType t, uint64_t seed, double lo, double hi) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = is_floating(t) ? dist(rng) : std::round(dist(rng));
  return from_vector(v, shape).to(t);
}

Tensor sample_view(SampleLayout layout, const Shape& shape, DType t, uint64_t seed, double lo,
                   double hi) {
  Shape base = shape;
  const size_t n = base.size();
  switch (layout) {
    case SampleLayout::Transposed:
      std::swap(base[n - 2], base[n - 1]);
      return detail::transpose_of(sample_tensor(base, t, seed, lo, hi), -1, -2);
    case SampleLayout::Stepped:
      base[n - 1] *= 2;
      return detail::slice_of(sample_tensor(base, t, seed, lo, hi), -1, 0, base[n - 1], 2);
    case SampleLayout::Expanded:
      base[0] = 1;
      return detail::expand_of(sample_tensor(base, t, seed, lo, hi), shape);
  }
  return {};
}

Tensor f64_tensor(const Shape& shape, const std::vector<double>& v) {
  Tensor out = empty(shape, {.dtype = DType::Float64});
  MT_ASSERT(int64_t(v.size()) == out.numel());
  std::copy(v.begin(), v.end(), out.data_ptr<double>());
  return out;
}

}  // namespace mt::ops
