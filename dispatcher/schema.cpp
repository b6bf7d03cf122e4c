// SPDX-License-Identifier: MIT
// Schema parser and printer: a small lexer that tracks byte offsets and a recursive-descent
// parser over it. Errors show the offending line with a caret under the column.
#include "dispatcher/schema.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "dispatcher/edit_distance.h"
#include "runtime/error.h"

namespace mt {
namespace {

constexpr std::array<TypeKind, 8> kAllKinds = {
    TypeKind::Tensor, TypeKind::Int,        TypeKind::Float,  TypeKind::Bool,
    TypeKind::Str,    TypeKind::ScalarType, TypeKind::Device, TypeKind::Scalar};
constexpr int kMaxListSize = 64;  // bounds int[N] (an int default is expanded to N copies)
constexpr std::string_view kKnownTypes =
    "Tensor, int, float, bool, str, ScalarType, Device, Scalar";
constexpr std::string_view kNameForm =
    "operator names have the form 'namespace::op_name' (for example 'triton_demo::silu'), "
    "where both parts are identifiers (letters, digits, underscores, not starting with a digit)";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

bool is_identifier(std::string_view s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s)
    if (!is_ident_char(c)) return false;
  return true;
}

std::optional<TypeKind> lookup_kind(std::string_view name) {
  for (TypeKind k : kAllKinds)
    if (type_kind_name(k) == name) return k;
  return std::nullopt;
}

// The known type closest to `bad`, or "" when none is close.
std::string_view closest_type(std::string_view bad) {
  static constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
      {"double", "float"}, {"long", "int"},         {"int64", "int"},
      {"integer", "int"},  {"SymInt", "int"},       {"boolean", "bool"},
      {"string", "str"},   {"dtype", "ScalarType"}, {"Number", "Scalar"}};
  for (auto [alias, known] : kAliases)
    if (detail::edit_distance(alias, bad, true) == 0) return known;
  std::string_view best;
  size_t best_dist = bad.size() <= 4 ? 2 : 3;  // one edit for short names, two for longer
  for (TypeKind k : kAllKinds) {
    size_t d = detail::edit_distance(type_kind_name(k), bad, true);
    if (d < best_dist) best = type_kind_name(k), best_dist = d;
  }
  return best;
}

// ---- Operator names ----

// Why `name` is not a valid operator name, or "" when it is (then fills `out`).
std::string name_problem(std::string_view name, OperatorName* out) {
  if (name.empty()) return "it is empty";
  size_t sep = name.find("::");
  if (sep == std::string_view::npos)
    return name.find(':') == std::string_view::npos ? "it has no namespace"
                                                    : "it has a single ':' where '::' belongs";
  if (name.find("::", sep + 2) != std::string_view::npos) return "it has more than one '::'";
  std::string_view ns = name.substr(0, sep), rest = name.substr(sep + 2);
  size_t dot = rest.find('.');
  std::string_view op = rest.substr(0, dot);
  std::string_view overload = dot == std::string_view::npos ? "" : rest.substr(dot + 1);
  if (ns.empty()) return "the namespace is empty";
  if (!is_identifier(ns))
    return fmt::format("the namespace {} is not an identifier", mt::quoted(ns));
  if (op.empty()) return "the op name is empty";
  if (!is_identifier(op)) return fmt::format("the op name {} is not an identifier", mt::quoted(op));
  if (dot != std::string_view::npos && overload.empty())
    return "the overload name after '.' is empty";
  if (dot != std::string_view::npos && !is_identifier(overload))
    return fmt::format("the overload name {} is not an identifier", mt::quoted(overload));
  if (out) *out = {std::string(ns), std::string(op), std::string(overload)};
  return {};
}

// A guess at the intended name (see check_operator_name in the header), or "" for none.
std::string guess_name(std::string_view name) {
  std::string g(name);
  for (char& c : g)
    if (c == '-') c = '_';
  if (g.find("::") == std::string::npos) {
    if (g.find(':') != std::string::npos) {
      std::string fixed;
      for (char c : g) fixed += c == ':' ? std::string("::") : std::string(1, c);
      g = fixed;
    } else {
      size_t underscore = g.rfind('_', g.find('.'));
      if (underscore != std::string::npos) g.replace(underscore, 1, "::");
    }
  }
  return g != name && name_problem(g, nullptr).empty() ? g : std::string();
}

