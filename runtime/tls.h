// MT_TLS: how minitensor's small, hot thread-local variables are declared.
#pragma once

// Note [Thread-local variables in a shared library]
// In a shared library, a thread-local variable is by default found through a call to
// __tls_get_addr on every access (the general-dynamic model): a tiny op touched five of
// them (its dispatch keys, the fake mode, the tape, the allocator's block cache), about
// one call in twenty of its host time. The initial-exec model reads them at a fixed offset
// from the thread pointer instead. It takes space from the static TLS block, of which
// glibc keeps a few hundred bytes spare for libraries opened later with dlopen; the
// variables marked MT_TLS are kept to a few dozen bytes in all, so that still works (the
// allocator's per-thread cache is reached through one pointer for that reason).
#if defined(__GNUC__) && defined(__ELF__)
#define MT_TLS __attribute__((tls_model("initial-exec"))) thread_local
#else
#define MT_TLS thread_local
#endif
