// SPDX-License-Identifier: MIT
// Reductions on the GPU (kernels/cuda_device/reduce.cu): the input is brought to a contiguous
// [O, R, I] block (in place when it already is one, else by a copy that moves the reduced
// dims last), then reduce_rows (I == 1) or reduce_cols runs, over chunks of R and then
// over the chunks' partials until one is left.
#include <algorithm>

#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/cuda_host/launch.h"
#include "kernels/cuda_host/names.h"
#include "kernels/jit/builtin.h"
#include "runtime/view.h"

namespace mt::gpu {
namespace {

constexpr int kReduceSlots = 2 * kNumDTypes * 2 * 2;  // kind, input dtype, rows/cols, from_acc
jit::KernelTable<kReduceSlots> g_reduce_kernels;
constexpr int64_t kAccBytes = 16;  // sizeof(mt::Acc<A>) for every A

// Targets of the chunking, independent of the device so results are too: about 8K
// warps for rows (each reads at least 256 elements), 256K threads for columns (each at
// least 64 rows). A column's next pass is a thread looping over its chunks' partials, so
// chunks stay few: a bias gradient over [4096, 1024] in 256 chunks of 16 rows spent 19 us
// of the H100's time in that loop, against 6.6 us in the first pass (kernel_profile.py).
constexpr int64_t kRowWarps = 8192, kRowMinChunk = 256;
constexpr int64_t kColThreads = 1 << 18, kColMinChunk = 64;
// Up to these lengths a reduction is one pass (one launch, no partials): a warp reads
// at most 128 elements a lane, a thread at most 256 rows. A second launch costs the host
// more than that (about 5 us on the GPU host), and small reductions are the common case
// in a training step (bias gradients, the loss's mean).
constexpr int64_t kRowSinglePass = 4096, kColSinglePass = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Block {
  int64_t outer = 1, len = 1, inner = 1;
};

// x as [O, R, I] if its reduced dims (size-1 dims aside) are one run and x is
// contiguous; false otherwise.
bool as_block(const Tensor& x, std::span<const int64_t> dims, Block* b) {
  if (!x.is_contiguous()) return false;
  int phase = 0;  // 0: before the run, 1: in it, 2: after it
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.size(d);
    if (size == 1) continue;
    const bool reduced = dims.empty() || std::binary_search(dims.begin(), dims.end(), d);
    if (reduced && phase == 2) return false;
    if (reduced) phase = 1;
    if (!reduced && phase == 1) phase = 2;
    (reduced ? b->len : phase == 0 ? b->outer : b->inner) *= size;
  }
  return true;
}

// One pass over in ([outer, len, inner] of `in_t`, or of partials when from_acc).
// Writes the result, or partials and then the passes over them.
void pass(ReduceKind kind, const Tensor& like, const void* in, DType in_t, bool from_acc,
          const Block& b, const Tensor& out, long long* indices, double scale) {
  const int dev = like.device().index;
  const bool rows = b.inner == 1;
  int64_t chunks;
  if (b.len <= (rows ? kRowSinglePass : kColSinglePass))
    chunks = 1;
  else if (rows)
    chunks = std::clamp<int64_t>(ceil_div(kRowWarps, b.outer), 1, ceil_div(b.len, kRowMinChunk));
  else
    chunks = std::clamp<int64_t>(ceil_div(kColThreads, b.outer * b.inner), 1,
                                 ceil_div(b.len, kColMinChunk));
  long long chunk_len = ceil_div(b.len, chunks);
  chunks = ceil_div(b.len, chunk_len);
  Tensor partial;
  void* pp = nullptr;
  if (chunks > 1) {
    partial = empty({b.outer * chunks * b.inner * (kAccBytes / 8)},
                    {.dtype = DType::Int64, .device = like.device()});
    pp = partial.data_ptr();
  }
  const DType out_t = reduce_out_dtype(kind, in_t);
  const int slot = ((int(kind) * kNumDTypes + int(in_t)) * 2 + rows) * 2 + from_acc;
  const jit::Kernel& k = g_reduce_kernels.get(dev, slot, "reduce.cu", [&] {
    return reduce_name_expression(kind, rows, in_t, out_t, from_acc);
  });
  void* po = pp ? nullptr : out.data_ptr();
  long long* pi = pp ? nullptr : indices;
  long long outer = b.outer, len = b.len, inner = b.inner, nchunks = chunks;
  if (rows) {
    long long items = outer * chunks;
    const jit::LaunchShape s = jit::elementwise_launch_shape(items * 32, jit::sm_count(dev));
    void* args[] = {&in, &po, &pi, &pp, &items, &len, &chunk_len, &nchunks, &scale};
    k.launch(s.grid, s.block, 0, detail::stream_of(like), args);
  } else {
    const jit::LaunchShape s =
        jit::elementwise_launch_shape(outer * chunks * inner, jit::sm_count(dev));
    void* args[] = {&in, &po, &pi, &pp, &outer, &len, &inner, &chunk_len, &nchunks, &scale};
    k.launch(s.grid, s.block, 0, detail::stream_of(like), args);
  }
  // The next pass reduces the chunks, [outer, chunks, inner]. `partial` goes back to the
  // caching allocator after that launch; work on one stream runs in order, so its reuse
  // by a later launch is safe.
  if (pp) pass(kind, like, pp, in_t, true, Block{b.outer, chunks, b.inner}, out, indices, scale);
}

// Reduces x over dims into out (and indices): kind's kernel over x's dtype.
void reduce(ReduceKind kind, const char* op, const Tensor& x, std::span<const int64_t> dims,
            const Tensor& out, const Tensor& indices, double scale) {
  detail::check_cuda(x, op);
  MT_CHECK(out.is_contiguous() && (!indices.defined() || indices.is_contiguous()),
           "[{}] the CUDA kernel writes a contiguous out", op);
  const int64_t n_out = out.numel();
  if (n_out == 0) return;
  Block b;
  Tensor src = x;
  if (!as_block(x, dims, &b)) {
    // Move the reduced dims last and copy: [kept..., reduced...] is [O, R, 1].
    Shape perm;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!(dims.empty() || std::binary_search(dims.begin(), dims.end(), d))) perm.push_back(d);
    for (int64_t d = 0; d < x.dim(); ++d)
      if (dims.empty() || std::binary_search(dims.begin(), dims.end(), d)) perm.push_back(d);
    Tensor p = mt::detail::permute_of(x, perm);
    src = empty(p.sizes(), {.dtype = x.dtype(), .device = x.device()});
    mt::detail::copy_impl(src, p);
    const size_t n_kept = dims.empty() ? 0 : perm.size() - dims.size();
    int64_t kept = 1;
    for (size_t i = 0; i < n_kept; ++i) kept *= p.size(int64_t(i));
    b = Block{kept, x.numel() / kept, 1};
  }
  if (b.len == 0) {  // nothing to reduce: sum 0, mean NaN (0/0)
    mt::detail::fill_impl(out, kind == ReduceKind::Sum && scale == 1.0 ? 0.0 : std::nan(""));
    return;
  }
  DType in_t = src.dtype();
  Tensor result = out;
  if (kind == ReduceKind::Max && in_t == DType::Bool) {  // through int64
    src = detail::converted(src, DType::Int64);
    in_t = DType::Int64;
    result = empty(out.sizes(), {.dtype = DType::Int64, .device = out.device()});
  }
  MT_CHECK(result.dtype() == reduce_out_dtype(kind, in_t),
           "[{}] the CUDA kernel writes {} for a {} input, not {}", op,
           reduce_out_dtype(kind, in_t), in_t, result.dtype());
  long long* pi = indices.defined() ? static_cast<long long*>(indices.data_ptr()) : nullptr;
  pass(kind, src, src.data_ptr(), in_t, false, b, result, pi, scale);
  if (!result.is_same(out)) mt::detail::copy_impl(out, result);
}

}  // namespace

