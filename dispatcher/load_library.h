// SPDX-License-Identifier: MIT
// Loading a shared library of a user's ops at run time, like torch.ops.load_library: its
// MT_LIBRARY blocks register while it loads.
#pragma once

#include <string>

namespace mt {

// Opens the shared library at `path` (dlopen, every symbol bound now) so that its
// MT_LIBRARY, MT_LIBRARY_FRAGMENT and MT_LIBRARY_IMPL blocks register its ops. Throws
// mt::Error when the file is missing, when it cannot be loaded (the loader's reason), or
// when one of its blocks fails (each failure's message; the blocks that succeeded stay
// registered, and the library stays loaded for the life of the process). Loading the same
// file again does nothing.
void load_library(const std::string& path);

}  // namespace mt
