// SPDX-License-Identifier: MIT
#include "runtime/init.h"

#include <mutex>

namespace mt::detail {

void ensure_initialized() {
  static std::once_flag once;
  thread_local bool initializing = false;
  if (initializing) return;
  std::call_once(once, [] {
    initializing = true;
    try {
      initialize_library();
    } catch (...) {
      initializing = false;
      throw;
    }
    initializing = false;
  });
}

}  // namespace mt::detail
