// SPDX-License-Identifier: MIT
// The built-in device kernels (kernels/cuda_device/*.cu): their name expressions, the
// layouts and launch shapes they take, and launchers on raw device pointers for the
// runtime's copies and fills (kernels/cuda_host/device_hooks.cpp). An op folder's kernels are
// its own (kernels/ops/silu/silu.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cuda_device/layout.h"
#include "kernels/jit/module.h"
#include "runtime/dtype.h"

namespace mt::jit {

// The device type of a dtype in kernel templates: "float", "double", "mt::Half",
// "mt::BFloat16", "long long", "bool".
std::string_view kernel_type_name(DType t);

// "fill_strided<float>", "copy_cast_strided<mt::Half, long long>", ...
std::string fill_name_expression(DType t, bool strided);
std::string copy_cast_name_expression(DType dst, DType src, bool strided);
std::string copy_cast_vec_name_expression(DType dst, DType src);  // Note [Vector casts]
int64_t copy_cast_vec_elements(DType dst, DType src);             // its pack: K elements

// The kernel files of the launchers here (copy.cu), each with every name expression it
// is meant to be used with (all dtypes); gpu::all_kernel_files() adds the op kernels'
// files, each op folder its own (ops::OpFolder::kernel_files), and the tests compile each
// list whole for several architectures.
struct EmbeddedKernelFile {
  std::string file;  // "copy.cu"
  std::vector<std::string> name_expressions;
};
std::vector<EmbeddedKernelFile> embedded_kernels();

// The spec of an embedded file: default options, one module per kernel.
KernelSpec builtin_spec(std::string_view file);

// The layout of an elementwise kernel over `sizes`, one stride list per operand
// (operand 0 the output): size-1 dims are dropped and dims that are contiguous in
// every operand merged, so a sliced or broadcast view often needs only 1 or 2.
// Throws mt::Error if more than kMaxKernelDims remain.
StridedLayout make_strided_layout(std::span<const int64_t> sizes,
                                  std::initializer_list<std::span<const int64_t>> strides);

// Grid and block of a grid-stride kernel with `work_items` independent items
// (elements, or packs of the vec kernels): 256 threads a block, at most enough
// blocks to fill every SM once (8 a SM).
struct LaunchShape {
  Dim3 grid, block;
};
LaunchShape elementwise_launch_shape(int64_t work_items, int sm_count);
// Grid and block of the vec kernels (SiLU's, jit::pointwise's): 256 threads a block and one
// block for every 256 work items (packs / unroll), however many waves that makes, so a
// thread runs its loop once. Note [SiLU's launch shape].
LaunchShape vec_launch_shape(int64_t work_items);
// True when every pointer is 16-byte aligned (the vec kernels' condition).
bool aligned16(std::initializer_list<const void*> ptrs);

// Cuts pairs of n[i] elements (self[i], other[i]: device pointers) into the tables of
// the multi-tensor kernels (Note [Multi-tensor apply] in kernels/cuda_device/layout.h) and calls
// launch(table, blocks) for each full table and the last one: one call for up to
// kForeachMaxTensors pairs and kForeachMaxBlocks chunks. Empty pairs take no block.
template <typename Launch>
void foreach_tables(std::span<void* const> self, std::span<const void* const> other,
                    std::span<const int64_t> n, Launch&& launch) {
  ForeachTable table;
  int ntensors = 0, nblocks = 0;
  auto flush = [&] {
    if (nblocks > 0) launch(table, nblocks);
    ntensors = nblocks = 0;
  };
  auto add_tensor = [&](size_t i) {
    table.self[ntensors] = self[i];
    table.other[ntensors] = other[i];
    table.numel[ntensors++] = n[i];
  };
  for (size_t i = 0; i < self.size(); ++i) {
    if (n[i] == 0) continue;
    if (ntensors == kForeachMaxTensors) flush();
    add_tensor(i);
    const int64_t chunks = (n[i] + kForeachChunk - 1) / kForeachChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (nblocks == kForeachMaxBlocks) {  // full: launch it, then the pair's other chunks
        flush();
        add_tensor(i);
      }
      table.block_tensor[nblocks] = static_cast<unsigned char>(ntensors - 1);
      table.block_chunk[nblocks++] = int(c);
    }
  }
  flush();
}

// The SM count of cuda:device (queried once).
int sm_count(int device);

// Kernel pointers per (device, slot), filled on first use: a launch after the first
// costs one atomic load instead of a get_kernel lookup (which builds a key string).
// A slot stands for one name expression of one embedded file.
inline constexpr int kCachedDevices = 16;
template <int N>
struct KernelTable {
  std::atomic<const Kernel*> slots[kCachedDevices][N] = {};
  template <typename NameFn>
  const Kernel& get(int device, int slot, std::string_view file, NameFn&& name) {
    const bool cached = device >= 0 && device < kCachedDevices;
    if (cached)
      if (const Kernel* k = slots[device][slot].load(std::memory_order_acquire)) return *k;
    const Kernel& k = get_kernel(device, builtin_spec(file), name());
    if (cached) slots[device][slot].store(&k, std::memory_order_release);
    return k;
  }
};

// Launchers on device pointers of cuda:device, on `stream`. n is the element count;
// a null layout means every operand is contiguous. fill takes one element of dtype t at
// `value` (host).
void launch_fill(int device, CUstream_st* stream, DType t, void* out, int64_t n, const void* value,
                 const StridedLayout* layout = nullptr);
void launch_copy_cast(int device, CUstream_st* stream, DType dst_t, void* dst, DType src_t,
                      const void* src, int64_t n, const StridedLayout* layout = nullptr);

}  // namespace mt::jit
