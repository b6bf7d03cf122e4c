// SPDX-License-Identifier: MIT
// Shared libraries of ops that misbehave while they load, one per PROBE_* macro, for
// tests/test_load_library.cpp and tests/cli/check_cli.py (built by tests/meson.build as
// libload_probe_<variant>.so in PROBE_DIR).
#include <minitensor.h>

#include <stdexcept>

#if defined(PROBE_CTOR_THROWS)
// A plain static constructor that throws: out of reach of any catch in the loader.
namespace {
struct Boom {
  Boom() { throw std::runtime_error("probe: a static constructor failed"); }
} boom;
}  // namespace
MT_LIBRARY(probe_ctor, m) { m.def("f(Tensor x) -> Tensor"); }
#elif defined(PROBE_BLOCK_THROWS_INT)
MT_LIBRARY(probe_int, m) {
  m.def("f(Tensor x) -> Tensor");
  throw 42;  // not a std::exception
}
#elif defined(PROBE_DEP)
namespace {
mt::Tensor same(const mt::Tensor& x) { return x.clone(); }
}  // namespace
MT_LIBRARY(probe_dep, m) { m.def("dep(Tensor x) -> Tensor"); }
MT_LIBRARY_IMPL(probe_dep, CPU, m) { m.impl("dep", same); }
#elif defined(PROBE_NESTED)
// A plugin that loads its dependency from its own block.
MT_LIBRARY(probe_outer, m) {
  mt::load_library(PROBE_DIR "/libload_probe_dep.so");
  m.def("outer(Tensor x) -> Tensor");
}
#elif defined(PROBE_CYCLE)
MT_LIBRARY(probe_cycle, m) {
  (void)m;
  mt::load_library(PROBE_DIR "/libload_probe_cycle.so");
}
#elif defined(PROBE_DEFINES_ADD)
// A built-in op's name, defined again.
MT_LIBRARY_FRAGMENT(mt, m) { m.def("add(Tensor self, Tensor other) -> Tensor"); }
#elif defined(PROBE_MT_LIBRARY)
MT_LIBRARY(mt, m) { m.def("probe_op(Tensor x) -> Tensor"); }
#elif defined(PROBE_BAD_BLOCK)
MT_LIBRARY(probe_bad, m) { m.def("bad(Tensor x -> Tensor"); }
#endif
