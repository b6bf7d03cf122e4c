// SPDX-License-Identifier: MIT
// `minitensor opcheck OP [--sample ARGS]...`: opcheck (every test, test_compile included)
// and gradcheck on an op, typically one from a library loaded with --load.
#include <fmt/format.h>

#include <charconv>
#include <cstdio>

#include "tools/cli/cli.h"

namespace mt::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits at the commas outside parentheses and brackets.
std::vector<std::string_view> split_top(std::string_view text, std::string_view whole) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    MT_CHECK(depth >= 0,
             "[opcheck] --sample '{}': a '{}' closes nothing; write e.g. 'randn(3,4), 2.0'", whole,
             c);
    if (c == ',' && depth == 0) {
      items.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  MT_CHECK(depth == 0, "[opcheck] --sample '{}': a parenthesis or bracket is not closed", whole);
  return items;
}

bool parse_int(std::string_view s, int64_t* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

Value parse_item(std::string_view item, std::string_view whole) {
  MT_CHECK(!item.empty(), "[opcheck] --sample '{}': an empty item; write e.g. 'randn(3,4), 2.0'",
           whole);
  if (item == "none" || item == "None") return Value();
  if (item == "true" || item == "True") return Value(true);
  if (item == "false" || item == "False") return Value(false);
  if (int64_t i = 0; parse_int(item, &i)) return Value(i);
  if (item.front() == '[') {
    MT_CHECK(item.back() == ']', "[opcheck] --sample '{}': '{}' is not a list of ints like [1,2]",
             whole, item);
    std::vector<int64_t> list;
    std::string_view inner = trim(item.substr(1, item.size() - 2));
    if (!inner.empty())
      for (std::string_view e : split_top(inner, whole)) {
        int64_t v = 0;
        MT_CHECK(parse_int(e, &v), "[opcheck] --sample '{}': '{}' in '{}' is not an int", whole, e,
                 item);
        list.push_back(v);
      }
    return Value(std::move(list));
  }
  const size_t open = item.find('(');
  if (open != std::string_view::npos) {
    const std::string_view fn = item.substr(0, open);
    const size_t close = item.rfind(')');
    MT_CHECK(close != std::string_view::npos && close > open,
             "[opcheck] --sample '{}': '{}' has no closing parenthesis", whole, item);
    Shape shape;
    std::string_view dims = trim(item.substr(open + 1, close - open - 1));
    if (!dims.empty())
      for (std::string_view d : split_top(dims, whole)) {
        int64_t v = 0;
        MT_CHECK(parse_int(d, &v) && v >= 0,
                 "[opcheck] --sample '{}': '{}' in '{}' is not a size (a whole number, 0 or more)",
                 whole, d, item);
        shape.push_back(v);
      }
    DType dtype = DType::Float64;
    std::string_view rest = trim(item.substr(close + 1));
    if (!rest.empty()) {
      MT_CHECK(rest.front() == ':',
               "[opcheck] --sample '{}': '{}' after '{}'; a dtype goes as ':float32'", whole, rest,
               item.substr(0, close + 1));
      const std::string name(trim(rest.substr(1)));
      bool found = false;
      for (DType d : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16, DType::Int64,
                      DType::Bool})
        if (dtype_name(d) == name) dtype = d, found = true;
      MT_CHECK(found,
               "[opcheck] --sample '{}': unknown dtype '{}'; use float64, float32, float16, "
               "bfloat16, int64 or bool",
               whole, name);
    }
    const TensorOptions opts{.dtype = dtype};
    if (fn == "randn") return Value(randn(shape, opts));
    if (fn == "rand") return Value(rand(shape, opts));
    if (fn == "ones") return Value(ones(shape, opts));
    if (fn == "zeros") return Value(zeros(shape, opts));
    MT_ERROR("[opcheck] --sample '{}': unknown tensor maker '{}'; use randn, rand, ones or zeros",
             whole, fn);
  }
  double d = 0;
  auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
  if (ec == std::errc() && end == item.data() + item.size()) return Value(d);
  MT_ERROR(
      "[opcheck] --sample '{}': cannot read '{}'; write tensors as randn(3,4), numbers, "
      "true/false, none or [1,2]",
      whole, item);
}

// One sample's arguments, written as a comma list: randn(3,4) rand(2) ones(5) zeros(2,2)
// (float64 tensors; ':float32' etc. after the ')' picks another dtype), numbers (2, -0.5),
// true/false, none, and int lists [1,2]. Throws mt::Error naming the bad item.
Stack parse_sample(std::string_view text) {
  Stack s;
  if (trim(text).empty()) return s;
  for (std::string_view item : split_top(text, text)) s.push_back(parse_item(item, text));
  return s;
}

