// SPDX-License-Identifier: MIT
// Broadcasting and dim merging for the CPU kernels (Note [Elementwise loops]).
#include "kernels/cpu/loops.h"

#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"

namespace mt::cpu {
namespace {

// S -> C; a float into int64 saturates (Note [Float to integer conversion]).
template <typename C, typename S>
inline C convert_to(S v) {
  if constexpr (std::is_same_v<C, int64_t> && !std::is_integral_v<S>) {
    if constexpr (std::is_floating_point_v<S>)
      return saturate_to_int64(v);
    else
      return saturate_to_int64(float(v));  // float16, bfloat16
  } else {
    return C(v);
  }
}
}  // namespace

template <typename C>
void load_row(DType src, const char* p, int64_t stride, int64_t n, C* dst) {
  visit_dtype(src, [&](auto tag) {
    using S = decltype(tag);
    if (stride == 0) {
      C v = convert_to<C>(*reinterpret_cast<const S*>(p));
      for (int64_t i = 0; i < n; ++i) dst[i] = v;
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      dst[i] = convert_to<C>(*reinterpret_cast<const S*>(p + i * stride));
  });
}

template <typename C>
void store_row(DType dst, char* p, int64_t stride, int64_t n, const C* src) {
  visit_dtype(dst, [&](auto tag) {
    using D = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      D* q = reinterpret_cast<D*>(p + i * stride);
      if constexpr (std::is_same_v<D, bool>) {
        *q = src[i] != C(0);
      } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
        *q = D(float(src[i]));
      } else {
        *q = convert_to<D>(src[i]);
      }
    }
  });
}

template void load_row<float>(DType, const char*, int64_t, int64_t, float*);
template void load_row<double>(DType, const char*, int64_t, int64_t, double*);
template void load_row<int64_t>(DType, const char*, int64_t, int64_t, int64_t*);
template void store_row<float>(DType, char*, int64_t, int64_t, const float*);
template void store_row<double>(DType, char*, int64_t, int64_t, const double*);
template void store_row<int64_t>(DType, char*, int64_t, int64_t, const int64_t*);

namespace {

[[noreturn, gnu::cold]] void fail_cpu(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), "[{}] the {} tensor is undefined", op, what);
  MT_CHECK(!t.is_fake(), "[{}] the {} tensor is fake (metadata only); CPU kernels need data", op,
           what);
  MT_ERROR("[{}] the {} tensor is on {}; this is the CPU kernel, move it with .cpu()", op, what,
           t.device());
}

inline const TensorImpl& check_cpu(const char* op, const Tensor& t, const char* what) {
  const TensorImpl* p = t.impl();
  if (p == nullptr || p->fake || !p->device.is_cpu()) [[unlikely]]
    fail_cpu(op, t, what);
  return *p;
}

// Note [Dense operands of one shape]
// The tiny-op path: out and every input are CPU tensors with data, of out's sizes, strides
// and dtype, and out is contiguous (so every input is; a tensor of at most one element is
// contiguous whatever its strides). Then the loop is one dense row of out's dtype and none
// of the general set-up runs: no broadcast strides, no dim ordering or merging, no call of
// is_contiguous, no Shape comparison through memcmp. The checks are plain loops over the
// dims, inline; anything else (another dtype, a view, broadcasting, an error to report)
// takes the general path below, which gives the same result (tests/test_cpu_kernels.cpp).
bool out_is_dense(const TensorImpl& o) {
  if (o.numel <= 1) return true;
  int64_t expected = 1;
  for (size_t d = o.sizes.size(); d-- > 0;) {
    if (o.sizes[d] != 1 && o.strides[d] != expected) return false;
    expected *= o.sizes[d];
  }
  return true;
}

inline bool usable(const TensorImpl* p) {
  return p != nullptr && !p->fake && p->device.is_cpu() && p->storage != nullptr;
}

inline char* first_element(const TensorImpl& t) {
  if (t.numel == 0 || t.storage->data() == nullptr) return nullptr;
  return static_cast<char*>(t.storage->data()) + t.offset * int64_t(dtype_size(t.dtype));
}

bool set_dense_one_shape(Loop& it, const TensorImpl* o,
                         std::initializer_list<std::reference_wrapper<const Tensor>> inputs) {
  if (!usable(o) || !out_is_dense(*o)) return false;
  const size_t nd = o->sizes.size();
  int k = 1;
  for (const Tensor& t : inputs) {
    const TensorImpl* p = t.impl();
    if (!usable(p) || p->dtype != o->dtype || p->sizes.size() != nd) return false;
    for (size_t d = 0; d < nd; ++d)
      if (p->sizes[d] != o->sizes[d] || (o->numel > 1 && p->strides[d] != o->strides[d]))
        return false;
    it.data[k++] = first_element(*p);
  }
  it.nops = k;
  it.numel = o->numel;
  it.ndim = 1;
  it.sizes[0] = o->numel;
  it.contiguous = true;
  it.data[0] = first_element(*o);
  const int64_t es = int64_t(dtype_size(o->dtype));
  for (k = 0; k < it.nops; ++k) {
    it.dtype[k] = o->dtype;
    it.strides[k][0] = es;
  }
  return true;
}

// make_loop's pieces, in the order it runs them. Each is called once, so inlined.

