// SPDX-License-Identifier: MIT
// User text inside error messages: quoted, with control characters escaped, so a NUL
// cannot cut what() short and a terminal escape cannot reach the terminal.
#include <doctest/doctest.h>

#include <string>

#include "dispatcher/dispatcher.h"
#include "dispatcher/schema.h"
#include "helpers.h"
#include "runtime/error.h"

namespace {}  // namespace

TEST_CASE("quoted: user text in single quotes, with control characters and bad bytes escaped") {
  CHECK(mt::quoted("ns::op") == "'ns::op'");
  CHECK(mt::quoted("") == "''");
  CHECK(mt::quoted("it's a \\") == "'it\\'s a \\\\'");
  CHECK(mt::quoted("a\nb\tc\rd") == "'a\\nb\\tc\\rd'");
  CHECK(mt::quoted(std::string("a\0b", 3)) == "'a\\x00b'");
  CHECK(mt::quoted("\x1b[2J\x7f") == "'\\x1b[2J\\x7f'");
  CHECK(mt::quoted("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
        "'caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80'");
  CHECK(mt::quoted("\xc2\x9b"
                   "2J") == "'\\xc2\\x9b2J'");               // C1 CSI, as UTF-8
  CHECK(mt::quoted("\xff\xfe") == "'\\xff\\xfe'");           // not UTF-8
  CHECK(mt::quoted("\xe2\x82") == "'\\xe2\\x82'");           // cut short
  CHECK(mt::quoted("\xc0\xaf") == "'\\xc0\\xaf'");           // overlong
  CHECK(mt::quoted("\xed\xa0\x80") == "'\\xed\\xa0\\x80'");  // a surrogate
}

TEST_CASE("error text: a NUL byte in an op name does not cut the message short") {
  const std::string name("ns::a\0b", 7);
  const std::string e = error_of([&] { mt::check_operator_name(name); });
  CHECK(e.find('\0') == std::string::npos);
  CHECK(e ==
        "[schema] invalid operator name 'ns::a\\x00b' (the op name 'a\\x00b' is not an "
        "identifier); operator names have the form 'namespace::op_name' (for example "
        "'triton_demo::silu'), where both parts are identifiers (letters, digits, underscores, "
        "not starting with a digit)");
  CHECK(error_of([&] { mt::dispatcher().find_or_throw(name); }) == e);
  // Through a schema the message keeps its caret line and still holds the whole name.
  const std::string s =
      error_of([&] { mt::parse_schema(std::string("ns::a\0b(Tensor x) -> Tensor", 27)); });
  CHECK(s.find('\0') == std::string::npos);
  CHECK(
      s.starts_with("[schema] invalid operator name 'ns::a\\x00b' (the op name 'a\\x00b' is not an "
                    "identifier) at column 0:\n"));
}

TEST_CASE(
    "error text: terminal escapes in names and raw newlines in default literals are escaped") {
  const std::string e = error_of([] { mt::dispatcher().dump("ns::\x1b[2Jx"); });
  CHECK(e.find('\x1b') == std::string::npos);
  CHECK(
      e.starts_with("[schema] invalid operator name 'ns::\\x1b[2Jx' (the op name '\\x1b[2Jx' is "
                    "not an identifier)"));
  CHECK(error_of([] { mt::dispatcher().dump("ns::no_such_op_here"); }) ==
        "[dump] no operator named 'ns::no_such_op_here' is registered");
  // A list default spread over two lines: the literal in the message shows \n, not a newline.
  const std::string d = error_of([] { mt::parse_schema("ns::f(int[] d=[1,\n2.5]) -> Tensor"); });
  const std::string first_line = d.substr(0, d.find('\n'));
  CHECK(
      first_line ==
      "[schema] default value '[1,\\n2.5]' does not match type 'int[]' of argument 'd' at line 1, "
      "column 14:");
}

TEST_CASE("error text: an internal assertion's message starts with [internal] too") {
  // Every mt::Error starts with a name in brackets (docs/embedding.md); InternalError is one.
  const std::string e = error_of([] { MT_ASSERT(1 + 1 == 3, "context {}", 7); });
  CHECK(e.starts_with("[internal] assertion '1 + 1 == 3' failed at tests/test_error_text.cpp:"));
  CHECK(e.ends_with(": context 7 (this is a bug in minitensor; please report it)"));
}
