// SPDX-License-Identifier: MIT
// Operator schemas, PyTorch style: "ns::name.overload(Tensor x, *, int dim=0) -> Tensor".
// parse_schema turns the text into a FunctionSchema; str() prints it back in canonical form.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mt {

enum class TypeKind : uint8_t { Tensor, Int, Float, Bool, Str, ScalarType, Device, Scalar };

// The schema spelling of a kind: "Tensor", "int", "float", "bool", "str", "ScalarType", ...
std::string_view type_kind_name(TypeKind kind);

struct SchemaType {
  TypeKind kind = TypeKind::Tensor;
  bool is_list = false;      // T[] or T[N]
  int list_size = -1;        // N for int[2], else -1
  bool is_optional = false;  // T? or T[]?
  std::string str() const;   // "Tensor", "int[2]", "Tensor?", "int[]?" (no alias annotation)
  friend bool operator==(const SchemaType&, const SchemaType&) = default;
};

// An alias annotation on a Tensor type: Tensor(a) is a view of set a, Tensor(a!) writes to it.
struct AliasInfo {
  std::string set;
  bool is_write = false;
  friend bool operator==(const AliasInfo&, const AliasInfo&) = default;
};

// A parsed default value. None is std::monostate. The alternative follows the type:
// int -> int64_t, float -> double (an int literal is converted), bool -> bool, str -> string,
// Scalar -> int64_t, double or bool as written, int[] -> vector<int64_t>,
// float[] -> vector<double>. Only optional types take None.
using DefaultValue = std::variant<std::monostate, int64_t, double, bool, std::string,
                                  std::vector<int64_t>, std::vector<double>>;

struct Argument {
  std::string name;  // may be empty for returns
  SchemaType type;
  std::optional<AliasInfo> alias;
  std::optional<DefaultValue> default_value;
  bool kwarg_only = false;
  std::string str() const;  // "Tensor(a!)? out=None"; kwarg_only shows as '*' in the schema
  friend bool operator==(const Argument&, const Argument&) = default;
};

// Note [Schema grammar]
//   schema  := name '(' (arg (',' arg)*)? ')' '->' returns
//   name    := ns '::' op ('.' overload)?            identifiers; see parse_schema for ns
//   arg     := type name ('=' default)? | '*'         arguments after '*' are keyword-only
//   type    := kind ('(' set '!'? ')')? ('[' ']' | '[' N ']')? '?'?     1 <= N <= 64
//   kind    := Tensor | int | float | bool | str | ScalarType | Device | Scalar
//   returns := type name? | '(' (type name? (',' type name?)*)? ')'
//   default := None | True | False | int | float | "string" | 'string' | '[' numbers ']'
// Also checked: alias annotations only on Tensor; names unique among arguments and among
// returns; a positional argument without a default never follows one with a default;
// defaults fit their type (see DefaultValue); int[N] x=k means N copies of k. Not
// supported: Tensor?[] (lists of optionals), nested lists, wildcard alias sets (a -> *).

// Note [Canonical schema text]
// FunctionSchema::str() prints, with single spaces as shown:
//   ns::name.overload(Tensor(a!) self, int[2] pad=[0, 0], *, float alpha=1.0) -> (Tensor, Tensor)
// - arguments are separated by ", "; "*" is printed once, before the first keyword-only one;
// - returns: "()" for none, the bare type for one unnamed return ("-> Tensor"), otherwise a
//   parenthesized list ("-> (Tensor values, Tensor indices)", "-> (Tensor out)");
// - ints in decimal; floats as fmt "{}" prints them (shortest text that reads back to the same
//   double) plus ".0" when that text looks like an integer: 1.0, 0.5, 1e-05, -2.0;
// - bools True/False, None as None, lists "[1, 2]" / "[]";
// - strings in double quotes with \\, \", \n, \t and \r escaped; other bytes as they are.
// parse_schema(s.str()) == s for every parsed schema s, and printing is idempotent.
struct FunctionSchema {
  std::string ns, name, overload;  // "triton_demo", "silu", ""
  std::vector<Argument> arguments, returns;
  std::string full_name() const;  // "ns::name" or "ns::name.overload"
  std::string str() const;        // canonical text, see Note [Canonical schema text]
  bool is_mutable() const;        // some argument has (x!)
  friend bool operator==(const FunctionSchema&, const FunctionSchema&);  // structural
};

// Parses "ns::name.overload(args) -> returns". If `default_ns` is non-empty the text may
// omit the namespace ("silu(Tensor x) -> Tensor" inside MT_LIBRARY(triton_demo, m)); a text
// that has a namespace must then match default_ns (error otherwise).
// Syntax errors throw mt::Error with a column and a caret line, e.g.
//   [schema] expected '->' after the argument list at column 15:
//     silu(Tensor x) Tensor
//                    ^
// Columns count characters (UTF-8 code points) before the caret on its line, from 0; a
// text with a newline reports "at line L, column C" (lines count from 1).
FunctionSchema parse_schema(std::string_view text, std::string_view default_ns = {});

// Validates a full operator name "ns::op" or "ns::op.overload"; throws mt::Error that
// explains the 'namespace::op_name' form, with a guess at the intended name: '-' becomes '_',
// a lone ':' becomes "::", and a name still without "::" is split at its last '_' (namespaces
// often hold underscores, short op names rarely): "triton_demo_silu" gets "did you mean
// 'triton_demo::silu'?". The guess is shown only when it is itself a valid name.
void check_operator_name(std::string_view name);

// Splits a checked name into {ns, name, overload}.
struct OperatorName {
  std::string ns, name, overload;
  std::string str() const;  // "ns::name" or "ns::name.overload"
  friend bool operator==(const OperatorName&, const OperatorName&) = default;
};
OperatorName parse_operator_name(std::string_view name);

// Tags on op definitions (torch's `Library.define(..., tags=...)`): facts about an op that
// the dispatcher shows (dump, ops) and mt::compile obeys (Note [Tags] in docs/dispatcher.md).

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
