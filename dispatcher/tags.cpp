// SPDX-License-Identifier: MIT
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dispatcher/schema.h"
#include "runtime/error.h"

namespace mt {

std::string_view tag_name(Tag t) {
  switch (t) {
    case Tag::cudagraph_unsafe:
      return "cudagraph_unsafe";
    case Tag::nondeterministic_seeded:
      return "nondeterministic_seeded";
    case Tag::side_effect:
      return "side_effect";
    case Tag::inplace_view:
      return "inplace_view";
  }
  return "?";
}

Tag tag_from_name(std::string_view name) {
  for (int i = 0; i < kNumTags; ++i)
    if (tag_name(Tag(i)) == name) return Tag(i);
  std::vector<std::string_view> known;
  for (int i = 0; i < kNumTags; ++i) known.push_back(tag_name(Tag(i)));
  MT_ERROR("[def] unknown tag {}; the tags are: {}", mt::quoted(name), fmt::join(known, ", "));
}

std::vector<std::string_view> TagSet::names() const {
  std::vector<std::string_view> out;
  for (int i = 0; i < kNumTags; ++i)
    if (has(Tag(i))) out.push_back(tag_name(Tag(i)));
  return out;
}

std::string TagSet::str() const { return fmt::format("{}", fmt::join(names(), ", ")); }

}  // namespace mt
