// SPDX-License-Identifier: MIT
// The runtime's CUDA copy and fill (behind Tensor::copy_ and fill_) and the device kernels
// the kernel library installs to complete them. Internal: not installed.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda.h"

namespace mt::cuda {

// Copies between two tensors of the same shape where at least one is on CUDA. Done now:
// contiguous, same dtype (host->device, device->host, device->device on one device), on
// the current stream; a copy to the host waits for it. Other cases go to the kernel
// installed with set_copy_kernel, or throw "not yet supported". Called by Tensor::copy_.
void copy(const Tensor& dst, const Tensor& src);
// Fills a CUDA tensor with one value: zero with a memset, others through set_fill_kernel.
void fill(const Tensor& t, double value);
// Device kernels for what copy() and fill() cannot do with a memcpy or memset, installed
// by the kernel library (kernels/cuda_host/device_hooks.cpp) when the library initializes; copy,
// fill and random_kernel() run that first (Note [Library initialization]). The copy kernel gets
// both tensors on one CUDA device (strided or of different dtypes); both run on the current stream.
// Each setter returns the kernel it replaces; nullptr removes it.
using CopyKernel = void (*)(const Tensor& dst, const Tensor& src);
using FillKernel = void (*)(const Tensor& t, double value);
CopyKernel set_copy_kernel(CopyKernel fn);
FillKernel set_fill_kernel(FillKernel fn);
// Fills a contiguous CUDA tensor with the counter-based generator's stream (mt::rand,
// or mt::randn when normal) from counter `base` of `seed`. random_kernel() gives the
// kernel library's; nullptr where there is none (then rand/randn draw on
// the host and copy).
using RandomKernel = void (*)(const Tensor& t, uint64_t seed, uint64_t base, bool normal);
RandomKernel set_random_kernel(RandomKernel fn);
RandomKernel random_kernel();

}  // namespace mt::cuda
