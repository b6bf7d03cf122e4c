// SPDX-License-Identifier: MIT
// Schema parser and printer: every feature parses, prints back canonically, and every
// mistake gets an exact message with a caret under the column.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dispatcher/schema.h"
#include "runtime/error.h"

using mt::AliasInfo;
using mt::Argument;
using mt::DefaultValue;
using mt::FunctionSchema;
using mt::SchemaType;
using mt::TypeKind;

namespace {

constexpr const char* kNs = "triton_demo";

const std::string kLongSchema =
    "ns::name.overload(Tensor x, Tensor? w=None, int[] dims=[], int[2] pad=[0, 0], "
    "float alpha=1.0, bool keepdim=False, str mode=\"mean\", ScalarType? dtype=None, *, "
    "Device? device=None) -> (Tensor, Tensor)";

// The default of argument `i` of `text`, parsed inside MT_LIBRARY(triton_demo, m).
DefaultValue default_of(const std::string& text, size_t i = 0) {
  FunctionSchema s = mt::parse_schema(text, kNs);
  REQUIRE(i < s.arguments.size());
  REQUIRE(s.arguments[i].default_value.has_value());
  return *s.arguments[i].default_value;
}

}  // namespace

TEST_CASE("schema: the tutorial's silu parses into namespace, name and one Tensor argument") {
  FunctionSchema s = mt::parse_schema("triton_demo::silu(Tensor x) -> Tensor");
  CHECK(s.ns == "triton_demo");
  CHECK(s.name == "silu");
  CHECK(s.overload == "");
  CHECK(s.full_name() == "triton_demo::silu");
  REQUIRE(s.arguments.size() == 1);
  CHECK(s.arguments[0].name == "x");
  CHECK(s.arguments[0].type == SchemaType{TypeKind::Tensor});
  CHECK_FALSE(s.arguments[0].alias);
  CHECK_FALSE(s.arguments[0].default_value);
  CHECK_FALSE(s.arguments[0].kwarg_only);
  REQUIRE(s.returns.size() == 1);
  CHECK(s.returns[0].name == "");
  CHECK(s.returns[0].type.kind == TypeKind::Tensor);
  CHECK_FALSE(s.is_mutable());
  CHECK(s.str() == "triton_demo::silu(Tensor x) -> Tensor");
}

TEST_CASE("schema: an overload name follows a dot") {
  FunctionSchema s = mt::parse_schema("aten::add.Tensor(Tensor self, Tensor other) -> Tensor");
  CHECK(s.name == "add");
  CHECK(s.overload == "Tensor");
  CHECK(s.full_name() == "aten::add.Tensor");
}

TEST_CASE("schema: inside a library the namespace may be left out, or must match") {
  FunctionSchema s = mt::parse_schema("silu(Tensor x) -> Tensor", kNs);
  CHECK(s.ns == "triton_demo");
  CHECK(s.full_name() == "triton_demo::silu");
  CHECK(mt::parse_schema("triton_demo::silu(Tensor x) -> Tensor", kNs) == s);
  // Without a library namespace, an underscore is just part of the op name.
  CHECK(mt::parse_schema("triton_demo_silu(Tensor x) -> Tensor", kNs).name == "triton_demo_silu");
}

TEST_CASE("schema: every type kind and the [], [N], ? and []? suffixes") {
  FunctionSchema s = mt::parse_schema(
      "ns::f(Tensor a, int b, float c, bool d, str e, ScalarType f, Device g, Scalar h, "
      "int[] i, int[3] j, Tensor? k, int[]? l, Tensor[] m, float[2]? n) -> ()");
  std::vector<SchemaType> want = {
      {TypeKind::Tensor},
      {TypeKind::Int},
      {TypeKind::Float},
      {TypeKind::Bool},
      {TypeKind::Str},
      {TypeKind::ScalarType},
      {TypeKind::Device},
      {TypeKind::Scalar},
      {TypeKind::Int, true, -1, false},
      {TypeKind::Int, true, 3, false},
      {TypeKind::Tensor, false, -1, true},
      {TypeKind::Int, true, -1, true},
      {TypeKind::Tensor, true, -1, false},
      {TypeKind::Float, true, 2, true},
  };
  REQUIRE(s.arguments.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(s.arguments[i].type == want[i]);
  }
  CHECK(s.returns.empty());
  CHECK(want[9].str() == "int[3]");
  CHECK(want[10].str() == "Tensor?");
  CHECK(want[11].str() == "int[]?");
  CHECK(want[13].str() == "float[2]?");
}