void sum(const Tensor& x, std::span<const int64_t> dims, bool, const Tensor& out) {
  reduce(ReduceKind::Sum, "sum", x, dims, out, Tensor(), 1.0);
}

void mean(const Tensor& x, std::span<const int64_t> dims, bool, const Tensor& out) {
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (dims.empty() || std::binary_search(dims.begin(), dims.end(), d)) n *= x.size(d);
  // mean is float: sum x converted to out's dtype, scaled by 1/n in the last pass.
  const Tensor xf = detail::converted(x, out.dtype());
  if (n == 0) {
    mt::detail::fill_impl(out, std::nan(""));
    return;
  }
  reduce(ReduceKind::Sum, "mean", xf, dims, out, Tensor(), 1.0 / double(n));
}

void max(const Tensor& x, std::span<const int64_t> dims, bool, const Tensor& out,
         const Tensor& indices_or_undefined) {
  reduce(ReduceKind::Max, "max", x, dims, out, indices_or_undefined, 1.0);
}

void sum_to(const Tensor& grad, const Shape& shape, const Tensor& out) {
  // The dims of grad that broadcasting `shape` added or expanded from 1.
  std::vector<int64_t> dims;
  const int64_t lead = grad.dim() - int64_t(shape.size());
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[size_t(d - lead)] == 1 && grad.size(d) != 1)) dims.push_back(d);
  if (dims.empty()) {
    mt::detail::copy_impl(out, grad);
    return;
  }
  reduce(ReduceKind::Sum, "sum_to", grad, dims, out, Tensor(), 1.0);
}

}  // namespace mt::gpu