// The explanation that follows every operator-name error.
std::string name_help(std::string_view name) {
  std::string guess = guess_name(name);
  return guess.empty() ? std::string(kNameForm)
                       : fmt::format("{}; did you mean '{}'?", kNameForm, guess);
}

// ---- Printing helpers ----

std::string format_float(double d) {
  std::string s = fmt::format("{}", d);
  if (s.find_first_not_of("-0123456789") == std::string::npos) s += ".0";
  return s;
}

std::string quote_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    size_t k = std::string_view("\\\"\n\t\r").find(c);  // escaped as \\ \" \n \t \r
    out += k == std::string_view::npos ? std::string(1, c) : std::string{'\\', "\\\"ntr"[k]};
  }
  return out + "\"";
}

template <typename T, typename F>
std::string format_list(const std::vector<T>& v, F&& format_one) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + format_one(v[i]);
  return out + "]";
}

std::string format_default(const DefaultValue& v) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(double d) const { return format_float(d); }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(const std::string& s) const { return quote_string(s); }
    std::string operator()(const std::vector<int64_t>& l) const {
      return format_list(l, [](int64_t i) { return fmt::format("{}", i); });
    }
    std::string operator()(const std::vector<double>& l) const {
      return format_list(l, format_float);
    }
  };
  return std::visit(Visitor{}, v);
}

// "Tensor(a!)[]?": the type with its alias annotation.
std::string type_text(const SchemaType& type, const std::optional<AliasInfo>& alias) {
  std::string out(type_kind_name(type.kind));
  if (alias) out += fmt::format("({}{})", alias->set, alias->is_write ? "!" : "");
  if (type.is_list) out += type.list_size >= 0 ? fmt::format("[{}]", type.list_size) : "[]";
  if (type.is_optional) out += "?";
  return out;
}

// What a default for `type` may be, for hints ("" when nothing but None).
std::string_view accepted_defaults(const SchemaType& t) {
  if (t.is_list) {
    if (t.kind == TypeKind::Int)
      return t.list_size > 0 ? "a list of integers or one integer"
                             : "a list of integers such as [0, 1]";
    if (t.kind == TypeKind::Float) return "a list of numbers such as [0.5, 1.0]";
    return "";
  }
  if (t.kind == TypeKind::Int) return "an integer";
  if (t.kind == TypeKind::Float) return "a number";
  if (t.kind == TypeKind::Bool) return "True or False";
  if (t.kind == TypeKind::Str) return "a quoted string";
  if (t.kind == TypeKind::Scalar) return "a number or True/False";
  return "";
}

// ---- Lexer and parser ----

enum class Tok : uint8_t { End, Ident, Int, Float, Str, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string_view text;  // as written (strings with their quotes)
  size_t pos = 0;         // byte offset in the schema text
  int64_t int_value = 0;
  double float_value = 0;
  std::string str_value;  // a string literal with its escapes resolved
  bool is(std::string_view punct) const { return kind == Tok::Punct && text == punct; }
};

