// SPDX-License-Identifier: MIT
// MT_TLS: how minitensor's small, hot thread-local variables are declared.
#pragma once

// Note [Thread-local variables in a shared library]
// In a shared library, a thread-local variable is by default found through a call to
// __tls_get_addr on every access (the general-dynamic model): a tiny op touched five of
// them (its dispatch keys, the fake mode, the tape, the allocator's block cache), about
// one call in twenty of its host time. The initial-exec model reads them at a fixed offset
// from the thread pointer instead. The price: the library's whole TLS block (about 630
// bytes with every thread_local in it, as `readelf -l` shows) must then fit in the static
// TLS area, where glibc keeps some room spare for libraries opened later with dlopen. So
// thread-locals here stay small (the allocator's per-thread cache is reached through one
// pointer), and a test opens the library from Python's ctypes
// (tests/embed/meson.build).
#if defined(__GNUC__) && defined(__ELF__)
#define MT_TLS __attribute__((tls_model("initial-exec"))) thread_local
#else
#define MT_TLS thread_local
#endif
