// SPDX-License-Identifier: MIT
// What the kernels the jit generates from a user's expression share: the names and comments
// in their CUDA sources, and the check of a call's inputs (jit::pointwise and jit::reduction:
// kernels/jit/pointwise.cpp, reduction.cpp). Internal: not installed.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/view.h"

namespace mt::jit::detail {

// The dtypes a generated source is instantiated for.
inline constexpr DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16,
                                        DType::BFloat16};

inline bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

// A generated kernel's name is an identifier, or identifiers joined by '::' ("demo::fma",
// as an op's qualified name reads): it names the functor and the kernel file in the
// generated source, so nothing else gets in there.
inline bool is_valid_name(std::string_view name) {
  for (size_t start = 0;;) {
    const size_t end = std::min(name.find("::", start), name.size());
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || !is_ident_start(part[0]) ||
        !std::all_of(part.begin(), part.end(), is_ident_char))
      return false;
    if (end == name.size()) return true;
    start = end + 2;
  }
}

// "demo::fma" -> "demo__fma"
inline std::string identifier(std::string_view name) {
  std::string s;
  for (char c : name) s += is_ident_char(c) ? c : '_';
  return s;
}

// An expression as comment lines of the generated source: printable ASCII but the backslash
// as it is, every other byte as \xNN, so no line of it ends in a backslash (which would join
// the next line of the source to the comment) and no byte of it ends the comment.
inline std::string comment_lines(std::string_view body) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "//   ";
  for (const char ch : body) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\n//   ";
    } else if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += ch;
    } else {
      out += "\\x", out += kHex[c >> 4], out += kHex[c & 15];
    }
  }
  return out + "\n";
}

// A call's inputs, checked (each defined, all on one device): their broadcast shape, their
// promoted dtype (an integer or bool one computes in float32), the device, and whether any
// is fake. names are the expression's input names, for the messages.
struct Operands {
  Shape shape;
  DType dtype;
  Device device;
  bool fake;
};
inline Operands check_operands(const std::string& name, std::span<const Tensor> inputs,
                               const std::vector<std::string>& names) {
  for (size_t i = 0; i < inputs.size(); ++i)
    MT_CHECK(inputs[i].defined(), "[{}] input {} ({}) is an undefined Tensor", name, i + 1,
             names[i]);
  Operands o{inputs[0].sizes(), inputs[0].dtype(), inputs[0].device(), inputs[0].is_fake()};
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    MT_CHECK(x.device() == o.device,
             "[{}] the inputs are on different devices ({} has {}, {} has {}); move one with "
             ".to()",
             name, names[0], o.device, names[i], x.device());
    o.shape = mt::detail::broadcast_shapes(o.shape, x.sizes(), name.c_str());
    o.dtype = promote_types(o.dtype, x.dtype());
    o.fake = o.fake || x.is_fake();
  }
  if (!is_floating(o.dtype)) o.dtype = DType::Float32;
  return o;
}

}  // namespace mt::jit::detail