// A default value as written, before it is checked against the argument's type.
struct Literal {
  DefaultValue value;  // a list of numbers is vector<double> if any element is a float
  bool is_list = false;
  size_t pos = 0;
  std::string_view text;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view default_ns)
      : text_(text), default_ns_(default_ns) {}

  FunctionSchema parse() {
    FunctionSchema schema;
    parse_name(schema);
    if (!accept("(")) fail(peek().pos, "expected '(' after the operator name");
    parse_arguments(schema.arguments);
    if (!accept("->")) fail(peek().pos, "expected '->' after the argument list");
    parse_returns(schema.returns);
    if (peek().kind != Tok::End)
      fail(peek().pos, "unexpected text after the returns",
           peek().is(",") ? "several returns go in parentheses: '-> (Tensor, Tensor)'" : "");
    return schema;
  }

 private:
  // Throws "[schema] <message> at column C:", the line with a caret under C, then the hint.
  [[noreturn]] void fail(size_t pos, std::string_view message, std::string_view hint = {}) const {
    pos = std::min(pos, text_.size());
    size_t line_start = pos == 0 ? std::string_view::npos : text_.rfind('\n', pos - 1);
    line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
    size_t line_end = std::min(text_.find('\n', pos), text_.size());
    size_t column = 0;  // code points before pos on its line
    for (size_t i = line_start; i < pos; ++i) column += (uint8_t(text_[i]) & 0xC0) != 0x80;
    std::string line(text_.substr(line_start, line_end - line_start));
    for (char& c : line)
      if (uint8_t(c) < 0x20 || c == 0x7f) c = ' ';  // keep the caret aligned
    std::string where = fmt::format("column {}", column);
    if (text_.find('\n') != std::string_view::npos) {
      size_t line_no = 1 + std::count(text_.begin(), text_.begin() + line_start, '\n');
      where = fmt::format("line {}, column {}", line_no, column);
    }
    std::string msg = fmt::format("[schema] {} at {}:\n  {}\n  {}^", message, where, line,
                                  std::string(column, ' '));
    if (!hint.empty()) msg += fmt::format("\n{}", hint);
    MT_ERROR("{}", msg);
  }

  // -- lexer --

  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }

  Token lex() {
    skip_space();
    Token t;
    t.pos = pos_;
    if (pos_ >= text_.size()) return t;
    char c = text_[pos_];
    char after = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
    if (is_ident_start(c)) {
      t.kind = Tok::Ident;
      while (pos_ < text_.size() && is_ident_char(text_[pos_])) ++pos_;
    } else if (is_digit(c) || (c == '-' && is_digit(after))) {
      lex_number(t);
    } else if (c == '"' || c == '\'') {
      lex_string(t);
    } else if (c == '-' && after == '>') {
      t.kind = Tok::Punct;
      pos_ += 2;
    } else if (std::string_view("()[],*?!=").find(c) != std::string_view::npos) {
      t.kind = Tok::Punct;
      ++pos_;
    } else {
      bool printable = c >= 0x20 && c < 0x7f;
      fail(pos_, printable ? fmt::format("unexpected character '{}'", c)
                           : fmt::format("unexpected byte 0x{:02x}", uint8_t(c)));
    }
    t.text = text_.substr(t.pos, pos_ - t.pos);
    return t;
  }

  void lex_number(Token& t) {
    auto digits = [&] {
      size_t start = pos_;
      while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
      return pos_ > start;
    };
    auto at = [&](std::string_view chars) {
      return pos_ < text_.size() && chars.find(text_[pos_]) != std::string_view::npos;
    };
    bool ok = true, is_float = false;
    if (at("-")) ++pos_;
    digits();
    if (at(".")) ++pos_, is_float = true, digits();
    if (at("eE")) {
      ++pos_, is_float = true;
      if (at("+-")) ++pos_;
      ok = digits();
    }
    if (pos_ < text_.size() && (is_ident_char(text_[pos_]) || text_[pos_] == '.')) {
      ok = false;
      while (pos_ < text_.size() && (is_ident_char(text_[pos_]) || text_[pos_] == '.')) ++pos_;
    }
    std::string_view s = text_.substr(t.pos, pos_ - t.pos);
    if (!ok) fail(t.pos, fmt::format("malformed number '{}'", s));
    std::from_chars_result r;
    if (is_float) {
      t.kind = Tok::Float;
      r = std::from_chars(s.data(), s.data() + s.size(), t.float_value);
      if (r.ec == std::errc::result_out_of_range)
        fail(t.pos, fmt::format("number {} is out of the range of a double", s));
    } else {
      t.kind = Tok::Int;
      r = std::from_chars(s.data(), s.data() + s.size(), t.int_value);
      if (r.ec == std::errc::result_out_of_range)
        fail(t.pos, fmt::format("integer {} does not fit in 64 bits", s));
    }
    MT_ASSERT(r.ec == std::errc() && r.ptr == s.data() + s.size(), "number '{}'", s);
  }

  void lex_string(Token& t) {
    char quote = text_[pos_++];
    t.kind = Tok::Str;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n')
        fail(t.pos, "unterminated string literal", fmt::format("close the string with {}", quote));
      char c = text_[pos_++];
      if (c == quote) return;
      if (c != '\\') {
        t.str_value += c;
        continue;
      }
      if (pos_ >= text_.size()) continue;  // reported as unterminated above
      char e = text_[pos_];
      size_t k = std::string_view("\\\"'ntr").find(e);
      if (k == std::string_view::npos)
        fail(pos_ - 1,
             e > 0x20 && e < 0x7f ? fmt::format("unknown escape '\\{}' in a string literal", e)
                                  : std::string("unknown escape in a string literal"),
             "known escapes: \\\\ \\\" \\' \\n \\t \\r");
      t.str_value += "\\\"'\n\t\r"[k];
      ++pos_;
    }
  }

  const Token& peek() {
    if (!peeked_) peeked_ = lex();
    return *peeked_;
  }

  Token next() {
    Token t = peek();
    peeked_.reset();
    last_end_ = t.pos + t.text.size();
    return t;
  }

  bool accept(std::string_view punct) {
    if (!peek().is(punct)) return false;
    next();
    return true;
  }

  // The identifier after `pos` (skipping spaces), read without the lexer, for hints.
  std::string_view identifier_after(size_t pos) const {
    while (pos < text_.size() && is_space(text_[pos])) ++pos;
    size_t start = pos;
    while (pos < text_.size() && is_ident_char(text_[pos])) ++pos;
    return text_.substr(start, pos - start);
  }

  // -- grammar --

  // name := ns '::' op ('.' overload)?, read as raw text up to '(' and checked as a whole.
  void parse_name(FunctionSchema& schema) {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != '(' && !is_space(text_[pos_])) ++pos_;
    std::string_view raw = text_.substr(start, pos_ - start);
    if (raw.empty())
      fail(start, "expected an operator name",
           "a schema starts with its operator name: 'triton_demo::silu(Tensor x) -> Tensor'");
    std::string full(raw);
    if (!default_ns_.empty() && raw.find(':') == std::string_view::npos)
      full = fmt::format("{}::{}", default_ns_, raw);
    OperatorName op;
    std::string problem = name_problem(full, &op);
    if (!problem.empty())
      fail(start, fmt::format("invalid operator name {} ({})", mt::quoted(raw), problem),
           name_help(full));
    if (!default_ns_.empty() && op.ns != default_ns_) {
      std::string bare = op.overload.empty() ? op.name : op.name + "." + op.overload;
      fail(start,
           fmt::format("namespace '{}' does not match the library's namespace '{}'", op.ns,
                       default_ns_),
           fmt::format("inside MT_LIBRARY({0}, m) write '{1}(...)' or '{0}::{1}(...)'", default_ns_,
                       bare));
    }
    schema.ns = std::move(op.ns);
    schema.name = std::move(op.name);
    schema.overload = std::move(op.overload);
  }

  // arguments := '(' (argument | '*') (',' (argument | '*'))* ')', after the '('.
  void parse_arguments(std::vector<Argument>& args) {
    if (accept(")")) return;
    bool kwarg_only = false, seen_default = false;
    while (true) {
      std::string last_name;  // empty after '*'
      if (peek().is("*")) {
        Token star = next();
        if (kwarg_only)
          fail(star.pos, "'*' appears twice",
               "every argument after the first '*' is already keyword-only");
        kwarg_only = true;
        if (peek().is(")"))
          fail(star.pos, "'*' must be followed by at least one keyword-only argument");
      } else {
        size_t name_pos = 0;
        Argument arg = parse_argument(/*is_return=*/false, name_pos);
        arg.kwarg_only = kwarg_only;
        check_unique(args, arg.name, name_pos, "argument");
        if (!kwarg_only && !arg.default_value && seen_default)
          fail(name_pos,
               fmt::format("argument '{}' has no default but follows an argument with a default",
                           arg.name),
               "give it a default, or make it keyword-only by moving it after '*'");
        seen_default = seen_default || arg.default_value.has_value();
        args.push_back(std::move(arg));
        last_name = args.back().name;
      }
      if (accept(")")) return;
      if (!accept(","))
        fail(peek().pos, last_name.empty()
                             ? std::string("expected ',' after '*'")
                             : fmt::format("expected ',' or ')' after argument '{}'", last_name));
    }
  }

  // returns := '(' ')' | '(' return (',' return)* ')' | return
  void parse_returns(std::vector<Argument>& returns) {
    bool parenthesized = accept("(");
    if (parenthesized && accept(")")) return;
    while (true) {
      size_t name_pos = 0;
      Argument ret = parse_argument(/*is_return=*/true, name_pos);
      if (!ret.name.empty()) check_unique(returns, ret.name, name_pos, "return");
      returns.push_back(std::move(ret));
      if (!parenthesized || accept(")")) return;
      if (!accept(",")) fail(peek().pos, "expected ',' or ')' in the returns");
    }
  }

  void check_unique(const std::vector<Argument>& seen, const std::string& name, size_t pos,
                    std::string_view what) const {
    for (const Argument& a : seen)
      if (a.name == name) fail(pos, fmt::format("duplicate {} name '{}'", what, name));
  }

  // argument := type name ('=' default)?; a return's name is optional and it has no default.
  Argument parse_argument(bool is_return, size_t& name_pos) {
    Argument arg;
    arg.type = parse_type(arg.alias, is_return);
    if (peek().kind == Tok::Ident) {
      Token name = next();
      arg.name = std::string(name.text);
      name_pos = name.pos;
    } else if (!is_return) {
      fail(peek().pos,
           fmt::format("expected an argument name after the type '{}'",
                       type_text(arg.type, arg.alias)),
           "every argument has a name, as in 'Tensor x'");
    }
    if (peek().is("=")) {
      if (is_return) fail(peek().pos, "returns cannot have default values");
      next();
      arg.default_value = check_default(parse_literal(), arg);
    }
    return arg;
  }

  // type := kind ('(' set '!'? ')')? ('[' N? ']')? '?'?
  SchemaType parse_type(std::optional<AliasInfo>& alias, bool is_return) {
    Token t = peek();
    if (t.kind != Tok::Ident)
      fail(t.pos, is_return ? "expected a return type" : "expected an argument type");
    next();
    std::optional<TypeKind> kind = lookup_kind(t.text);
    if (!kind) fail_unknown_type(t);
    SchemaType type;
    type.kind = *kind;
    if (peek().is("(")) parse_alias(alias, type, t.text);
    if (accept("[")) {
      type.is_list = true;
      if (peek().kind == Tok::Int) {
        Token n = next();
        if (n.int_value < 1 || n.int_value > kMaxListSize)
          fail(n.pos, fmt::format("list size {} is out of range (1 to {})", n.text, kMaxListSize));
        type.list_size = int(n.int_value);
      }
      if (!accept("]"))
        fail(peek().pos, type.list_size < 0 ? "expected a list size or ']'" : "expected ']'");
    }
    if (accept("?")) type.is_optional = true;
    if (peek().is("?")) fail(peek().pos, "a type takes at most one '?'");
    if (peek().is("[") && type.is_list) fail(peek().pos, "lists of lists are not supported");
    if (peek().is("["))
      fail(peek().pos, "lists of optional values are not supported",
           "for an optional list write 'T[]?'");
    return type;
  }

  [[noreturn]] void fail_unknown_type(const Token& t) const {
    std::string hint = fmt::format("known types: {}", kKnownTypes);
    std::string_view guess = closest_type(t.text);
    std::string_view next_word = identifier_after(t.pos + t.text.size());
    if (!guess.empty())
      hint = fmt::format("did you mean '{}'? ({})", guess, hint);
    else if (lookup_kind(next_word))
      hint = fmt::format("the type comes before the name, as in '{} {}' ({})", next_word, t.text,
                         hint);
    fail(t.pos, fmt::format("unknown type '{}'", t.text), hint);
  }

  // alias := '(' set '!'? ')', after a Tensor type.
  void parse_alias(std::optional<AliasInfo>& alias, const SchemaType& type, std::string_view kind) {
    constexpr std::string_view kHint =
        "write 'Tensor(a)' for a view of set a, or 'Tensor(a!)' for a tensor that is written to";
    Token open = next();
    if (type.kind != TypeKind::Tensor)
      fail(open.pos, fmt::format("alias annotations apply only to Tensor types, not '{}'", kind));
    Token set = peek();
    if (set.kind != Tok::Ident)
      fail(set.pos, "bad alias annotation: expected a set name such as 'a'", kHint);
    next();
    AliasInfo info{std::string(set.text)};
    info.is_write = accept("!");
    if (!accept(")")) fail(peek().pos, "bad alias annotation: expected ')'", kHint);
    alias = std::move(info);
  }

  // literal := None | True | False | int | float | string | '[' (number (',' number)*)? ']'
  Literal parse_literal() {
    Token t = next();
    Literal lit;
    lit.pos = t.pos;
    if (t.kind == Tok::Int) {
      lit.value = t.int_value;
    } else if (t.kind == Tok::Float) {
      lit.value = t.float_value;
    } else if (t.kind == Tok::Str) {
      lit.value = std::move(t.str_value);
    } else if (t.kind == Tok::Ident &&
               (t.text == "None" || t.text == "True" || t.text == "False")) {
      if (t.text != "None") lit.value = t.text == "True";
    } else if (t.is("[")) {
      lit.is_list = true;
      std::vector<int64_t> ints;
      std::vector<double> floats;
      bool any_float = false;
      while (!accept("]")) {
        if (!ints.empty() && !accept(","))
          fail(peek().pos, "expected ',' or ']' in the list default");
        Token e = next();
        if (e.kind != Tok::Int && e.kind != Tok::Float)
          fail(e.pos, "expected a number in the list default");
        any_float = any_float || e.kind == Tok::Float;
        ints.push_back(e.int_value);
        floats.push_back(e.kind == Tok::Float ? e.float_value : double(e.int_value));
      }
      if (any_float)
        lit.value = std::move(floats);
      else
        lit.value = std::move(ints);
    } else {
      fail(t.pos, "expected a default value after '='",
           "a default is None, True, False, a number, a quoted string or a list such as [0, 1]");
    }
    lit.text = text_.substr(lit.pos, last_end_ - lit.pos);
    return lit;
  }

  // A default literal as messages show it: as written, or quoted with escapes when it
  // holds a control character (a newline inside a list literal, say).
  static std::string shown(std::string_view text) {
    const bool plain = std::none_of(text.begin(), text.end(),
                                    [](char c) { return uint8_t(c) < 0x20 || c == 0x7f; });
    return plain ? std::string(text) : mt::quoted(text);
  }

  // Checks a literal against the argument's type and converts it (see DefaultValue).
  DefaultValue check_default(const Literal& lit, const Argument& arg) const {
    const SchemaType& type = arg.type;
    std::string type_name = type.str();
    if (std::holds_alternative<std::monostate>(lit.value)) {
      if (type.is_optional) return lit.value;
      SchemaType optional = type;
      optional.is_optional = true;
      fail(lit.pos,
           fmt::format("default value None needs an optional type, but argument '{}' has type '{}'",
                       arg.name, type_name),
           fmt::format("write '{} {}=None'", type_text(optional, arg.alias), arg.name));
    }
    std::string_view accepted = accepted_defaults(type);
    if (accepted.empty() && !type.is_optional)
      fail(lit.pos,
           fmt::format("argument '{}' of type '{}' cannot have a default value", arg.name,
                       type_name),
           fmt::format("only optional types take a default, and only None: '{}? {}=None'",
                       type_name, arg.name));
    std::optional<DefaultValue> value = convert_literal(lit, type);
    if (!value)
      fail(lit.pos,
           fmt::format("default value {} does not match type '{}' of argument '{}'",
                       shown(lit.text), type_name, arg.name),
           accepted.empty() ? fmt::format("a '{}' argument can only default to None", type_name)
                            : fmt::format("a default for '{}' is {}{}", type_name, accepted,
                                          type.is_optional ? " or None" : ""));
    const auto* ints = std::get_if<std::vector<int64_t>>(&lit.value);
    const auto* floats = std::get_if<std::vector<double>>(&lit.value);
    size_t n = ints ? ints->size() : floats ? floats->size() : 0;
    if (lit.is_list && type.list_size > 0 && n != 0 && n != size_t(type.list_size))
      fail(lit.pos,
           fmt::format("default value {} has {} element{}, but type '{}' of argument '{}' needs {}",
                       shown(lit.text), n, n == 1 ? "" : "s", type_name, arg.name, type.list_size),
           fmt::format("give {} value{}, or [] for none", type.list_size,
                       type.list_size == 1 ? "" : "s"));
    return *value;
  }

  // The literal as a value of `type`, or nullopt when it does not fit (None is handled above).
  static std::optional<DefaultValue> convert_literal(const Literal& lit, const SchemaType& type) {
    const auto* i = std::get_if<int64_t>(&lit.value);
    const auto* ints = std::get_if<std::vector<int64_t>>(&lit.value);
    if (type.is_list) {
      if (type.kind == TypeKind::Int && i && type.list_size > 0)
        return std::vector<int64_t>(size_t(type.list_size), *i);  // int[2] x=1 means [1, 1]
      if (!lit.is_list) return std::nullopt;
      if (type.kind == TypeKind::Int && ints) return lit.value;
      if (type.kind == TypeKind::Float && ints)
        return std::vector<double>(ints->begin(), ints->end());
      if (type.kind == TypeKind::Float) return lit.value;
      return std::nullopt;
    }
    if (lit.is_list) return std::nullopt;
    if (type.kind == TypeKind::Float && i) return double(*i);
    bool fits = (type.kind == TypeKind::Int && i) ||
                (type.kind == TypeKind::Float && std::holds_alternative<double>(lit.value)) ||
                (type.kind == TypeKind::Bool && std::holds_alternative<bool>(lit.value)) ||
                (type.kind == TypeKind::Str && std::holds_alternative<std::string>(lit.value)) ||
                (type.kind == TypeKind::Scalar && !std::holds_alternative<std::string>(lit.value));
    return fits ? std::optional<DefaultValue>(lit.value) : std::nullopt;
  }

  std::string_view text_;
  std::string_view default_ns_;
  size_t pos_ = 0;       // the lexer's position
  size_t last_end_ = 0;  // end of the last token taken with next()
  std::optional<Token> peeked_;
};

}  // namespace

