// SPDX-License-Identifier: MIT
// The ops with kernels of their own: one folder each under kernels/ops/ (registration, CPU
// and CUDA kernels, device code, the op harness's samples), listed once in
// kernels/ops/folders.def (Note [One folder an op]).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dispatcher/kernel_function.h"
#include "kernels/jit/builtin.h"

namespace mt::ops {

// One sample of an op for the op harness (tests/test_ops.cpp): the arguments, and whether
// gradcheck runs on it (false: values only, for kinks, ties and huge inputs).
struct OpSample {
  std::string label;
  Stack args;
  bool grad = true;
};

// An op's samples and its float64 reference: `reference` gets the sample's arguments with
// every tensor (a list's too) made a contiguous float64 CPU copy, and returns the op's outputs
// in float64, computed with plain loops.
struct OpSamples {
  std::string op;  // "mt::silu_backward"
  std::vector<OpSample> samples;
  std::function<std::vector<Tensor>(const Stack& f64_args)> reference;
  bool double_backward = true;
};

// A sample's tensor: values uniform in [lo, hi), the same for the same seed, in dtype t
// (rounded for integers, so lo = 0, hi = 1 gives a bool tensor of 0s and 1s).
Tensor sample_tensor(const Shape& shape, DType t, uint64_t seed, double lo = -2, double hi = 2);

// How a sample tensor of shape s lies in memory: its last two dims transposed, a slice with
// step 2 of the last dim, or dim 0 expanded from size 1 (stride 0).
enum class SampleLayout { Transposed, Stepped, Expanded };

// sample_tensor's values in a non-contiguous view of shape `shape` laid out as asked.
Tensor sample_view(SampleLayout layout, const Shape& shape, DType t, uint64_t seed, double lo = -2,
                   double hi = 2);

// Sample tensors seeded seed, seed + 1, ... in the order they are made (a braced list of
// samples evaluates left to right, so each keeps its seed as samples are added before it).
struct SampleSeeds {
  uint64_t seed = 1;
  Tensor operator()(const Shape& s, DType t = DType::Float64, double lo = -2, double hi = 2) {
    return sample_tensor(s, t, seed++, lo, hi);
  }
  Tensor view(SampleLayout l, const Shape& s, DType t = DType::Float64, double lo = -2,
              double hi = 2) {
    return sample_view(l, s, t, seed++, lo, hi);
  }
};

// A float64 CPU tensor of `shape` holding `v` (row-major): what a reference returns.
Tensor f64_tensor(const Shape& shape, const std::vector<double>& v);

// A folder's entry points, named after it: register_NAME(), NAME_kernel_files(),
// NAME_samples() (declared in its header, kernels/ops/NAME/NAME.h).
struct OpFolder {
  const char* name;  // "silu": kernels/ops/silu/
  void (*register_ops)();
  std::vector<jit::EmbeddedKernelFile> (*kernel_files)();  // its .cu files, for the tests
  std::vector<OpSamples> (*samples)();
};

// Every folder of kernels/ops/folders.def, in its order.
std::span<const OpFolder> op_folders();

}  // namespace mt::ops
