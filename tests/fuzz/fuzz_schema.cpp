// libFuzzer target for the schema parser: any input either parses or throws mt::Error, and
// a parsed schema prints to text that parses back to the same schema (and prints the same).
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
}

void fuzz_one(std::string_view text, std::string_view default_ns) {
  mt::FunctionSchema schema;
  try {
    schema = mt::parse_schema(text, default_ns);
  } catch (const mt::InternalError& e) {
    die("internal assertion", e.what());
  } catch (const mt::Error&) {
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
  } catch (const mt::Error&) {
  }
  return 0;
}
