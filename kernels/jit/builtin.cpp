// SPDX-License-Identifier: MIT
#include "kernels/jit/builtin.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/cuda/cuda.h"
#include "runtime/error.h"

namespace mt::jit {

static_assert(sizeof(StridedLayout) == 8 + 8 * kMaxKernelDims * (1 + kMaxKernelOperands),
              "StridedLayout must have no padding the device could read differently");
static_assert(offsetof(StridedLayout, sizes) == 8 && alignof(StridedLayout) == 8);

std::string_view kernel_type_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Float16:
      return "mt::Half";
    case DType::BFloat16:
      return "mt::BFloat16";
    case DType::Int64:
      return "long long";
    case DType::Bool:
      return "bool";
  }
  MT_ASSERT(false, "unknown dtype {}", int(t));
  return "";
}

std::string fill_name_expression(DType t, bool strided) {
  return fmt::format("{}<{}>", strided ? "fill_strided" : "fill", kernel_type_name(t));
}

std::string copy_cast_name_expression(DType dst, DType src, bool strided) {
  return fmt::format("{}<{}, {}>", strided ? "copy_cast_strided" : "copy_cast",
                     kernel_type_name(dst), kernel_type_name(src));
}
std::string copy_cast_vec_name_expression(DType dst, DType src) {
  return fmt::format("copy_cast_vec<{}, {}>", kernel_type_name(dst), kernel_type_name(src));
}
// copy_cast_vec's pack (Note [Vector casts] in copy.cu): K elements, each side aligned to
// min(16, K * its size) bytes.
int64_t copy_cast_vec_elements(DType dst, DType src) {
  const int64_t narrow = int64_t(std::min(dtype_size(dst), dtype_size(src)));
  return std::min<int64_t>(8, 16 / narrow);
}

std::vector<EmbeddedKernelFile> embedded_kernels() {
  EmbeddedKernelFile copy{"copy.cu", {}};
  for (int i = 0; i < kNumDTypes; ++i) {
    copy.name_expressions.push_back(fill_name_expression(DType(i), false));
    copy.name_expressions.push_back(fill_name_expression(DType(i), true));
  }
  for (int d = 0; d < kNumDTypes; ++d)
    for (int s = 0; s < kNumDTypes; ++s) {
      for (bool strided : {false, true})
        copy.name_expressions.push_back(copy_cast_name_expression(DType(d), DType(s), strided));
      copy.name_expressions.push_back(copy_cast_vec_name_expression(DType(d), DType(s)));
    }
  return {copy};
}

KernelSpec builtin_spec(std::string_view file) {
  KernelSpec spec;
  spec.name = std::string(file);
  return spec;
}

StridedLayout make_strided_layout(std::span<const int64_t> sizes,
                                  std::initializer_list<std::span<const int64_t>> strides) {
  const int ops = int(strides.size());
  MT_CHECK(ops >= 1 && ops <= kMaxKernelOperands,
           "[jit] a strided kernel takes 1 to {} operands, not {}", kMaxKernelOperands, ops);
  for (const auto& s : strides)
    MT_CHECK(s.size() == sizes.size(), "[jit] {} strides for {} sizes", s.size(), sizes.size());
  // Outer to inner: drop size-1 dims, merge a dim into the one outside it when
  // every operand steps over the inner dim exactly (stride_outer == stride * size).
  std::vector<int64_t> sz;
  std::vector<std::array<int64_t, kMaxKernelOperands>> st;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !sz.empty();
    int k = 0;
    for (const auto& s : strides) merge = merge && st.back()[size_t(k++)] == s[d] * sizes[d];
    if (merge) {
      sz.back() *= sizes[d];
      k = 0;
      for (const auto& s : strides) st.back()[size_t(k++)] = s[d];
    } else {
      sz.push_back(sizes[d]);
      st.push_back({});
      k = 0;
      for (const auto& s : strides) st.back()[size_t(k++)] = s[d];
    }
  }
  if (sz.empty()) sz.push_back(1), st.push_back({});
  MT_CHECK(sz.size() <= size_t(kMaxKernelDims),
           "[jit] a strided kernel handles up to {} dims after merging; this layout has {}",
           kMaxKernelDims, sz.size());
  StridedLayout l{};
  l.ndim = int(sz.size());
  for (size_t d = 0; d < sz.size(); ++d) {
    l.sizes[d] = sz[d];
    for (int k = 0; k < ops; ++k) l.strides[k][d] = st[d][size_t(k)];
  }
  return l;
}