TEST_CASE("schema: alias annotations mark views (a) and mutations (a!)") {
  FunctionSchema view = mt::parse_schema("aten::view(Tensor(a) self, int[] size) -> Tensor(a)");
  REQUIRE(view.arguments[0].alias);
  CHECK(view.arguments[0].alias->set == "a");
  CHECK_FALSE(view.arguments[0].alias->is_write);
  REQUIRE(view.returns[0].alias);
  CHECK(view.returns[0].alias->set == "a");
  CHECK_FALSE(view.is_mutable());

  FunctionSchema add = mt::parse_schema("aten::add_(Tensor(a!) self, Tensor other) -> Tensor(a!)");
  CHECK(add.arguments[0].alias == AliasInfo{"a", true});
  CHECK(add.returns[0].alias == AliasInfo{"a", true});
  CHECK(add.is_mutable());
  CHECK(add.arguments[0].str() == "Tensor(a!) self");

  FunctionSchema lists = mt::parse_schema("ns::f(Tensor(a!)[] xs, Tensor(b)? y) -> ()");
  CHECK(lists.arguments[0].type == SchemaType{TypeKind::Tensor, true, -1, false});
  CHECK(lists.arguments[0].str() == "Tensor(a!)[] xs");
  CHECK(lists.arguments[1].str() == "Tensor(b)? y");
}

TEST_CASE("schema: '*' makes the arguments after it keyword-only") {
  FunctionSchema s =
      mt::parse_schema("ns::f(Tensor x, *, Scalar alpha=1, Device? device=None) -> Tensor");
  REQUIRE(s.arguments.size() == 3);
  CHECK_FALSE(s.arguments[0].kwarg_only);
  CHECK(s.arguments[1].kwarg_only);
  CHECK(s.arguments[2].kwarg_only);
  CHECK(s.str() == "ns::f(Tensor x, *, Scalar alpha=1, Device? device=None) -> Tensor");
  // Keyword-only arguments may come without defaults, in any order.
  FunctionSchema out = mt::parse_schema("ns::f(*, int a=1, Tensor(a!) out) -> Tensor(a!)");
  CHECK(out.arguments[1].kwarg_only);
  CHECK(out.str() == "ns::f(*, int a=1, Tensor(a!) out) -> Tensor(a!)");
}

TEST_CASE("schema: returns are one type, a tuple, named, or none") {
  CHECK(mt::parse_schema("ns::f(Tensor x) -> Tensor").returns.size() == 1);
  CHECK(mt::parse_schema("ns::f(Tensor x) -> ()").returns.empty());
  FunctionSchema tuple = mt::parse_schema("ns::f(Tensor x) -> (Tensor, int[], Tensor?)");
  REQUIRE(tuple.returns.size() == 3);
  CHECK(tuple.returns[1].type == SchemaType{TypeKind::Int, true, -1, false});
  CHECK(tuple.returns[2].type.is_optional);

  FunctionSchema named = mt::parse_schema(
      "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> "
      "(Tensor values, Tensor indices)");
  REQUIRE(named.returns.size() == 2);
  CHECK(named.returns[0].name == "values");
  CHECK(named.returns[1].name == "indices");

  // One unnamed return in parentheses prints bare; one named return keeps them.
  CHECK(mt::parse_schema("ns::f(Tensor x) -> (Tensor)").str() == "ns::f(Tensor x) -> Tensor");
  CHECK(mt::parse_schema("ns::f(Tensor x) -> Tensor out").str() ==
        "ns::f(Tensor x) -> (Tensor out)");
}

TEST_CASE("schema: int, float, bool and str defaults") {
  CHECK(default_of("f(int x=3) -> ()") == DefaultValue(int64_t{3}));
  CHECK(default_of("f(int x=-9223372036854775808) -> ()") == DefaultValue(int64_t{INT64_MIN}));
  CHECK(default_of("f(float x=1.0) -> ()") == DefaultValue(1.0));
  CHECK(default_of("f(float x=1.) -> ()") == DefaultValue(1.0));
  CHECK(default_of("f(float x=1e-5) -> ()") == DefaultValue(1e-5));
  CHECK(default_of("f(float x=2.5E+3) -> ()") == DefaultValue(2500.0));
  CHECK(default_of("f(bool x=True) -> ()") == DefaultValue(true));
  CHECK(default_of("f(bool x=False) -> ()") == DefaultValue(false));
  CHECK(default_of("f(str x=\"mean\") -> ()") == DefaultValue(std::string("mean")));
  CHECK(default_of("f(str x='mean') -> ()") == DefaultValue(std::string("mean")));
}

