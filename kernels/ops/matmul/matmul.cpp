// SPDX-License-Identifier: MIT
// mt::matmul, as torch.matmul: 2-d products, batched ones whose batch dims broadcast,
// and 1-d operands (a vector is promoted to a matrix, and that dim is squeezed after).
// Shapes, dtypes and the backward here; the products are kernels/cpu's (BLAS or the packed
// GEMM) and kernels/cuda_host's (cuBLAS).
#include "kernels/ops/matmul/matmul.h"

#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/ops/registry.h"
#include "runtime/view.h"

namespace mt {
namespace ops {
namespace {

// The shapes of one product: a and b as matrices (1-d promoted) and the outputs.
struct MatmulShapes {
  Shape a, b;    // a: [.., m, k], b: [.., k, n]
  Shape out;     // the broadcast batch dims, then m, n
  Shape result;  // out without the dims promoted from 1-d operands
};

MatmulShapes matmul_shapes(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1,
           "[matmul] both operands need at least 1 dim, got shapes {} and {}; use mul for a "
           "scalar factor",
           a.sizes(), b.sizes());
  MatmulShapes s{a.sizes(), b.sizes(), {}, {}};
  if (a.dim() == 1) s.a.insert(0, 1);
  if (b.dim() == 1) s.b.push_back(1);
  int64_t m = s.a[s.a.size() - 2], k = s.a.back(), kb = s.b[s.b.size() - 2], n = s.b.back();
  MT_CHECK(k == kb,
           "[matmul] shapes {} and {} cannot be multiplied: a has {} columns but b has {} rows; "
           "transpose one of them or check the order of the operands",
           a.sizes(), b.sizes(), k, kb);
  Shape batch_a(std::span<const int64_t>(s.a.begin(), s.a.size() - 2));
  Shape batch_b(std::span<const int64_t>(s.b.begin(), s.b.size() - 2));
  bool batch_ok = true;
  for (size_t i = 1; i <= std::min(batch_a.size(), batch_b.size()); ++i) {
    int64_t x = batch_a[batch_a.size() - i], y = batch_b[batch_b.size() - i];
    batch_ok = batch_ok && (x == y || x == 1 || y == 1);
  }
  MT_CHECK(batch_ok,
           "[matmul] shapes {} and {} cannot be multiplied: their batch dims {} and {} do not "
           "broadcast (sizes must match or one must be 1)",
           a.sizes(), b.sizes(), batch_a, batch_b);
  s.out = detail::broadcast_shapes(batch_a, batch_b, "matmul");
  s.result = s.out;
  s.out.push_back(m);
  s.out.push_back(n);
  if (a.dim() > 1) s.result.push_back(m);
  if (b.dim() > 1) s.result.push_back(n);
  return s;
}

Tensor matmul_result(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.device() == b.device(),
           "[matmul] the inputs are on different devices ({} and {}); move one with .to()",
           a.device(), b.device());
  DType t = promote_types(a.dtype(), b.dtype());
  MT_CHECK(t != DType::Bool, "[matmul] bool tensors are not supported; cast them to int64 first");
  return empty(matmul_shapes(a, b).result, {.dtype = t, .device = a.device()});
}

template <auto Compute>  // cpu::matmul or gpu::matmul
Tensor matmul_kernel(const Tensor& a, const Tensor& b) {
  MatmulShapes s = matmul_shapes(a, b);
  Tensor like = matmul_result(a, b);
  // The kernel takes matrices: the 1-d operands as [1, k] and [k, 1], the output in
  // its matrix form, returned with the promoted dims dropped (same contiguous data).
  Tensor a2 = a.dim() == 1 ? detail::unsqueeze_of(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? detail::unsqueeze_of(b, 1) : b;
  Tensor out = empty(s.out, {.dtype = like.dtype(), .device = like.device()});
  Compute(a2, b2, out);
  if (s.out == s.result) return out;
  return detail::make_view(out, s.result, contiguous_strides(s.result), 0);
}

// The gradient of one operand: g2 @ other2 (transposed as the caller asks), summed over
// the broadcast batch dims back to the operand's matrix shape, then its own shape.
Tensor operand_grad(const Tensor& product, const Shape& matrix_shape, const Tensor& like) {
  Tensor r = product.sizes() == matrix_shape ? product : sum_to(product, matrix_shape);
  if (r.sizes() != like.sizes()) r = r.reshape(like.sizes());
  return r.dtype() == like.dtype() ? r : r.to(like.dtype());
}

}  // namespace

void register_matmul() {
  auto op = custom_op("mt::matmul", matmul_kernel<cpu::matmul>,
                      {.mutates_args = {}, .schema = "(Tensor self, Tensor other) -> Tensor"});
  op.register_kernel(DeviceType::CUDA, matmul_kernel<gpu::matmul>);
  op.register_fake(matmul_result);
  // ga = g @ b^T, gb = a^T @ g, on the promoted (matrix) forms.
  op.register_autograd(
      [](AutogradContext& ctx, const Tensor& g) {
        auto saved = ctx.saved();
        const Tensor &a = saved[0], &b = saved[1];
        MatmulShapes s = matmul_shapes(a, b);
        Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
        Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
        Tensor g2 = g.reshape(s.out);
        Tensor ga, gb;
        if (ctx.needs_input_grad(0)) ga = operand_grad(matmul(g2, b2.transpose(-1, -2)), s.a, a);
        if (ctx.needs_input_grad(1)) gb = operand_grad(matmul(a2.transpose(-1, -2), g2), s.b, b);
        return std::tuple<Tensor, Tensor>(ga, gb);
      },
      [](AutogradContext& ctx, const Tensor& a, const Tensor& b, const Tensor&) {
        ctx.save_for_backward({a, b});
      });
  keep(op);
}

std::vector<jit::EmbeddedKernelFile> matmul_kernel_files() { return {}; }  // cuBLAS: no .cu

}  // namespace ops

Tensor matmul(const Tensor& a, const Tensor& b) {
  MT_BUILTIN_OP("mt::matmul", Tensor(const Tensor&, const Tensor&));
  return op(a, b);
}

}  // namespace mt