namespace {

// 256 threads a block, one block per 256 work items, between 1 and max_blocks blocks.
LaunchShape blocks_of_256(int64_t work_items, int64_t max_blocks) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = std::clamp<int64_t>((work_items + kBlock - 1) / kBlock, 1, max_blocks);
  return {Dim3{unsigned(blocks), 1, 1}, Dim3{unsigned(kBlock), 1, 1}};
}

}  // namespace

LaunchShape elementwise_launch_shape(int64_t work_items, int sm_count) {
  constexpr int64_t kBlocksPerSm = 8;
  return blocks_of_256(work_items, std::max<int64_t>(1, int64_t(sm_count) * kBlocksPerSm));
}

// Note [SiLU's launch shape]
// The vec kernels are grid-stride like the others, so any grid is correct; which grid is
// fastest was measured on the H200 with bench_silu (the figures and the sweep are in
// docs/results/2026-12-03-h200-silu-launch-shape.json). With the grid capped at 8 blocks a
// SM, each thread loops over many packs and the float32 forward pass stayed well short of a
// copy of the same bytes. One block per 256 work items, however many waves that makes (the
// hardware hands a finished block's place to the next), so that each thread runs its loop
// once, brought it to a copy's speed; 2 packs a thread (gpu::kSiluUnroll) did a little better
// than 4, 1 was slower, and 128 threads a block matched 256. The generic elementwise
// kernels keep the capped grid: uncapped, the sigmoid-then-multiply pair got slower.
LaunchShape vec_launch_shape(int64_t work_items) {
  return blocks_of_256(work_items, 0x7fffffff);  // gridDim.x's limit
}

bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

namespace {

KernelTable<2 * kNumDTypes> g_fill;
KernelTable<3 * kNumDTypes * kNumDTypes> g_copy;  // contiguous, strided, vector

}  // namespace

int sm_count(int device) { return cuda::device_props(device).sm_count; }

void launch_fill(int device, CUstream_st* stream, DType t, void* out, int64_t n, const void* value,
                 const StridedLayout* layout) {
  if (n <= 0) return;
  long long count = n;
  const bool strided = layout != nullptr;
  StridedLayout l = strided ? *layout : StridedLayout{};
  void* args[] = {&out, &count, const_cast<void*>(value), &l};
  const Kernel& k = g_fill.get(device, int(t) * 2 + strided, "copy.cu",
                               [&] { return fill_name_expression(t, strided); });
  const auto s = elementwise_launch_shape(n, sm_count(device));
  k.launch(s.grid, s.block, 0, stream, args);
}

void launch_copy_cast(int device, CUstream_st* stream, DType dst_t, void* dst, DType src_t,
                      const void* src, int64_t n, const StridedLayout* layout) {
  if (n <= 0) return;
  long long count = n;
  const bool strided = layout != nullptr;
  StridedLayout l = strided ? *layout : StridedLayout{};
  void* args[] = {&dst, &src, &count, &l};
  const int pair = int(dst_t) * kNumDTypes + int(src_t);
  const int64_t K = copy_cast_vec_elements(dst_t, src_t);
  auto aligned = [K](const void* p, DType t) {
    return reinterpret_cast<uintptr_t>(p) %
               uint64_t(std::min<int64_t>(16, K * int64_t(dtype_size(t)))) ==
           0;
  };
  if (!strided && n >= 2 * K && aligned(dst, dst_t) && aligned(src, src_t)) {
    const Kernel& k = g_copy.get(device, pair * 3 + 2, "copy.cu",
                                 [&] { return copy_cast_vec_name_expression(dst_t, src_t); });
    void* vec_args[] = {&dst, &src, &count};
    const auto s = vec_launch_shape((n / K + 1) / 2);
    k.launch(s.grid, s.block, 0, stream, vec_args);
    return;
  }
  const Kernel& k = g_copy.get(device, pair * 3 + strided, "copy.cu",
                               [&] { return copy_cast_name_expression(dst_t, src_t, strided); });
  const auto s = elementwise_launch_shape(n, sm_count(device));
  k.launch(s.grid, s.block, 0, stream, args);
}

}  // namespace mt::jit