TEST_CASE("schema: an int default for a float argument becomes a double") {
  DefaultValue v = default_of("f(float alpha=-2) -> ()");
  REQUIRE(std::holds_alternative<double>(v));
  CHECK(std::get<double>(v) == -2.0);
  CHECK(mt::parse_schema("f(float alpha=-2) -> ()", kNs).str() ==
        "triton_demo::f(float alpha=-2.0) -> ()");
}

TEST_CASE("schema: a Scalar default keeps its int, float or bool kind") {
  CHECK(std::holds_alternative<int64_t>(default_of("f(Scalar a=1) -> ()")));
  CHECK(std::holds_alternative<double>(default_of("f(Scalar a=1.0) -> ()")));
  CHECK(std::holds_alternative<bool>(default_of("f(Scalar a=True) -> ()")));
  // So two schemas that differ only there are different.
  CHECK_FALSE(mt::parse_schema("f(Scalar a=1) -> ()", kNs) ==
              mt::parse_schema("f(Scalar a=1.0) -> ()", kNs));
}

TEST_CASE("schema: None defaults need an optional type") {
  CHECK(default_of("f(Tensor? w=None) -> ()") == DefaultValue(std::monostate{}));
  CHECK(default_of("f(int[]? d=None) -> ()") == DefaultValue(std::monostate{}));
  CHECK(default_of("f(ScalarType? t=None) -> ()") == DefaultValue(std::monostate{}));
  CHECK(default_of("f(float? t=0.5) -> ()") == DefaultValue(0.5));
}

TEST_CASE("schema: list defaults, and one int for a fixed-size int list") {
  CHECK(default_of("f(int[] d=[]) -> ()") == DefaultValue(std::vector<int64_t>{}));
  CHECK(default_of("f(int[] d=[1, -2]) -> ()") == DefaultValue(std::vector<int64_t>{1, -2}));
  CHECK(default_of("f(int[2] pad=[0, 0]) -> ()") == DefaultValue(std::vector<int64_t>{0, 0}));
  CHECK(default_of("f(int[2] pad=[]) -> ()") == DefaultValue(std::vector<int64_t>{}));
  CHECK(default_of("f(int[3] k=1) -> ()") == DefaultValue(std::vector<int64_t>{1, 1, 1}));
  CHECK(default_of("f(float[] w=[1, 2.5]) -> ()") == DefaultValue(std::vector<double>{1.0, 2.5}));
  CHECK(default_of("f(float[] w=[]) -> ()") == DefaultValue(std::vector<double>{}));
}

