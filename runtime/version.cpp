// SPDX-License-Identifier: MIT
#include "runtime/version.h"

#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)

namespace mt {

const char* version() {
  return MT_STR(MT_VERSION_MAJOR) "." MT_STR(MT_VERSION_MINOR) "." MT_STR(MT_VERSION_PATCH);
}

}  // namespace mt
