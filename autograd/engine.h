// SPDX-License-Identifier: MIT
// backward and grad: walk the tape in reverse from the outputs' entries.
#pragma once

#include <vector>

#include "autograd/node.h"

namespace mt {

// Accumulates d(loss)/d(leaf) into every leaf's .grad. A non-scalar loss needs
// grad_output. Without retain_graph the entries walked are freed; create_graph records
// the backward computation itself, so its gradients can be differentiated again.
void backward(const Tensor& loss, const Tensor& grad_output = {}, bool retain_graph = false,
              bool create_graph = false);

struct GradOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;  // an input no output depends on gets an undefined Tensor
};
// The gradients of outputs with respect to inputs, without touching any .grad.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions opts = {});

// Sets every tensor's .grad to undefined.
void zero_grad(const std::vector<Tensor>& tensors);

}  // namespace mt