TEST_CASE("schema: string escapes are read and printed back double-quoted") {
  DefaultValue v = default_of(R"(f(str s='it\'s "q"\t\\\n') -> ())");
  CHECK(v == DefaultValue(std::string("it's \"q\"\t\\\n")));
  FunctionSchema s = mt::parse_schema(R"(f(str s='it\'s "q"\t\\\n') -> ())", kNs);
  CHECK(s.str() == R"(triton_demo::f(str s="it's \"q\"\t\\\n") -> ())");
}

TEST_CASE("schema: printing is canonical whatever the spacing of the input") {
  FunctionSchema s = mt::parse_schema(
      "  ns::f( Tensor   x,int[ 2 ]pad = [ 0,1 ] ,\n\t*,float  eps=1e-05 )->( Tensor a , Tensor b "
      ") ");
  CHECK(s.str() ==
        "ns::f(Tensor x, int[2] pad=[0, 1], *, float eps=1e-05) -> (Tensor a, Tensor b)");
  CHECK(mt::parse_schema(kLongSchema).str() == kLongSchema);
}

TEST_CASE("schema: floats print as the shortest text that reads back, with a '.0' if integral") {
  auto printed = [](const std::string& literal) {
    FunctionSchema s = mt::parse_schema("ns::f(float x=" + literal + ") -> ()");
    return s.arguments[0].str();
  };
  CHECK(printed("1") == "float x=1.0");
  CHECK(printed("0.1") == "float x=0.1");
  CHECK(printed("1e-5") == "float x=1e-05");
  CHECK(printed("100.") == "float x=100.0");
  CHECK(printed("1e20") == "float x=1e+20");
  CHECK(printed("-0.0") == "float x=-0.0");
  CHECK(printed("0.30000000000000004") == "float x=0.30000000000000004");
}

TEST_CASE("schema: parse(str(s)) == s for a varied list of schemas") {
  const std::vector<std::string> schemas = {
      "triton_demo::silu(Tensor x) -> Tensor",
      kLongSchema,
      "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
      "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
      "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
      "aten::view(Tensor(a) self, int[] size) -> Tensor(a)",
      "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
      "aten::unbind.int(Tensor(a) self, int dim=0) -> Tensor(a)[]",
      "aten::_foreach_add_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()",
      "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
      "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor",
      "aten::layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, "
      "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
      "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
      "ScalarType? dtype=None) -> Tensor",
      "aten::to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False, "
      "bool copy=False) -> Tensor(a)",
      "aten::dropout(Tensor input, float p, bool train) -> Tensor",
      "aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
      "aten::leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor",
      "aten::div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor",
      "aten::gelu(Tensor self, *, str approximate='none') -> Tensor",
      "ns::escapes(str a=\"tab\\there\", str b='quote\"d', str c=\"back\\\\slash\\n\") -> str",
      "ns::floats(float a=0.5, float b=-2, float c=1e-12, float d=12345678901234567890., "
      "float[] e=[1, 0.25, -3e+30]) -> float",
      "ns::scalars(Scalar a=1, Scalar b=1.0, Scalar c=False, Scalar d=-0.0) -> Scalar",
      "ns::ints(int a=-9223372036854775808, int b=9223372036854775807, int[3] c=[1, 2, 3]) -> int",
      "ns::nothing() -> ()",
      "ns::only_kwargs(*, Tensor(a!) out, int n) -> (Tensor(a!) out, int n)",
      "ns::lists(Tensor[] xs, bool[3] mask, Scalar[] s, Tensor[]? ys=None, "
      "float[]? w=None) -> (Tensor[], bool)",
      "ns::devices(Device? device=None, ScalarType? dtype=None, bool pin=False) -> Device",
      "ns::multi\n(\n  Tensor x,\n  int[] y=[1, -2]\n) -> (\n  Tensor\n)",
  };
  for (const std::string& text : schemas) {
    CAPTURE(text);
    FunctionSchema s = mt::parse_schema(text);
    std::string printed = s.str();
    CAPTURE(printed);
    CHECK(mt::parse_schema(printed) == s);
    CHECK(mt::parse_schema(printed).str() == printed);
  }
}

TEST_CASE("schema: equality is structural") {
  FunctionSchema a = mt::parse_schema("ns::f(Tensor x, int n=1) -> Tensor");
  CHECK(a == mt::parse_schema("ns::f( Tensor x , int n = 1 ) -> ( Tensor )"));
  CHECK_FALSE(a == mt::parse_schema("ns::f(Tensor x, int n=2) -> Tensor"));
  CHECK_FALSE(a == mt::parse_schema("ns::f(Tensor y, int n=1) -> Tensor"));
  CHECK_FALSE(a == mt::parse_schema("ns::f(Tensor x, *, int n=1) -> Tensor"));
  CHECK_FALSE(a == mt::parse_schema("ns::f.o(Tensor x, int n=1) -> Tensor"));
  CHECK_FALSE(a == mt::parse_schema("ns::f(Tensor(a) x, int n=1) -> Tensor"));
}

// ---- Errors: exact texts, with the column and a caret ----

TEST_CASE("schema errors: a missing '->' points at what came instead") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("silu(Tensor x) Tensor", kNs),
                       "[schema] expected '->' after the argument list at column 15:\n"
                       "  silu(Tensor x) Tensor\n"
                       "                 ^",
                       mt::Error);
}

TEST_CASE("schema errors: an unknown type suggests the closest known one") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("silu(Tensr x) -> Tensor", kNs),
                       "[schema] unknown type 'Tensr' at column 5:\n"
                       "  silu(Tensr x) -> Tensor\n"
                       "       ^\n"
                       "did you mean 'Tensor'? (known types: Tensor, int, float, bool, str, "
                       "ScalarType, Device, Scalar)",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("silu(Tensor x, double a) -> Tensor", kNs),
                       "[schema] unknown type 'double' at column 15:\n"
                       "  silu(Tensor x, double a) -> Tensor\n"
                       "                 ^\n"
                       "did you mean 'float'? (known types: Tensor, int, float, bool, str, "
                       "ScalarType, Device, Scalar)",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("silu(Foo x) -> Tensor", kNs),
                       "[schema] unknown type 'Foo' at column 5:\n"
                       "  silu(Foo x) -> Tensor\n"
                       "       ^\n"
                       "known types: Tensor, int, float, bool, str, ScalarType, Device, Scalar",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("silu(x Tensor) -> Tensor", kNs),
                       "[schema] unknown type 'x' at column 5:\n"
                       "  silu(x Tensor) -> Tensor\n"
                       "       ^\n"
                       "the type comes before the name, as in 'Tensor x' (known types: Tensor, "
                       "int, float, bool, str, ScalarType, Device, Scalar)",
                       mt::Error);
}

