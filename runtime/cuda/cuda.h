// The CUDA backend's face to the rest of the runtime. libcuda.so.1 is opened with
// dlopen on first use, so every function here works (or throws a clear mt::Error)
// on a machine without a GPU or driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/device.h"
#include "runtime/storage.h"

namespace mt {
class Tensor;
}

namespace mt::cuda {

// False where the driver is missing, fails to initialise, or sees no device.
bool is_available();
int device_count();
// Why is_available() is false, in one line ("libcuda.so.1 not found: ..."); empty if true.
std::string unavailable_reason();

// The caching allocator of cuda:index (throws if CUDA is unavailable or index is out of range).
Allocator* caching_allocator(int index);

// Copies between any two tensors of the same shape where at least one is on CUDA
// (dtype conversion and strided layouts included). Called by mt::Tensor::copy_.
void copy(const Tensor& dst, const Tensor& src);
// Fills a CUDA tensor with one value.
void fill(const Tensor& t, double value);
// Waits for all work on the current stream of cuda:index.
void synchronize(int index = 0);

}  // namespace mt::cuda
