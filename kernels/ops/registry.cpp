// SPDX-License-Identifier: MIT
// The helpers that the built-in op files share (kernels/ops/registry.h).
#include "kernels/ops/registry.h"

#include <mutex>

namespace mt::ops {
namespace {
std::mutex g_keep_mutex;
std::vector<std::shared_ptr<void>>& kept() {
  static auto* v = new std::vector<std::shared_ptr<void>>();  // never destroyed
  return *v;
}
}  // namespace

void keep_alive(std::shared_ptr<void> registrations) {
  std::lock_guard<std::mutex> lock(g_keep_mutex);
  kept().push_back(std::move(registrations));
}

DType float_result(DType t) { return is_floating(t) ? t : DType::Float32; }

void check_floating(const Tensor& t, const char* op) {
  MT_CHECK(is_floating(t.dtype()),
           "[{}] expects a floating-point tensor, got {}; convert it with "
           ".to(mt::DType::Float32)",
           op, t.dtype());
}

}  // namespace mt::ops