// The common case: every operand has out's shape and is contiguous. One row.
bool set_one_dense_row(Loop& it, const Tensor* const* tensors, const TensorImpl* const* ops) {
  for (int k = 0; k < it.nops; ++k)
    if ((k > 0 && ops[k]->sizes != ops[0]->sizes) || !tensors[k]->is_contiguous()) return false;
  it.ndim = 1;
  it.sizes[0] = it.numel;
  it.contiguous = true;
  for (int k = 0; k < it.nops; ++k) {
    it.strides[k][0] = int64_t(dtype_size(it.dtype[k]));
    it.contiguous = it.contiguous && it.dtype[k] == it.dtype[0];
  }
  return true;
}

// Broadcast strides in bytes, st[k][d] for out's dim d: an input's dims align with out's
// from the right; 0 along the dims it broadcasts over. Throws if an input does not
// broadcast, or if out has elements that share memory.
void broadcast_byte_strides(const char* op, int nops, const TensorImpl* const* ops,
                            int64_t (*st)[kMaxDims]) {
  const TensorImpl& o = *ops[0];
  const int nd = int(o.sizes.size());
  for (int k = 0; k < nops; ++k) {
    const TensorImpl& t = *ops[k];
    const int td = int(t.sizes.size());
    const int64_t es = int64_t(dtype_size(t.dtype));
    bool ok = true;
    for (int d = 0; d < td - nd; ++d) ok = ok && t.sizes[size_t(d)] == 1;
    for (int d = 0; d < nd && ok; ++d) {
      int td_d = d - (nd - td);
      if (td_d < 0) continue;
      int64_t s = t.sizes[size_t(td_d)];
      if (s == o.sizes[size_t(d)]) {
        st[k][d] = s == 1 ? 0 : t.strides[size_t(td_d)] * es;
      } else {
        ok = s == 1;
      }
    }
    MT_CHECK(ok, "[{}] an input of shape {} does not broadcast to the output's shape {}", op,
             t.sizes, o.sizes);
  }
  for (int d = 0; d < nd; ++d)
    MT_CHECK(o.sizes[size_t(d)] <= 1 || o.strides[size_t(d)] != 0,
             "[{}] the output (shape {}, strides {}) has elements that share memory (an "
             "expanded tensor); write into a contiguous tensor instead",
             op, o.sizes, o.strides);
}

// The dims of size > 1, ordered by out's strides, largest first, into order[]; returns
// their count. An insertion sort: stable, and it allocates nothing for kMaxDims dims.
int order_dims(const TensorImpl& o, const int64_t* out_strides, int* order) {
  int n = 0;
  for (int d = 0; d < int(o.sizes.size()); ++d) {
    if (o.sizes[size_t(d)] == 1) continue;
    int i = n++;
    while (i > 0 && out_strides[order[i - 1]] < out_strides[d]) {
      order[i] = order[i - 1];
      --i;
    }
    order[i] = d;
  }
  return n;
}

// Sets it's sizes and strides from the ordered dims, merging neighbours that are one dim
// for every operand; a single element becomes one row of length 1.
void merge_dims(Loop& it, const TensorImpl& o, const int* order, int n,
                const int64_t (*st)[kMaxDims]) {
  int m = 0;
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    const int64_t size_d = o.sizes[size_t(d)];
    if (m > 0) {
      bool merge = true;
      for (int k = 0; k < it.nops && merge; ++k) merge = it.strides[k][m - 1] == st[k][d] * size_d;
      if (merge) {
        it.sizes[m - 1] *= size_d;
        for (int k = 0; k < it.nops; ++k) it.strides[k][m - 1] = st[k][d];
        continue;
      }
    }
    it.sizes[m] = size_d;
    for (int k = 0; k < it.nops; ++k) it.strides[k][m] = st[k][d];
    ++m;
  }
  it.ndim = m;
  if (m == 0 && it.numel == 1) {
    it.ndim = 1;
    it.sizes[0] = 1;
    for (int k = 0; k < it.nops; ++k) it.strides[k][0] = int64_t(dtype_size(it.dtype[k]));
  }
  it.contiguous = it.ndim <= 1;
  for (int k = 0; k < it.nops && it.contiguous; ++k)
    it.contiguous = it.dtype[k] == it.dtype[0] &&
                    (it.ndim == 0 || it.strides[k][0] == int64_t(dtype_size(it.dtype[k])));
}

}  // namespace

Loop make_loop(const char* op, const Tensor& out,
               std::initializer_list<std::reference_wrapper<const Tensor>> inputs) {
  MT_ASSERT(inputs.size() + 1 <= size_t(Loop::kMaxOperands), "too many operands");
  Loop it;
  if (set_dense_one_shape(it, out.impl(), inputs)) return it;
  const TensorImpl& o = check_cpu(op, out, "output");
  it.nops = int(inputs.size()) + 1;
  it.numel = o.numel;
  const Tensor* tensors[Loop::kMaxOperands];
  const TensorImpl* ops[Loop::kMaxOperands];
  tensors[0] = &out;
  ops[0] = &o;
  int k = 1;
  for (const Tensor& t : inputs) {
    tensors[k] = &t;
    ops[k++] = &check_cpu(op, t, "input");
  }
  for (k = 0; k < it.nops; ++k) {
    it.dtype[k] = ops[k]->dtype;
    it.data[k] = it.numel ? static_cast<char*>(tensors[k]->data_ptr()) : nullptr;
  }
  if (set_one_dense_row(it, tensors, ops)) return it;
  int64_t st[Loop::kMaxOperands][kMaxDims] = {};
  broadcast_byte_strides(op, it.nops, ops, st);
  int order[kMaxDims];
  const int n = order_dims(o, st[0], order);
  merge_dims(it, o, order, n, st);
  return it;
}

}  // namespace mt::cpu
