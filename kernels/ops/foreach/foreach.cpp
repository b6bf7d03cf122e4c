// SPDX-License-Identifier: MIT
// mt::foreach_add_: self[i] += alpha * other[i] over lists of tensor pairs, PyTorch's
// _foreach_add_.List. An optimizer step's op: on CUDA, contiguous pairs of one dtype take one
// multi-tensor launch for the whole list (Note [Multi-tensor apply] in
// kernels/cuda_device/layout.h) instead of a launch a parameter. It mutates its inputs, so it has
// no autograd formula: with grad mode on and an input that requires grad, the autograd
// fallback refuses it (Note [Autograd fallback]), as PyTorch refuses an in-place op on a leaf
// that requires grad; an optimizer runs it under mt::NoGradGuard. Its CPU loop is the binary
// ops' (kernels/cpu) and its multi-tensor launch the elementwise launchers' (kernels/cuda_host,
// device code kernels/cuda_device/elementwise.cu).
#include "kernels/ops/foreach/foreach.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda_host/gpu_kernels.h"
#include "kernels/ops/registry.h"

namespace mt {
namespace ops {
namespace {

using TensorList = std::vector<Tensor>;

// What the op checks before writing anything, real or fake: a bad pair leaves every tensor
// of both lists as it was.
void check_foreach_add(const TensorList& self, const TensorList& other, double alpha) {
  MT_CHECK(!self.empty(), "[foreach_add_] the lists are empty; pass at least one pair of tensors");
  MT_CHECK(self.size() == other.size(),
           "[foreach_add_] self has {} tensors but other has {}; the lists must have one "
           "length (pair i is self[i] += alpha * other[i])",
           self.size(), other.size());
  for (size_t i = 0; i < self.size(); ++i) {
    const Tensor &s = self[i], &o = other[i];
    MT_CHECK(s.defined() && o.defined(), "[foreach_add_] pair {}: {} is an undefined tensor", i,
             s.defined() ? "other" : "self");
    MT_CHECK(s.device() == self[0].device() && o.device() == self[0].device(),
             "[foreach_add_] pair {}: self is on {} and other on {}, but self[0] is on {}; every "
             "tensor of a foreach call must be on one device (move them with .to())",
             i, s.device(), o.device(), self[0].device());
    MT_CHECK(s.sizes() == o.sizes(),
             "[foreach_add_] pair {}: other has shape {} but self has shape {}; the tensors of a "
             "pair must have one shape (mt::add_ broadcasts, foreach_add_ does not)",
             i, o.sizes(), s.sizes());
    const DType result = promote_types(s.dtype(), o.dtype());
    MT_CHECK(can_cast(result, s.dtype()),
             "[foreach_add_] pair {}: result type {} can't be cast to the desired output type {} "
             "(self's dtype): foreach_add_ writes into self. Convert self first",
             i, result, s.dtype());
    MT_CHECK(is_floating(s.dtype()) || alpha == std::trunc(alpha),
             "[foreach_add_] pair {}: alpha {} is not an integer, so the result can't be written "
             "into self of dtype {}; use an integer alpha or a floating self",
             i, alpha, s.dtype());
  }
  // The same tensor twice in self would be added to twice, and on CUDA by two blocks at once.
  std::vector<std::pair<const TensorImpl*, size_t>> seen;
  seen.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) seen.emplace_back(self[i].impl(), i);
  std::sort(seen.begin(), seen.end());
  for (size_t k = 1; k < seen.size(); ++k)
    MT_CHECK(seen[k].first != seen[k - 1].first,
             "[foreach_add_] self[{}] and self[{}] are the same tensor; each tensor may be "
             "written once a call (add their others first)",
             std::min(seen[k - 1].second, seen[k].second),
             std::max(seen[k - 1].second, seen[k].second));
}

}  // namespace

void register_foreach() {
  auto op = custom_op("mt::foreach_add_",
                      [](const TensorList& self, const TensorList& other, double alpha) {
                        check_foreach_add(self, other, alpha);
                        for (size_t i = 0; i < self.size(); ++i)
                          cpu::binary(cpu::BinaryOp::Add, self[i], other[i], self[i], alpha);
                      },
                      {.schema = "(Tensor(a!)[] self, Tensor[] other, *, float alpha=1.0) -> ()"});
  op.register_kernel(DeviceType::CUDA,
                     [](const TensorList& self, const TensorList& other, double alpha) {
                       check_foreach_add(self, other, alpha);
                       gpu::foreach_binary_(gpu::BinaryOp::Add, self, other, alpha);
                     });
  op.register_fake([](const TensorList& self, const TensorList& other, double alpha) {
    check_foreach_add(self, other, alpha);
  });
  keep(op);
}

// The multi-tensor kernels are elementwise.cu's, named with the rows' (gpu::all_kernel_files).
std::vector<jit::EmbeddedKernelFile> foreach_kernel_files() { return {}; }

}  // namespace ops

void foreach_add_(const std::vector<Tensor>& self, const std::vector<Tensor>& other, double alpha) {
  MT_BUILTIN_OP("mt::foreach_add_",
                void(const std::vector<Tensor>&, const std::vector<Tensor>&, double));
  op(self, other, alpha);
}

}  // namespace mt