// The samples for `op` when none is given: its arguments without a default, each tensor
// randn [3, 4] then [5] (float64), each float 1.5, int 2, bool true. Throws mt::Error when
// an argument has no such value (a list, a string, ...): give --sample then.
std::vector<Stack> default_samples(const FunctionSchema& schema) {
  std::vector<Stack> out;
  for (const Shape& shape : {Shape{3, 4}, Shape{5}}) {
    Stack s;
    for (const Argument& a : schema.arguments) {
      if (a.default_value) break;  // the dispatcher fills this one and the rest
      const SchemaType& t = a.type;
      MT_CHECK(!t.is_list && (t.kind == TypeKind::Tensor || t.kind == TypeKind::Float ||
                              t.kind == TypeKind::Int || t.kind == TypeKind::Bool ||
                              t.kind == TypeKind::Scalar),
               "[opcheck] {}: no default sample for argument '{}' of type {}; give the "
               "arguments with --sample, e.g. --sample 'randn(3,4), 2.0'",
               schema.name, a.name, t.str());
      if (t.kind == TypeKind::Tensor)
        s.push_back(randn(shape, TensorOptions{.dtype = DType::Float64}));
      if (t.kind == TypeKind::Float || t.kind == TypeKind::Scalar) s.push_back(1.5);
      if (t.kind == TypeKind::Int) s.push_back(int64_t(2));
      if (t.kind == TypeKind::Bool) s.push_back(true);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Runs opcheck and, per sample, gradcheck over its floating tensors (as float64); prints a
// report. Returns 0 when every test passed, 1 otherwise.
int opcheck_command(const std::string& op_name, const std::vector<std::string>& sample_texts) {
  OperatorHandle op = dispatcher().find_or_throw(op_name);
  std::vector<Stack> samples;
  for (const std::string& t : sample_texts) samples.push_back(parse_sample(t));
  if (samples.empty()) samples = default_samples(op.schema());
  std::printf("opcheck %s on %zu sample(s)\n", op.schema().str().c_str(), samples.size());
  const OpCheckReport report = opcheck(op, samples);
  std::printf("%s\n", report.str().c_str());
  bool ok = report.ok();
  for (size_t si = 0; si < samples.size(); ++si) {
    // gradcheck over the sample's floating tensors (in float64, which finite differences
    // need), the other arguments fixed.
    std::vector<size_t> slots;
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < samples[si].size(); ++i)
      if (samples[si][i].is_tensor() && samples[si][i].to_tensor().defined() &&
          is_floating(samples[si][i].to_tensor().dtype())) {
        slots.push_back(i);
        inputs.push_back(
            samples[si][i].to_tensor().detach().to(DType::Float64).requires_grad_(true));
      }
    if (inputs.empty() || op.schema().returns.empty()) {
      std::printf("gradcheck sample %zu: skipped (no floating tensor input, or no output)\n", si);
      continue;
    }
    const Stack base = samples[si];
    auto fn = [&op, base, slots](const std::vector<Tensor>& xs) {
      Stack s = base;
      for (size_t k = 0; k < slots.size(); ++k) s[slots[k]] = xs[k];
      op.call_boxed(&s);
      std::vector<Tensor> outs;
      for (const Value& v : s)
        if (v.is_tensor() && is_floating(v.to_tensor().dtype())) outs.push_back(v.to_tensor());
      return outs;
    };
    GradcheckResult g;
    try {
      g = gradcheck(DifferentiableFn(fn), inputs);
    } catch (const Error& e) {  // no autograd formula, a backward that throws, ...
      g.ok = false;
      g.message = e.what();
    }
    std::printf("gradcheck sample %zu: %s\n", si, g.ok ? "ok" : ("FAIL: " + g.message).c_str());
    ok = ok && g.ok;
  }
  std::printf("%s\n", ok ? "opcheck: all passed" : "opcheck: FAILED");
  return ok ? 0 : 1;
}

struct OpcheckCliOptions {
  std::string op;
  std::vector<std::string> samples;
};

}  // namespace

void add_opcheck(CLI::App& app, Commands& commands) {
  auto [opc, o] = commands.add<OpcheckCliOptions>(
      app, "opcheck",
      "opcheck (every test, test_compile included) and gradcheck on an op, e.g. one of --load's",
      [](const OpcheckCliOptions& opts) { return opcheck_command(opts.op, opts.samples); });
  opc->add_option("op", o->op, "the op, e.g. myops::scale")->required();
  opc->add_option(
      "--sample", o->samples,
      "one sample's arguments, e.g. 'randn(3,4), 2.0' (float64 tensors; randn(3):float32, "
      "numbers, true/false, none, [1,2]); repeatable; default: each tensor randn [3, 4] "
      "then [5], each float 1.5, int 2, bool true");
}

}  // namespace mt::cli
