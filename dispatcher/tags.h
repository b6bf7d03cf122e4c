// SPDX-License-Identifier: MIT
// Tags on op definitions (torch's `Library.define(..., tags=...)`): facts about an op that
// the dispatcher shows (dump, ops) and mt::compile obeys (Note [Tags] in docs/dispatcher.md).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

enum class Tag : uint8_t {
  cudagraph_unsafe,         // may not be captured in a CUDA graph: compile splits around it
  nondeterministic_seeded,  // draws random numbers: compile records it with its generator state
  side_effect,              // acts outside its outputs (I/O, counters): never fused or reordered
  inplace_view,             // changes its input's view metadata in place
};
inline constexpr int kNumTags = 4;

std::string_view tag_name(Tag t);
// The tag named `name`; an unknown name is an error listing the known ones.
Tag tag_from_name(std::string_view name);

// A set of tags, one bit each.
class TagSet {
 public:
  constexpr TagSet() = default;
  constexpr TagSet(std::initializer_list<Tag> ts) {  // NOLINT
    for (Tag t : ts) bits_ |= uint32_t(1) << uint8_t(t);
  }
  constexpr bool has(Tag t) const { return bits_ >> uint8_t(t) & 1u; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr TagSet add(Tag t) const {
    TagSet s = *this;
    s.bits_ |= uint32_t(1) << uint8_t(t);
    return s;
  }
  constexpr bool operator==(const TagSet&) const = default;
  std::vector<std::string_view> names() const;
  std::string str() const;  // "cudagraph_unsafe, side_effect"; "" when empty

 private:
  uint32_t bits_ = 0;
};

// Options of a definition: m.def("op(Tensor x) -> Tensor", {.tags = {Tag::cudagraph_unsafe}}).
struct DefOptions {
  TagSet tags = {};
  // Tags by name (from a configuration or a command line); an unknown name is an error.
  std::vector<std::string> tag_names = {};
};

}  // namespace mt