TEST_CASE("schema errors: a default of the wrong type") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int x=1.5) -> Tensor", kNs),
                       "[schema] default value 1.5 does not match type 'int' of argument 'x' "
                       "at column 8:\n"
                       "  f(int x=1.5) -> Tensor\n"
                       "          ^\n"
                       "a default for 'int' is an integer",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(bool b=3) -> Tensor", kNs),
                       "[schema] default value 3 does not match type 'bool' of argument 'b' "
                       "at column 9:\n"
                       "  f(bool b=3) -> Tensor\n"
                       "           ^\n"
                       "a default for 'bool' is True or False",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor t=1) -> Tensor", kNs),
                       "[schema] argument 't' of type 'Tensor' cannot have a default value "
                       "at column 11:\n"
                       "  f(Tensor t=1) -> Tensor\n"
                       "             ^\n"
                       "only optional types take a default, and only None: 'Tensor? t=None'",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int x=None) -> Tensor", kNs),
                       "[schema] default value None needs an optional type, but argument 'x' "
                       "has type 'int' at column 8:\n"
                       "  f(int x=None) -> Tensor\n"
                       "          ^\n"
                       "write 'int? x=None'",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor? t=1) -> Tensor", kNs),
                       "[schema] default value 1 does not match type 'Tensor?' of argument 't' "
                       "at column 12:\n"
                       "  f(Tensor? t=1) -> Tensor\n"
                       "              ^\n"
                       "a 'Tensor?' argument can only default to None",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(str s=1) -> Tensor", kNs),
                       "[schema] default value 1 does not match type 'str' of argument 's' "
                       "at column 8:\n"
                       "  f(str s=1) -> Tensor\n"
                       "          ^\n"
                       "a default for 'str' is a quoted string",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int[] d=[1, 2.5]) -> Tensor", kNs),
                       "[schema] default value [1, 2.5] does not match type 'int[]' of "
                       "argument 'd' at column 10:\n"
                       "  f(int[] d=[1, 2.5]) -> Tensor\n"
                       "            ^\n"
                       "a default for 'int[]' is a list of integers such as [0, 1]",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int[2] pad=[0]) -> Tensor", kNs),
                       "[schema] default value [0] has 1 element, but type 'int[2]' of "
                       "argument 'pad' needs 2 at column 13:\n"
                       "  f(int[2] pad=[0]) -> Tensor\n"
                       "               ^\n"
                       "give 2 values, or [] for none",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int x=foo) -> Tensor", kNs),
                       "[schema] expected a default value after '=' at column 8:\n"
                       "  f(int x=foo) -> Tensor\n"
                       "          ^\n"
                       "a default is None, True, False, a number, a quoted string or a list "
                       "such as [0, 1]",
                       mt::Error);
}

TEST_CASE("schema errors: duplicate names") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x, Tensor x) -> Tensor", kNs),
                       "[schema] duplicate argument name 'x' at column 19:\n"
                       "  f(Tensor x, Tensor x) -> Tensor\n"
                       "                     ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x) -> (Tensor a, Tensor a)", kNs),
                       "[schema] duplicate return name 'a' at column 33:\n"
                       "  f(Tensor x) -> (Tensor a, Tensor a)\n"
                       "                                   ^",
                       mt::Error);
}

TEST_CASE("schema errors: strings") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(str s=\"mean) -> Tensor", kNs),
                       "[schema] unterminated string literal at column 8:\n"
                       "  f(str s=\"mean) -> Tensor\n"
                       "          ^\n"
                       "close the string with \"",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema(R"(f(str s="a\qb") -> Tensor)", kNs),
                       "[schema] unknown escape '\\q' in a string literal at column 10:\n"
                       "  f(str s=\"a\\qb\") -> Tensor\n"
                       "            ^\n"
                       R"(known escapes: \\ \" \' \n \t \r)",
                       mt::Error);
}

TEST_CASE("schema errors: text after the returns") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x) -> Tensor foo bar", kNs),
                       "[schema] unexpected text after the returns at column 26:\n"
                       "  f(Tensor x) -> Tensor foo bar\n"
                       "                            ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x) -> Tensor, Tensor", kNs),
                       "[schema] unexpected text after the returns at column 21:\n"
                       "  f(Tensor x) -> Tensor, Tensor\n"
                       "                       ^\n"
                       "several returns go in parentheses: '-> (Tensor, Tensor)'",
                       mt::Error);
}

