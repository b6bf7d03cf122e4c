// The doctest runner for every suite. CUDA cases are decorated with
// doctest::skip(!mt::cuda::is_available()); the reason is printed once here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "runtime/cuda/cuda.h"

int main(int argc, char** argv) {
  if (!mt::cuda::is_available())
    std::printf("[minitensor tests] CUDA cases are skipped: %s\n",
                mt::cuda::unavailable_reason().c_str());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
