// SPDX-License-Identifier: MIT
// The autograd engine: backward and grad walk the tape in reverse from the outputs' entries;
// grad mode says whether op calls record entries at all.
#pragma once

#include <vector>

#include "autograd/node.h"
#include "dispatcher/dispatcher.h"

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

// Grad mode: whether op calls record tape entries. No-grad excludes the Autograd key
// from dispatch on this thread, so an op call under it costs nothing extra.

inline bool grad_enabled() { return !local_dispatch_keys().excluded.has(DispatchKey::Autograd); }

// Turns recording off for its scope: mt::NoGradGuard g; (SGD updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() : guard_(DispatchKey::Autograd) {}

 private:
  ExcludeDispatchKeyGuard guard_;
};

// Turns recording back on inside a NoGradGuard.
class EnableGradGuard {
 public:
  EnableGradGuard() : saved_(detail::t_local_keys.excluded) {
    detail::t_local_keys.excluded = saved_.remove(DispatchKey::Autograd);
  }
  ~EnableGradGuard() { detail::t_local_keys.excluded = saved_; }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  DispatchKeySet saved_;
};

}  // namespace mt