TEST_CASE("schema errors: bad alias annotations") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor() x) -> Tensor", kNs),
                       "[schema] bad alias annotation: expected a set name such as 'a' at "
                       "column 9:\n"
                       "  f(Tensor() x) -> Tensor\n"
                       "           ^\n"
                       "write 'Tensor(a)' for a view of set a, or 'Tensor(a!)' for a tensor "
                       "that is written to",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor(a x) -> Tensor", kNs),
                       "[schema] bad alias annotation: expected ')' at column 11:\n"
                       "  f(Tensor(a x) -> Tensor\n"
                       "             ^\n"
                       "write 'Tensor(a)' for a view of set a, or 'Tensor(a!)' for a tensor "
                       "that is written to",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int(a) x) -> Tensor", kNs),
                       "[schema] alias annotations apply only to Tensor types, not 'int' at "
                       "column 5:\n"
                       "  f(int(a) x) -> Tensor\n"
                       "       ^",
                       mt::Error);
}

TEST_CASE("schema errors: '*' and the order of arguments") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x, *, int a, *, int b) -> Tensor", kNs),
                       "[schema] '*' appears twice at column 22:\n"
                       "  f(Tensor x, *, int a, *, int b) -> Tensor\n"
                       "                        ^\n"
                       "every argument after the first '*' is already keyword-only",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x, *) -> Tensor", kNs),
                       "[schema] '*' must be followed by at least one keyword-only argument "
                       "at column 12:\n"
                       "  f(Tensor x, *) -> Tensor\n"
                       "              ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x, int a=1, Tensor y) -> Tensor", kNs),
                       "[schema] argument 'y' has no default but follows an argument with a "
                       "default at column 28:\n"
                       "  f(Tensor x, int a=1, Tensor y) -> Tensor\n"
                       "                              ^\n"
                       "give it a default, or make it keyword-only by moving it after '*'",
                       mt::Error);
}

TEST_CASE("schema errors: argument and return lists") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor) -> Tensor", kNs),
                       "[schema] expected an argument name after the type 'Tensor' at column 8:\n"
                       "  f(Tensor) -> Tensor\n"
                       "          ^\n"
                       "every argument has a name, as in 'Tensor x'",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x,) -> Tensor", kNs),
                       "[schema] expected an argument type at column 11:\n"
                       "  f(Tensor x,) -> Tensor\n"
                       "             ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x Tensor y) -> Tensor", kNs),
                       "[schema] expected ',' or ')' after argument 'x' at column 11:\n"
                       "  f(Tensor x Tensor y) -> Tensor\n"
                       "             ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x) ->", kNs),
                       "[schema] expected a return type at column 14:\n"
                       "  f(Tensor x) ->\n"
                       "                ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x) -> Tensor(a) y=1", kNs),
                       "[schema] returns cannot have default values at column 26:\n"
                       "  f(Tensor x) -> Tensor(a) y=1\n"
                       "                            ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f", kNs),
                       "[schema] expected '(' after the operator name at column 1:\n"
                       "  f\n"
                       "   ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("(Tensor x) -> Tensor", kNs),
                       "[schema] expected an operator name at column 0:\n"
                       "  (Tensor x) -> Tensor\n"
                       "  ^\n"
                       "a schema starts with its operator name: "
                       "'triton_demo::silu(Tensor x) -> Tensor'",
                       mt::Error);
}

TEST_CASE("schema errors: list types") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int[0] x) -> Tensor", kNs),
                       "[schema] list size 0 is out of range (1 to 64) at column 6:\n"
                       "  f(int[0] x) -> Tensor\n"
                       "        ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int[x] x) -> Tensor", kNs),
                       "[schema] expected a list size or ']' at column 6:\n"
                       "  f(int[x] x) -> Tensor\n"
                       "        ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor?[] x) -> Tensor", kNs),
                       "[schema] lists of optional values are not supported at column 9:\n"
                       "  f(Tensor?[] x) -> Tensor\n"
                       "           ^\n"
                       "for an optional list write 'T[]?'",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int[][] x) -> Tensor", kNs),
                       "[schema] lists of lists are not supported at column 7:\n"
                       "  f(int[][] x) -> Tensor\n"
                       "         ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int?? x) -> Tensor", kNs),
                       "[schema] a type takes at most one '?' at column 6:\n"
                       "  f(int?? x) -> Tensor\n"
                       "        ^",
                       mt::Error);
}

