// SPDX-License-Identifier: MIT
// libFuzzer target for the schema parser: any input either parses or throws mt::Error whose
// message starts with "[schema] " and holds no control byte but newlines (user text is
// quoted with escapes), and a parsed schema prints to text that parses back to the same
// schema (and prints the same: the printed form is canonical), also with its own
// namespace as the default.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dispatcher/schema.h"
#include "runtime/error.h"

namespace {

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_schema: %s\n%s\n", what, detail.c_str());
  std::abort();  // the fuzzer's way to report a finding
}

void check_round_trip(const mt::FunctionSchema& schema, std::string_view default_ns) {
  std::string printed = schema.str();
  mt::FunctionSchema again;
  try {
    again = mt::parse_schema(printed, default_ns);
  } catch (const mt::Error& e) {
    die("printed schema does not parse", printed + "\n" + e.what());
  }
  if (!(again == schema)) die("round trip changed the schema", printed + "\n" + again.str());
  if (again.str() != printed) die("printing is not idempotent", printed + "\n" + again.str());
  if (mt::parse_operator_name(schema.full_name()).str() != schema.full_name())
    die("full_name does not re-parse", schema.full_name());
  // Printed without its namespace, inside a library of that namespace: the same schema.
  std::string bare = printed.substr(schema.ns.size() + 2);
  mt::FunctionSchema in_library;
  try {
    in_library = mt::parse_schema(bare, schema.ns);
  } catch (const mt::Error& e) {
    die("printed schema without its namespace does not parse", bare + "\n" + e.what());
  }
  if (!(in_library == schema)) die("parsing with a default namespace changed it", bare);
}

// A user error's message: "[schema] ..." (every mt::Error starts with a name in brackets,
// docs/embedding.md), and no NUL, escape or other control byte (newlines lay out the caret).
void check_message(const mt::Error& e, std::string_view input) {
  if (!std::string_view(e.what()).starts_with("[schema] "))
    die("an error message not starting with [schema]", std::string(input) + "\n" + e.what());
  for (const char* p = e.what(); *p; ++p)
    if ((static_cast<unsigned char>(*p) < 0x20 && *p != '\n') || *p == 0x7f)
      die("control byte in an error message", std::string(input) + "\n" + e.what());
}

void fuzz_one(std::string_view text, std::string_view default_ns) {
  mt::FunctionSchema schema;
  try {
    schema = mt::parse_schema(text, default_ns);
  } catch (const mt::InternalError& e) {
    die("internal assertion", e.what());
  } catch (const mt::Error& e) {
    check_message(e, text);
    return;  // a user error is a fine answer to bad input
  }
  check_round_trip(schema, default_ns);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz_one(text, {});
  fuzz_one(text, "triton_demo");
  try {
    mt::OperatorName op = mt::parse_operator_name(text);
    if (op.str() != text) die("operator name does not print back", std::string(text));
  } catch (const mt::InternalError& e) {
    die("internal assertion", e.what());
  } catch (const mt::Error& e) {
    check_message(e, text);
  }
  return 0;
}