std::string_view type_kind_name(TypeKind kind) {
  constexpr std::string_view kNames[] = {"Tensor", "int",        "float",  "bool",
                                         "str",    "ScalarType", "Device", "Scalar"};
  MT_ASSERT(size_t(kind) < std::size(kNames), "bad TypeKind {}", int(kind));
  return kNames[size_t(kind)];
}

std::string SchemaType::str() const { return type_text(*this, std::nullopt); }

std::string Argument::str() const {
  std::string out = type_text(type, alias);
  if (!name.empty()) out += " " + name;
  if (default_value) out += "=" + format_default(*default_value);
  return out;
}

std::string FunctionSchema::full_name() const {
  std::string out = ns.empty() ? name : ns + "::" + name;
  return overload.empty() ? out : out + "." + overload;
}

std::string FunctionSchema::str() const {
  std::string out = full_name() + "(";
  bool star = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i) out += ", ";
    if (arguments[i].kwarg_only && !star) out += "*, ", star = true;
    out += arguments[i].str();
  }
  out += ") -> ";
  if (returns.size() == 1 && returns[0].name.empty()) return out + returns[0].str();
  out += "(";
  for (size_t i = 0; i < returns.size(); ++i) out += (i ? ", " : "") + returns[i].str();
  return out + ")";
}

bool FunctionSchema::is_mutable() const {
  for (const Argument& a : arguments)
    if (a.alias && a.alias->is_write) return true;
  return false;
}

bool operator==(const FunctionSchema& a, const FunctionSchema& b) {
  return a.ns == b.ns && a.name == b.name && a.overload == b.overload &&
         a.arguments == b.arguments && a.returns == b.returns;
}

FunctionSchema parse_schema(std::string_view text, std::string_view default_ns) {
  return Parser(text, default_ns).parse();
}

void check_operator_name(std::string_view name) { parse_operator_name(name); }

std::string OperatorName::str() const {
  std::string out = ns + "::" + name;
  return overload.empty() ? out : out + "." + overload;
}

OperatorName parse_operator_name(std::string_view name) {
  OperatorName op;
  std::string problem = name_problem(name, &op);
  if (!problem.empty())
    MT_ERROR("[schema] invalid operator name {} ({}); {}", mt::quoted(name), problem,
             name_help(name));
  return op;
}

}  // namespace mt

namespace mt::detail {

size_t edit_distance(std::string_view a, std::string_view b, bool ignore_case) {
  auto lower = [&](char c) {
    return ignore_case && c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
  };
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace mt::detail