TEST_CASE("schema errors: numbers and stray characters") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int x=99999999999999999999) -> Tensor", kNs),
                       "[schema] integer 99999999999999999999 does not fit in 64 bits at "
                       "column 8:\n"
                       "  f(int x=99999999999999999999) -> Tensor\n"
                       "          ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(float x=1e999) -> Tensor", kNs),
                       "[schema] number 1e999 is out of the range of a double at column 10:\n"
                       "  f(float x=1e999) -> Tensor\n"
                       "            ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(float x=1abc) -> Tensor", kNs),
                       "[schema] malformed number '1abc' at column 10:\n"
                       "  f(float x=1abc) -> Tensor\n"
                       "            ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int[] x=[1 2]) -> Tensor", kNs),
                       "[schema] expected ',' or ']' in the list default at column 13:\n"
                       "  f(int[] x=[1 2]) -> Tensor\n"
                       "               ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(int[] x=[True]) -> Tensor", kNs),
                       "[schema] expected a number in the list default at column 11:\n"
                       "  f(int[] x=[True]) -> Tensor\n"
                       "             ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(Tensor x @) -> Tensor", kNs),
                       "[schema] unexpected character '@' at column 11:\n"
                       "  f(Tensor x @) -> Tensor\n"
                       "             ^",
                       mt::Error);
}

TEST_CASE("schema errors: a multi-line schema reports the line and shows only that line") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(\n  Tensor x,\n  Tensr y) -> Tensor", kNs),
                       "[schema] unknown type 'Tensr' at line 3, column 2:\n"
                       "    Tensr y) -> Tensor\n"
                       "    ^\n"
                       "did you mean 'Tensor'? (known types: Tensor, int, float, bool, str, "
                       "ScalarType, Device, Scalar)",
                       mt::Error);
}

TEST_CASE("schema errors: columns count characters, so the caret lines up after UTF-8") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("f(str s=\"\xc3\xa9\", inte y) -> Tensor", kNs),
                       "[schema] unknown type 'inte' at column 13:\n"
                       "  f(str s=\"\xc3\xa9\", inte y) -> Tensor\n"
                       "               ^\n"
                       "did you mean 'int'? (known types: Tensor, int, float, bool, str, "
                       "ScalarType, Device, Scalar)",
                       mt::Error);
}

TEST_CASE("schema errors: the namespace inside a library must match it") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("aten::f(Tensor x) -> Tensor", kNs),
                       "[schema] namespace 'aten' does not match the library's namespace "
                       "'triton_demo' at column 0:\n"
                       "  aten::f(Tensor x) -> Tensor\n"
                       "  ^\n"
                       "inside MT_LIBRARY(triton_demo, m) write 'f(...)' or 'triton_demo::f(...)'",
                       mt::Error);
}

TEST_CASE("schema errors: the tutorial's pitfall, a namespace written with '_' instead of '::'") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("triton_demo_silu(Tensor x) -> Tensor"),
                       "[schema] invalid operator name 'triton_demo_silu' (it has no namespace) "
                       "at column 0:\n"
                       "  triton_demo_silu(Tensor x) -> Tensor\n"
                       "  ^\n"
                       "operator names have the form 'namespace::op_name' (for example "
                       "'triton_demo::silu'), where both parts are identifiers (letters, digits, "
                       "underscores, not starting with a digit); did you mean 'triton_demo::silu'?",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("triton-demo::silu(Tensor x) -> Tensor"),
                       "[schema] invalid operator name 'triton-demo::silu' (the namespace "
                       "'triton-demo' is not an identifier) at column 0:\n"
                       "  triton-demo::silu(Tensor x) -> Tensor\n"
                       "  ^\n"
                       "operator names have the form 'namespace::op_name' (for example "
                       "'triton_demo::silu'), where both parts are identifiers (letters, digits, "
                       "underscores, not starting with a digit); did you mean 'triton_demo::silu'?",
                       mt::Error);
}

// ---- Operator names ----

TEST_CASE("operator names: valid names split into namespace, name and overload") {
  CHECK_NOTHROW(mt::check_operator_name("triton_demo::silu"));
  CHECK_NOTHROW(mt::check_operator_name("_ns1::op_2.out"));
  mt::OperatorName op = mt::parse_operator_name("aten::add.Tensor");
  CHECK(op.ns == "aten");
  CHECK(op.name == "add");
  CHECK(op.overload == "Tensor");
  CHECK(op.str() == "aten::add.Tensor");
  CHECK(mt::parse_operator_name("triton_demo::silu").str() == "triton_demo::silu");
}

