// SPDX-License-Identifier: MIT
// minitensor's version: the macros are the headers' version (what an app was compiled
// against), mt::version() the library's (what it runs with); meson.build checks that the
// macros match the project's version.
#pragma once

#define MT_VERSION_MAJOR 0
#define MT_VERSION_MINOR 1
#define MT_VERSION_PATCH 0
// One number that orders versions: 10000 * major + 100 * minor + patch.
#define MT_VERSION_NUMBER (MT_VERSION_MAJOR * 10000 + MT_VERSION_MINOR * 100 + MT_VERSION_PATCH)

namespace mt {

// "0.1.0": the version of the libminitensor this process loaded.
const char* version();

}  // namespace mt
