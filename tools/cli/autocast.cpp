// SPDX-License-Identifier: MIT
// `minitensor autocast`: the autocast policy of each op.
#include <cstdio>

#include "tools/cli/cli.h"

namespace mt::cli {

void add_autocast(CLI::App& app, Commands& commands) {
  commands.add(app, "autocast",
               "the autocast policy of each op (lower_precision, float32, promote)", [] {
                 std::printf("%s", autocast_table().c_str());
                 return 0;
               });
}

}  // namespace mt::cli
