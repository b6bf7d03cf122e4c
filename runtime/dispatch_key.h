// SPDX-License-Identifier: MIT
// DispatchKey and DispatchKeySet. They live in the runtime (as c10's do in PyTorch)
// because every tensor carries a key set; the dispatcher reads them.
#pragma once

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace mt {

// Note [Dispatch key priority]
// The numeric value is the priority: a call goes to the highest key present in
// (union of the arguments' key sets | thread-local included) & ~thread-local excluded.
//   Trace > Batched > Autocast > Autograd > Mode > Fake > CUDA > CPU
// Trace is an optional boxed fallback that logs calls, then redispatches below itself.
// Batched (mt::vmap) unwraps batched tensors, applies the op's batching rule and wraps
// the results; Autocast casts the inputs by the op's policy; both then call below
// themselves (Note [Where Batched sits] in autograd/vmap.h).
// Autograd records a tape entry, then redispatches below itself to the backend.
// Mode runs the thread's innermost user dispatch mode (Note [Dispatch modes] in
// dispatcher/mode.h); below Autograd, so a mode sees the ops a backward runs too.
// Fake sits above the backends so a fake tensor never reaches a real kernel.
enum class DispatchKey : uint8_t {
  CPU = 0,
  CUDA = 1,
  Fake = 2,
  Mode = 3,
  Autograd = 4,
  Autocast = 5,
  Batched = 6,
  Trace = 7,
};
inline constexpr int kNumDispatchKeys = 8;

std::string_view dispatch_key_name(DispatchKey k);
// Parses a key's name ("CPU", ..., "Trace"); returns false if unknown.
bool parse_dispatch_key(std::string_view name, DispatchKey* out);

class DispatchKeySet {
 public:
  constexpr DispatchKeySet() = default;
  constexpr explicit DispatchKeySet(uint64_t bits) : bits_(bits) {}
  constexpr DispatchKeySet(DispatchKey k) : bits_(uint64_t(1) << uint8_t(k)) {}  // NOLINT
  constexpr DispatchKeySet(std::initializer_list<DispatchKey> ks) {
    for (auto k : ks) bits_ |= uint64_t(1) << uint8_t(k);
  }

  constexpr bool has(DispatchKey k) const { return bits_ & (uint64_t(1) << uint8_t(k)); }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr uint64_t raw() const { return bits_; }
  // The highest-priority key; undefined on an empty set (check empty() first).
  constexpr DispatchKey highest() const { return DispatchKey(63 - std::countl_zero(bits_)); }
  // The keys strictly below k.
  constexpr DispatchKeySet below(DispatchKey k) const {
    return DispatchKeySet(bits_ & ((uint64_t(1) << uint8_t(k)) - 1));
  }
  constexpr DispatchKeySet add(DispatchKey k) const { return *this | DispatchKeySet(k); }
  constexpr DispatchKeySet remove(DispatchKey k) const { return *this - DispatchKeySet(k); }

  constexpr DispatchKeySet operator|(DispatchKeySet o) const {
    return DispatchKeySet(bits_ | o.bits_);
  }
  constexpr DispatchKeySet operator&(DispatchKeySet o) const {
    return DispatchKeySet(bits_ & o.bits_);
  }
  constexpr DispatchKeySet operator-(DispatchKeySet o) const {
    return DispatchKeySet(bits_ & ~o.bits_);
  }
  constexpr bool operator==(const DispatchKeySet&) const = default;

  std::string str() const;  // "{Autograd, CPU}", highest first

 private:
  uint64_t bits_ = 0;
};

}  // namespace mt