TEST_CASE("operator names: each bad form names the problem and explains namespace::op") {
  const std::string form =
      "operator names have the form 'namespace::op_name' (for example 'triton_demo::silu'), "
      "where both parts are identifiers (letters, digits, underscores, not starting with a "
      "digit)";
  struct Case {
    const char* name;
    const char* problem;
    const char* hint;
  };
  const Case cases[] = {
      {"triton_demo_silu", "it has no namespace", "; did you mean 'triton_demo::silu'?"},
      {"triton_demo_silu.out", "it has no namespace", "; did you mean 'triton_demo::silu.out'?"},
      {"silu", "it has no namespace", ""},
      {"triton_demo:silu", "it has a single ':' where '::' belongs",
       "; did you mean 'triton_demo::silu'?"},
      {"triton-demo::silu", "the namespace 'triton-demo' is not an identifier",
       "; did you mean 'triton_demo::silu'?"},
      {"::silu", "the namespace is empty", ""},
      {"a::b::c", "it has more than one '::'", ""},
      {"ns::", "the op name is empty", ""},
      {"1ns::op", "the namespace '1ns' is not an identifier", ""},
      {"ns::1op", "the op name '1op' is not an identifier", ""},
      {"ns::op.", "the overload name after '.' is empty", ""},
      {"ns::op.a-b", "the overload name 'a-b' is not an identifier",
       "; did you mean 'ns::op.a_b'?"},
      {"", "it is empty", ""},
  };
  for (const Case& c : cases) {
    std::string name = c.name;
    CAPTURE(name);
    std::string want = fmt::format("[schema] invalid operator name '{}' ({}); {}{}", c.name,
                                   c.problem, form, c.hint);
    CHECK_THROWS_WITH_AS(mt::check_operator_name(c.name), want.c_str(), mt::Error);
    CHECK_THROWS_WITH_AS(mt::parse_operator_name(c.name), want.c_str(), mt::Error);
  }
}

// ---- Inputs the fuzzer found ----

// Shapes the fuzzer reached, kept in tests/fuzz/corpus/schema/found_*.

TEST_CASE("schema fuzz finds: any byte but a newline stays inside a string, and prints back") {
  const char text[] = "f(str a='\0t\\'3', str b=\"\xf4\r\") -> str";
  FunctionSchema s = mt::parse_schema(std::string(text, sizeof text - 1), kNs);
  CHECK(s.arguments[0].default_value == DefaultValue(std::string("\0t'3", 4)));
  CHECK(s.arguments[1].default_value == DefaultValue(std::string("\xf4\r")));
  const char printed[] = "triton_demo::f(str a=\"\0t'3\", str b=\"\xf4\\r\") -> str";
  CHECK(s.str() == std::string(printed, sizeof printed - 1));
  CHECK(mt::parse_schema(s.str()) == s);
}

TEST_CASE("schema fuzz finds: a tuple may mix named and unnamed returns") {
  FunctionSchema s = mt::parse_schema("amax.dhm( int d) -> (Tensor v, int, bool k)", kNs);
  REQUIRE(s.returns.size() == 3);
  CHECK(s.returns[1].name == "");
  CHECK(s.str() == "triton_demo::amax.dhm(int d) -> (Tensor v, int, bool k)");
  CHECK(mt::parse_schema(s.str()) == s);
}

TEST_CASE("schema fuzz finds: one negative int fills a fixed-size list") {
  FunctionSchema s = mt::parse_schema("f (int[20] k=-1) ->Tensor", kNs);
  CHECK(s.arguments[0].default_value == DefaultValue(std::vector<int64_t>(20, -1)));
  CHECK(mt::parse_schema(s.str()) == s);
}

TEST_CASE("schema fuzz finds: bytes that end a number, and list sizes of one") {
  CHECK_THROWS_WITH_AS(mt::parse_schema("fd(Tensor ? w=0\xff", kNs),
                       "[schema] default value 0 does not match type 'Tensor?' of argument 'w' "
                       "at column 14:\n"
                       "  fd(Tensor ? w=0\xff\n"
                       "                ^\n"
                       "a 'Tensor?' argument can only default to None",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("ad(int[2] pad=[0, 0teA+\"no", kNs),
                       "[schema] malformed number '0teA' at column 18:\n"
                       "  ad(int[2] pad=[0, 0teA+\"no\n"
                       "                    ^",
                       mt::Error);
  CHECK_THROWS_WITH_AS(mt::parse_schema("d(int[1]pad=[0, 1]", kNs),
                       "[schema] default value [0, 1] has 2 elements, but type 'int[1]' of "
                       "argument 'pad' needs 1 at column 12:\n"
                       "  d(int[1]pad=[0, 1]\n"
                       "              ^\n"
                       "give 1 value, or [] for none",
                       mt::Error);
}
