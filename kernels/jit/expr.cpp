// SPDX-License-Identifier: MIT
#include "kernels/jit/expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/vec_exp.h"
#include "runtime/error.h"

namespace mt::jit::expr {

// Note [Pointwise expressions]
// A body is a few statements and a final expression, C-style:
//   body  := { stmt } [ expr [';'] ]
//   stmt  := [decl] NAME '=' expr ';'  |  'return' expr ';'
//   decl  := 'let' | 'auto' | 'float' | 'double' | 'const' decl
//   expr  := or [ '?' expr ':' expr ]      or := and {'||' and}   and := eq {'&&' eq}
//   eq    := rel {('=='|'!=') rel}         rel := add {('<'|'<='|'>'|'>=') add}
//   add   := mul {('+'|'-') mul}           mul := unary {('*'|'/') unary}
//   unary := ('-'|'+'|'!') unary | '(' ('float'|'double') ')' unary | primary
//   primary := NUMBER | NAME | FN '(' expr {',' expr} ')' | '(' expr ')'
// Every value has the compute type C of the launch (float for float32, float16 and
// bfloat16; double for float64): literals such as 1.0f become C(1.0), and each function
// (exp or expf, fabsf or abs, ...) calls the overload for C, so a float64 tensor gets
// double math and not the float functions the spelling names. Comparisons and && || !
// give 1 or 0. Assigning to an output sets it; assigning to a new name makes a temporary;
// a final expression (or return) sets the one output when there is exactly one.
// A NUMBER is decimal (1, 2.5, .5, 1e-3) or hexadecimal (0x10, 0x1.8p1), with an optional
// f or F; one past double's range (1e999, 1e-400) is an error, not infinity or 0. A `//`
// comment runs to the end of its line; it may not hold control bytes other than tab and
// carriage return, nor end in a backslash (which in C would join the next line to it).
// Note [Nesting limit] bounds how deep expressions nest.

// Note [Nesting limit]
// The parser is recursive descent: each parenthesis, call argument, ?: branch, unary
// operator and cast is one more level of C++ recursion (at most four frames: parse_expr,
// parse_binary, parse_unary, parse_primary), and about 2,500 nested parentheses, ten
// frames each then, once overflowed an 8 MiB stack. kMaxNesting levels is far past what
// people write (a 100-arm ?: chain is 100) and keeps the deepest parse to about 0.2 MiB
// of stack at -O2 and 0.9 MiB under ASan at -Og (tests/test_jit_hardening.cpp runs it on
// a 2 MiB stack); past it the body is an error with a caret, and the fix is to split the
// expression into statements. Binary operators do not nest (parse_binary keeps its open
// operators on a stack of its own, so a chain of a million `+ 1` is a loop), and every
// later pass (cuda_body, eval_chunk) walks the node list in order: nothing else recurses
// on the body's shape.

namespace {

struct FnInfo {
  Fn fn;
  int arity;
  const char* name;
};
// Spellings users write, C's float and double names alike.
const std::map<std::string, FnInfo, std::less<>>& functions() {
  static const std::map<std::string, FnInfo, std::less<>> m = [] {
    std::map<std::string, FnInfo, std::less<>> r;
    auto add = [&](Fn f, int arity, const char* name, std::initializer_list<const char*> names) {
      for (const char* n : names) r[n] = {f, arity, name};
    };
    add(Fn::Exp, 1, "exp", {"exp", "expf", "__expf"});
    add(Fn::Log, 1, "log", {"log", "logf", "__logf"});
    add(Fn::Sqrt, 1, "sqrt", {"sqrt", "sqrtf"});
    add(Fn::Rsqrt, 1, "rsqrt", {"rsqrt", "rsqrtf"});
    add(Fn::Tanh, 1, "tanh", {"tanh", "tanhf"});
    add(Fn::Sin, 1, "sin", {"sin", "sinf"});
    add(Fn::Cos, 1, "cos", {"cos", "cosf"});
    add(Fn::Abs, 1, "abs", {"abs", "fabs", "fabsf"});
    add(Fn::Erf, 1, "erf", {"erf", "erff"});
    add(Fn::Floor, 1, "floor", {"floor", "floorf"});
    add(Fn::Ceil, 1, "ceil", {"ceil", "ceilf"});
    add(Fn::Log1p, 1, "log1p", {"log1p", "log1pf"});
    add(Fn::Expm1, 1, "expm1", {"expm1", "expm1f"});
    add(Fn::Sigmoid, 1, "sigmoid", {"sigmoid"});
    add(Fn::Max, 2, "max", {"max", "fmax", "fmaxf"});
    add(Fn::Min, 2, "min", {"min", "fmin", "fminf"});
    add(Fn::Pow, 2, "pow", {"pow", "powf"});
    add(Fn::Sign, 1, "sign", {"sign"});  // 1, -1, 0 (and NaN for NaN)
    add(Fn::Relu, 1, "relu", {"relu"});  // x < 0 ? 0 : x (NaN stays NaN)
    return r;
  }();
  return m;
}

constexpr int kMaxNesting = 256;  // Note [Nesting limit]

// ASCII only, whatever the C locale says about other bytes.
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_hex_digit(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

// The length of the UTF-8 sequence at s[i] if it is a well-formed one for a character
// other than a C1 control (as mt::quoted keeps them), else 0.
size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c >= 0xc2 && c <= 0xdf   ? 2
                   : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4
                                            : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  const auto c1 = static_cast<unsigned char>(s[i + 1]);
  if ((c == 0xc2 && c1 < 0xa0) || (c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) ||
      (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 >= 0x90))
    return 0;
  return n;
}

bool is_identifier(std::string_view n) {
  return !n.empty() && is_ident_start(n[0]) && std::all_of(n.begin(), n.end(), is_ident_char);
}

bool is_decl(std::string_view w) {
  return w == "let" || w == "auto" || w == "float" || w == "double" || w == "const";
}

struct Token {
  enum Kind { End, Number, Name, Punct } kind = End;
  std::string text;
  double value = 0;
  size_t pos = 0;
};

class Parser {
 public:
  Parser(std::string_view name, std::string_view body, Program& p, bool infer)
      : name_(name), src_(body), p_(p), infer_(infer) {
    for (size_t i = 0; i < p_.inputs.size(); ++i) vars_[p_.inputs[i]] = leaf(Op::Input, int(i));
    for (size_t i = 0; i < p_.scalars.size(); ++i) vars_[p_.scalars[i]] = leaf(Op::Scalar, int(i));
    next();
  }

  void run() {
    std::vector<int> assigned(p_.outputs.size(), -1);
    while (tok_.kind != Token::End) {
      // return expr ;
      if (tok_.kind == Token::Name && tok_.text == "return") {
        next();
        set_single_output(assigned, parse_expr(), "return");
        accept(";");
        expect_end("after the return statement");
        break;
      }
      // [decl] NAME = expr ;   (look ahead: NAME followed by '=' but not '==')
      size_t save_pos = pos_;
      Token save = tok_;
      bool decl = false;
      while (tok_.kind == Token::Name && is_decl(tok_.text) && !vars_.count(tok_.text)) {
        decl = true;
        next();
      }
      if (tok_.kind == Token::Name && peek_is_assign()) {
        std::string target = tok_.text;
        size_t target_pos = tok_.pos;
        next();
        next();  // '='
        if (functions().count(target))
          fail(target_pos, fmt::format("'{}' is a function; pick another name", target));
        const int v = parse_expr();
        const auto out = std::find(p_.outputs.begin(), p_.outputs.end(), target);
        if (out != p_.outputs.end()) {
          assigned[size_t(out - p_.outputs.begin())] = v;
        } else {
          auto in = std::find(p_.inputs.begin(), p_.inputs.end(), target);
          if (in != p_.inputs.end() && !decl)
            fail(target_pos, fmt::format("'{}' is an input; inputs are read-only (assign to a "
                                         "new name, or to an output: {})",
                                         target, fmt::join(p_.outputs, ", ")));
          vars_[target] = v;
        }
        if (!accept(";")) expect_end("after an assignment (missing ';'?)");
        continue;
      }
      if (decl) {  // a declaration keyword that does not start an assignment
        pos_ = save_pos, tok_ = save;
      }
      // the final expression
      set_single_output(assigned, parse_expr(), "the final expression");
      accept(";");
      expect_end("after the final expression");
      break;
    }
    for (size_t i = 0; i < assigned.size(); ++i)
      if (assigned[i] < 0)
        fail(src_.size(), fmt::format("output '{}' is never assigned; write `{} = ...;`",
                                      p_.outputs[i], p_.outputs[i]));
    p_.output_nodes = assigned;
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    // The line holding pos as a terminal would show it, and a caret under pos.
    pos = std::min(pos, src_.size());
    size_t line_start = pos == 0 ? std::string_view::npos : src_.rfind('\n', pos - 1);
    line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
    const size_t line_end = std::min(src_.find('\n', pos), src_.size());
    const int line = int(std::count(src_.begin(), src_.begin() + long(line_start), '\n')) + 1;
    const std::string_view text = src_.substr(line_start, line_end - line_start);
    const size_t at = pos - line_start;
    // Columns count characters: a UTF-8 sequence is one, any other byte one.
    auto unit = [&](size_t i) { return std::max<size_t>(1, utf8_length(text, i)); };
    size_t col = 0, width = 0;
    for (size_t i = 0; i < text.size(); i += unit(i)) {
      if (i < at) ++col;
      ++width;
    }
    // A long line is cut to a window around the caret, with "..." where it was cut.
    const size_t first = col > kBefore ? col - kBefore : 0;
    const size_t last = std::min(width, first + kBefore + kAfter);
    std::string shown = first > 0 ? "..." : "";
    size_t k = 0;
    for (size_t i = 0; i < text.size(); i += unit(i), ++k) {
      if (k < first || k >= last) continue;
      const size_t n = utf8_length(text, i);
      if (n > 0)
        shown.append(text.substr(i, n));
      else if (is_control(text[i]))
        shown += ' ';  // tabs, terminal escapes, NUL: one blank keeps the caret aligned
      else
        shown += static_cast<unsigned char>(text[i]) < 0x80 ? text[i] : '?';  // not UTF-8
    }
    if (last < width) shown += "...";
    const size_t caret = col - first + (first > 0 ? 3 : 0);
    MT_ERROR("[jit] pointwise {}: {} (line {}, column {})\n  {}\n  {}^", mt::quoted(name_), what,
             line, col + 1, shown, std::string(caret, ' '));
  }
  static constexpr size_t kBefore = 60, kAfter = 40;  // characters a caret line shows

  int add(Node n) {
    p_.nodes.push_back(n);
    return int(p_.nodes.size()) - 1;
  }
  int leaf(Op op, int index) { return add(Node{.op = op, .index = index}); }

  void next() {
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (src_.substr(pos_, 2) != "//") break;
      skip_comment();
    }
    tok_ = Token{};
    tok_.pos = pos_;
    if (pos_ >= src_.size()) return;
    const char c = src_[pos_];
    if (is_digit(c) || (c == '.' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]))) {
      lex_number();
      return;
    }
    if (is_ident_start(c)) {
      size_t e = pos_;
      while (e < src_.size() && is_ident_char(src_[e])) ++e;
      tok_.kind = Token::Name;
      tok_.text = std::string(src_.substr(pos_, e - pos_));
      pos_ = e;
      return;
    }
    for (std::string_view two : {"<=", ">=", "==", "!=", "&&", "||"}) {
      if (src_.substr(pos_, 2) == two) {
        tok_.kind = Token::Punct;
        tok_.text = std::string(two);
        pos_ += 2;
        return;
      }
    }
    if (std::string_view("+-*/()<>!?:,;=").find(c) != std::string_view::npos) {
      tok_.kind = Token::Punct;
      tok_.text = std::string(1, c);
      ++pos_;
      return;
    }
    const size_t n = utf8_length(src_, pos_);
    fail(pos_, fmt::format("unexpected character {}", mt::quoted(src_.substr(pos_, n ? n : 1))));
  }

  // A `//` comment, up to its newline. The generated CUDA source carries the body as a
  // comment too, so what C would read differently (a backslash joining the next line) or
  // what NVRTC would cut the source at (NUL) is refused here, on every device alike.
  void skip_comment() {
    size_t e = pos_;
    while (e < src_.size() && src_[e] != '\n') {
      if (is_control(src_[e]) && src_[e] != '\t' && src_[e] != '\r')
        fail(e, fmt::format("a comment holds the control byte {}; remove it",
                            mt::quoted(src_.substr(e, 1))));
      ++e;
    }
    size_t back = e;
    while (back > pos_ && is_space(src_[back - 1])) --back;
    if (back > pos_ + 2 && src_[back - 1] == '\\')
      fail(back - 1,
           "a comment ends in a backslash, which in C joins the next line to the "
           "comment; remove the backslash");
    pos_ = e;
  }

  // A number: its extent scanned here (decimal, or hexadecimal after 0x), its value read by
  // from_chars from that extent alone (no copy of the rest of the body: parsing stays
  // linear in the body's length; and no locale).
  void lex_number() {
    const size_t start = pos_, n = src_.size();
    size_t e = start;
    auto run = [&](bool (*pred)(char)) {
      while (e < n && pred(src_[e])) ++e;
    };
    bool (*digit)(char) = is_digit;
    bool hex = false;
    if (src_[e] == '0' && e + 1 < n && (src_[e + 1] == 'x' || src_[e + 1] == 'X')) {
      size_t q = e + 2;
      if (q < n && src_[q] == '.') ++q;
      hex = q < n && is_hex_digit(src_[q]);
      if (hex) e += 2, digit = is_hex_digit;
    }
    const size_t mantissa = e;
    run(digit);
    if (e < n && src_[e] == '.') ++e, run(digit);
    const char exp_mark = hex ? 'p' : 'e';
    if (e < n && (src_[e] == exp_mark || src_[e] == exp_mark - 32)) {
      size_t q = e + 1;
      if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < n && is_digit(src_[q])) e = q, run(is_digit);
    }
    const std::string_view digits = src_.substr(mantissa, e - mantissa);
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), tok_.value,
                                   hex ? std::chars_format::hex : std::chars_format::general);
    if (r.ec == std::errc::result_out_of_range)
      fail(start, fmt::format("the number {} is outside the range of a double (magnitudes "
                              "from about 4.9e-324 to 1.8e308); for infinity write 1.0 / 0.0",
                              mt::quoted(src_.substr(start, e - start))));
    if (r.ec != std::errc() || r.ptr != digits.data() + digits.size())
      fail(start, "malformed number");
    if (e < n && (src_[e] == 'f' || src_[e] == 'F')) ++e;
    if (e < n && is_ident_char(src_[e])) fail(e, "malformed number");
    tok_.kind = Token::Number;
    tok_.text = std::string(src_.substr(start, e - start));
    pos_ = e;
  }

  bool peek_is_assign() const {
    size_t q = pos_;
    while (q < src_.size() && is_space(src_[q])) ++q;
    return q < src_.size() && src_[q] == '=' && (q + 1 >= src_.size() || src_[q + 1] != '=');
  }
  bool is(std::string_view punct) const { return tok_.kind == Token::Punct && tok_.text == punct; }
  bool accept(std::string_view punct) {
    if (!is(punct)) return false;
    next();
    return true;
  }
  void expect(std::string_view punct) {
    if (!accept(punct)) fail(tok_.pos, fmt::format("expected '{}'{}", punct, found()));
  }
  void expect_end(std::string_view where) {
    if (tok_.kind != Token::End)
      fail(tok_.pos, fmt::format("unexpected '{}' {}", tok_.text, where));
  }
  std::string found() const {
    return tok_.kind == Token::End ? " at the end of the body"
                                   : fmt::format(", found '{}'", tok_.text);
  }

  void set_single_output(std::vector<int>& assigned, int v, std::string_view what) {
    if (p_.outputs.size() != 1)
      fail(tok_.pos, fmt::format("{} sets the output, but there are {} outputs ({}); assign each "
                                 "one by name",
                                 what, p_.outputs.size(), fmt::join(p_.outputs, ", ")));
    assigned[0] = v;
  }

  // One level deeper for the expression starting at pos (Note [Nesting limit]).
  class Nest {
   public:
    Nest(Parser& parser, size_t pos) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting)
        parser_.fail(pos, fmt::format("the expression nests more than {} levels deep (each "
                                      "parenthesis, call, ?: branch, unary operator and cast "
                                      "is a level); split it into statements, e.g. `t = ...;`",
                                      kMaxNesting));
    }
    ~Nest() { --parser_.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& parser_;
  };

  int parse_expr() {
    const Nest nest(*this, tok_.pos);
    const int c = parse_binary();
    if (!accept("?")) return c;
    const int a = parse_expr();
    expect(":");
    const int b = parse_expr();
    return add(Node{.op = Op::Select, .a = c, .b = a, .c = b});
  }

  // The binary operators (all left-associative), with an explicit stack of the operands
  // and operators still open: however long the chain, no recursion (Note [Nesting limit]).
  // Levels lowest first; the stack's levels rise strictly, so it holds at most six.
  int parse_binary() {
    struct Binary {
      std::string_view text;
      Op op;
      int level;
    };
    static constexpr Binary kOps[] = {
        {"||", Op::Or, 0}, {"&&", Op::And, 1}, {"==", Op::Eq, 2}, {"!=", Op::Ne, 2},
        {"<", Op::Lt, 3},  {"<=", Op::Le, 3},  {">", Op::Gt, 3},  {">=", Op::Ge, 3},
        {"+", Op::Add, 4}, {"-", Op::Sub, 4},  {"*", Op::Mul, 5}, {"/", Op::Div, 5},
    };
    struct Open {
      int lhs;
      const Binary* op;
    };
    std::array<Open, 6> open;
    size_t n = 0;
    int rhs = parse_unary();
    for (;;) {
      const Binary* b = nullptr;
      if (tok_.kind == Token::Punct)
        for (const Binary& o : kOps)
          if (tok_.text == o.text) b = &o;
      for (; n > 0 && (!b || open[n - 1].op->level >= b->level); --n)
        rhs = add(Node{.op = open[n - 1].op->op, .a = open[n - 1].lhs, .b = rhs});
      if (!b) return rhs;
      open[n++] = {rhs, b};
      next();
      rhs = parse_unary();
    }
  }

  int parse_unary() {
    for (std::string_view op : {"-", "+", "!"}) {
      if (!is(op)) continue;
      const Nest nest(*this, tok_.pos);
      next();
      const int a = parse_unary();
      return op == "+" ? a : add(Node{.op = op == "-" ? Op::Neg : Op::Not, .a = a});
    }
    return parse_primary();
  }

  int parse_primary() {
    const Token t = tok_;
    if (t.kind == Token::Number) {
      next();
      return add(Node{.op = Op::Const, .value = t.value});
    }
    if (is("(")) {
      next();
      // a C cast, (float) x: every value already has the compute type
      if (tok_.kind == Token::Name && (tok_.text == "float" || tok_.text == "double") &&
          !vars_.count(tok_.text)) {
        const Nest nest(*this, t.pos);
        next();
        expect(")");
        return parse_unary();
      }
      const int v = parse_expr();
      expect(")");
      return v;
    }
    if (t.kind == Token::Name) {
      next();
      if (is("(")) {
        const auto it = functions().find(t.text);
        if (it == functions().end())
          fail(t.pos,
               fmt::format("unknown function '{}'; the functions are {}", t.text, function_list()));
        next();
        std::vector<int> args;
        if (!is(")")) {
          args.push_back(parse_expr());
          while (accept(",")) args.push_back(parse_expr());
        }
        expect(")");
        if (int(args.size()) != it->second.arity)
          fail(t.pos, fmt::format("{} takes {} argument{}, got {}", t.text, it->second.arity,
                                  it->second.arity == 1 ? "" : "s", args.size()));
        Node n{.op = Op::Call, .fn = it->second.fn, .a = args[0], .pos = int(t.pos)};
        if (args.size() > 1) n.b = args[1];
        return add(n);
      }
      if (auto v = vars_.find(t.text); v != vars_.end()) return v->second;
      if (functions().count(t.text))
        fail(t.pos, fmt::format("'{}' is a function; call it as {}(...)", t.text, t.text));
      if (infer_) {
        p_.inputs.push_back(t.text);
        return vars_[t.text] = leaf(Op::Input, int(p_.inputs.size()) - 1);
      }
      fail(t.pos, fmt::format("unknown name '{}'; the inputs are [{}], the scalars [{}]", t.text,
                              fmt::join(p_.inputs, ", "), fmt::join(p_.scalars, ", ")));
    }
    fail(t.pos, fmt::format("expected a value{}", found()));
  }

  static std::string function_list() {
    std::vector<std::string> names;
    for (const auto& [n, info] : functions())
      if (n == info.name) names.push_back(n);
    return fmt::format("{} (and their C spellings: expf, fabsf, fmaxf, ...)",
                       fmt::join(names, ", "));
  }

  std::string_view name_, src_;
  Program& p_;
  bool infer_;
  size_t pos_ = 0;
  Token tok_;
  int depth_ = 0;  // Nest levels open
  std::map<std::string, int, std::less<>> vars_;
};

void check_names(std::string_view op, const Program& p) {
  std::vector<std::string> all;
  for (const auto* list : {&p.inputs, &p.scalars, &p.outputs})
    for (const auto& n : *list) {
      MT_CHECK(is_identifier(n),
               "[jit] pointwise {}: {} is not a valid name (letters, digits, _, not starting "
               "with a digit)",
               mt::quoted(op), mt::quoted(n));
      MT_CHECK(!functions().count(n) && !is_decl(n) && n != "return",
               "[jit] pointwise {}: '{}' is a function or keyword; pick another name",
               mt::quoted(op), n);
      MT_CHECK(std::find(all.begin(), all.end(), n) == all.end(),
               "[jit] pointwise {}: the name '{}' is used twice among inputs, scalars and "
               "outputs",
               mt::quoted(op), n);
      all.push_back(n);
    }
}

}  // namespace

int fn_arity(Fn f) { return f == Fn::Max || f == Fn::Min || f == Fn::Pow ? 2 : 1; }

const char* fn_name(Fn f) {
  static const char* const kNames[kNumFns] = {
      "exp",  "log",   "sqrt",  "rsqrt",   "tanh", "sin", "cos", "abs",  "erf", "floor",
      "ceil", "log1p", "expm1", "sigmoid", "max",  "min", "pow", "sign", "relu"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumFns, "one name per Fn");
  return kNames[int(f)];
}

Program parse(std::string_view name, std::string_view body, std::vector<std::string> inputs,
              std::vector<std::string> scalars, std::vector<std::string> outputs,
              bool infer_inputs) {
  Program p;
  p.inputs = std::move(inputs);
  p.scalars = std::move(scalars);
  p.outputs = std::move(outputs);
  p.body = std::string(body);
  MT_CHECK(!p.outputs.empty(), "[jit] pointwise {}: needs at least one output", mt::quoted(name));
  check_names(name, p);
  Parser parser(name, body, p, infer_inputs);
  parser.run();
  check_names(name, p);  // inferred inputs too
  MT_CHECK(!p.inputs.empty(),
           "[jit] pointwise {}: the expression reads no input tensor, so there is no shape to "
           "compute over; name at least one input",
           mt::quoted(name));
  return p;
}

std::string cuda_body(const Program& p) {
  std::string s;
  auto v = [](int i) { return fmt::format("v{}", i); };
  static const std::map<Op, const char*> kBin = {
      {Op::Add, "+"}, {Op::Sub, "-"}, {Op::Mul, "*"}, {Op::Div, "/"}, {Op::Lt, "<"},
      {Op::Le, "<="}, {Op::Gt, ">"},  {Op::Ge, ">="}, {Op::Eq, "=="}, {Op::Ne, "!="},
  };
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& n = p.nodes[i];
    std::string e;
    switch (n.op) {
      case Op::Const:  // a literal is finite (lex_number), but a node made elsewhere may not be
        e = std::isfinite(n.value) ? fmt::format("C({:.17g})", n.value)
            : std::isnan(n.value)  ? "C(__longlong_as_double(0x7ff8000000000000LL))"
            : n.value > 0          ? "C(__longlong_as_double(0x7ff0000000000000LL))"
                                   : "C(-__longlong_as_double(0x7ff0000000000000LL))";
        break;
      case Op::Input:
        e = fmt::format("in[{}]  /* {} */", n.index, p.inputs[size_t(n.index)]);
        break;
      case Op::Scalar:
        e = fmt::format("s[{}]  /* {} */", n.index, p.scalars[size_t(n.index)]);
        break;
      case Op::Neg:
        e = "-" + v(n.a);
        break;
      case Op::Not:
        e = fmt::format("{} == C(0) ? C(1) : C(0)", v(n.a));
        break;
      case Op::And:
        e = fmt::format("({} != C(0) && {} != C(0)) ? C(1) : C(0)", v(n.a), v(n.b));
        break;
      case Op::Or:
        e = fmt::format("({} != C(0) || {} != C(0)) ? C(1) : C(0)", v(n.a), v(n.b));
        break;
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::Div:
        e = fmt::format("{} {} {}", v(n.a), kBin.at(n.op), v(n.b));
        break;
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
      case Op::Eq:
      case Op::Ne:
        e = fmt::format("({} {} {}) ? C(1) : C(0)", v(n.a), kBin.at(n.op), v(n.b));
        break;
      case Op::Select:
        e = fmt::format("{} != C(0) ? {} : {}", v(n.a), v(n.b), v(n.c));
        break;
      case Op::Call:
        e = n.b < 0 ? fmt::format("mt::pw::{}({})", fn_name(n.fn), v(n.a))
                    : fmt::format("mt::pw::{}({}, {})", fn_name(n.fn), v(n.a), v(n.b));
        break;
    }
    s += fmt::format("    const C {} = {};\n", v(int(i)), e);
  }
  for (size_t k = 0; k < p.output_nodes.size(); ++k)
    s += fmt::format("    out[{}] = {};  // {}\n", k, v(p.output_nodes[k]), p.outputs[k]);
  return s;
}

// Note [Tile evaluation]
// On the CPU a program runs tile by tile (kChunk elements): each node is one tight loop
// over the tile, so a chain of ops makes one pass over memory instead of one an op. The
// evaluator works out a schedule once (per thread, as it owns its buffers):
//  - Uniform nodes: constants, scalars, and every node whose operands are all uniform
//    (`-1.0`, `2 * s`, `exp(s)`) get one value, computed once by the same loops on a tile
//    of one element. An arithmetic op, comparison, max, min or pow with a uniform operand
//    reads it as a register (no buffer is filled, no second stream is loaded); ?: reads a
//    uniform branch from a buffer filled once.
//  - Inputs are read in place; a node that only an output reads is computed straight into
//    that output; a node no output needs is not run.
//  - exp(-a), where only the exp reads the negation, is one loop (cpu::exp_neg_f32_loop):
//    the negation's pass, and with it the first read of a tile's input, is folded into
//    the exp's, whose arithmetic hides the wait for memory. Bitwise the same values.
//  - In float, x / (c + exp(-x)) with c uniform (SiLU as users write it), where nothing else
//    reads the add, the exp or the negation, is one loop too
//    (cpu::div_c_plus_exp_neg_f32_loop): the same exp, add and division in registers, each
//    rounded as its own loop rounds it, without the add's and the division's passes over
//    the tile (a NaN stays a NaN; its sign and payload bits are the hardware's).
//  - In float, sigmoid(x * c) and exp(x * c) (either factor uniform), where nothing else
//    reads the product, are one loop too (cpu::sigmoid_mul_c_f32_loop, exp_mul_c_f32_loop):
//    the product rounded to float in a register, without its pass over the tile.
//  - Every other node gets a tile buffer, but buffers are shared: a node's buffer is free
//    again after the last node that reads it (which may write its result into it: every
//    loop is elementwise), so a chain of any length runs in one or two buffers that stay
//    in L1, not one a node (4 KiB each: a chain of 16 ops would fill L1 several times).
// The loops are plain (`omp simd`: the compiler vectorizes them), the function calls
// switch once per tile, not per element, and float exp and sigmoid use the library's
// vector loops (kernels/cpu/vec_exp.h, AVX-512 where the CPU has it). The values are
// bitwise those of running each node's loop on its own: nothing is reordered, contracted
// or rewritten (x / (1 + exp(-x)) is the loop above, not the SiLU loop, whose exp differs).

#define MT_EXPR_SIMD _Pragma("omp simd")

// Where a step reads or writes. Not in an anonymous namespace: TileEvaluator<C>::Plan holds
// them, and a unity build would then warn (-Wsubobject-linkage).
namespace tile_plan {
enum class RefKind : uint8_t { None, Input, Buffer, Uniform, Output };
struct Ref {
  RefKind kind = RefKind::None;
  int index = -1;  // the input, buffer, node (Uniform) or output
};
}  // namespace tile_plan
using tile_plan::Ref;
using tile_plan::RefKind;

template <typename C>
struct TileEvaluator<C>::Plan {
  struct Step {
    Op op;
    Fn fn;
    int mode;  // 1: a is uniform, 2: b is, 3: exp(-a), 4: a / (b + exp(-a)), 5: sigmoid or
               // exp of a * b: Note [Tile evaluation]
    Ref r, a, b, c;
  };
  std::vector<Step> steps;
  std::vector<Ref> outputs;  // where output k's values are, if not written by a step
  std::vector<C> uniform;    // each uniform node's value (by node)
  int buffers = 0;
};

// One node over a tile: the loops of Note [Tile evaluation], compiled once a type for each
// instruction set of Note [ISA clones] (kernels/cpu/loops.h), so that the plain loops are
// as wide as the CPU's vectors (the baseline build is SSE2's four float lanes). SA / SB: a
// or b is one value (a uniform node), read as a register.
#define MT_EXPR_LOOP(expr) MT_EXPR_SIMD for (int64_t j = 0; j < n; ++j) r[j] = (expr);
#define MT_A (SA ? a0 : a[j])
#define MT_B (SB ? b0 : b[j])
template <typename C, bool SA, bool SB>
[[gnu::always_inline]] inline void tile_node(Op op, Fn fn, C* r, const C* a, const C* b, const C* c,
                                             int64_t n) {
  const C a0 = SA ? *a : C(0), b0 = SB ? *b : C(0);
  switch (op) {
    case Op::Const:
    case Op::Scalar:
    case Op::Input:
      break;  // uniform, or read in place
    case Op::Neg:
      MT_EXPR_LOOP(C(-MT_A));
      break;
    case Op::Not:
      MT_EXPR_LOOP(C(MT_A == C(0)));
      break;
    case Op::Add:
      MT_EXPR_LOOP(C(MT_A + MT_B));
      break;
    case Op::Sub:
      MT_EXPR_LOOP(C(MT_A - MT_B));
      break;
    case Op::Mul:
      MT_EXPR_LOOP(C(MT_A * MT_B));
      break;
    case Op::Div:
      MT_EXPR_LOOP(C(MT_A / MT_B));
      break;
    case Op::Lt:
      MT_EXPR_LOOP(C(MT_A < MT_B));
      break;
    case Op::Le:
      MT_EXPR_LOOP(C(MT_A <= MT_B));
      break;
    case Op::Gt:
      MT_EXPR_LOOP(C(MT_A > MT_B));
      break;
    case Op::Ge:
      MT_EXPR_LOOP(C(MT_A >= MT_B));
      break;
    case Op::Eq:
      MT_EXPR_LOOP(C(MT_A == MT_B));
      break;
    case Op::Ne:
      MT_EXPR_LOOP(C(MT_A != MT_B));
      break;
    case Op::And:
      MT_EXPR_LOOP(C(MT_A != C(0) && MT_B != C(0)));
      break;
    case Op::Or:
      MT_EXPR_LOOP(C(MT_A != C(0) || MT_B != C(0)));
      break;
    case Op::Select:
      MT_EXPR_LOOP(MT_A != C(0) ? MT_B : c[j]);
      break;
    case Op::Call:
      switch (fn) {
        case Fn::Exp:
          if constexpr (std::is_same_v<C, float> && !SA)
            cpu::exp_f32_loop(r, a, n);
          else
            for (int64_t j = 0; j < n; ++j) r[j] = std::exp(MT_A);
          break;
        case Fn::Sigmoid:
          if constexpr (std::is_same_v<C, float> && !SA)
            cpu::sigmoid_f32_loop(r, a, n);
          else
            for (int64_t j = 0; j < n; ++j) r[j] = C(1) / (C(1) + std::exp(-MT_A));
          break;
        case Fn::Log:
          for (int64_t j = 0; j < n; ++j) r[j] = std::log(MT_A);
          break;
        case Fn::Sqrt:
          MT_EXPR_LOOP(std::sqrt(MT_A));
          break;
        case Fn::Rsqrt:
          MT_EXPR_LOOP(C(1) / std::sqrt(MT_A));
          break;
        case Fn::Tanh:
          for (int64_t j = 0; j < n; ++j) r[j] = std::tanh(MT_A);
          break;
        case Fn::Sin:
          for (int64_t j = 0; j < n; ++j) r[j] = std::sin(MT_A);
          break;
        case Fn::Cos:
          for (int64_t j = 0; j < n; ++j) r[j] = std::cos(MT_A);
          break;
        case Fn::Abs:
          MT_EXPR_LOOP(std::fabs(MT_A));
          break;
        case Fn::Erf:
          for (int64_t j = 0; j < n; ++j) r[j] = std::erf(MT_A);
          break;
        case Fn::Floor:
          MT_EXPR_LOOP(std::floor(MT_A));
          break;
        case Fn::Ceil:
          MT_EXPR_LOOP(std::ceil(MT_A));
          break;
        case Fn::Log1p:
          for (int64_t j = 0; j < n; ++j) r[j] = std::log1p(MT_A);
          break;
        case Fn::Expm1:
          for (int64_t j = 0; j < n; ++j) r[j] = std::expm1(MT_A);
          break;
        case Fn::Max:
          MT_EXPR_LOOP(std::fmax(MT_A, MT_B));
          break;
        case Fn::Min:
          MT_EXPR_LOOP(std::fmin(MT_A, MT_B));
          break;
        case Fn::Pow:
          for (int64_t j = 0; j < n; ++j) r[j] = std::pow(MT_A, MT_B);
          break;
        case Fn::Sign:
          MT_EXPR_LOOP(MT_A > C(0) ? C(1) : MT_A < C(0) ? C(-1) : C(MT_A * C(0)));
          break;
        case Fn::Relu:
          MT_EXPR_LOOP(MT_A < C(0) ? C(0) : MT_A);
          break;
      }
      break;
  }
}
#undef MT_A
#undef MT_B
#undef MT_EXPR_LOOP

// exp(-a), the negation folded in (mode 3): bitwise what the two nodes give.
template <typename C>
[[gnu::always_inline]] inline void tile_exp_neg(C* r, const C* a, int64_t n) {
  if constexpr (std::is_same_v<C, float>)
    cpu::exp_neg_f32_loop(r, a, n);
  else
    for (int64_t j = 0; j < n; ++j) r[j] = std::exp(C(-a[j]));
}

#define MT_TILE_NODE_MODES(C)                                   \
  switch (mode) {                                               \
    case 0:                                                     \
      return tile_node<C, false, false>(op, fn, r, a, b, c, n); \
    case 1:                                                     \
      return tile_node<C, true, false>(op, fn, r, a, b, c, n);  \
    case 2:                                                     \
      return tile_node<C, false, true>(op, fn, r, a, b, c, n);  \
    default:                                                    \
      return tile_exp_neg<C>(r, a, n);                          \
  }
MT_ISA_CLONES void tile_node_f32(Op op, Fn fn, int mode, float* r, const float* a, const float* b,
                                 const float* c, int64_t n){MT_TILE_NODE_MODES(float)} MT_ISA_CLONES
    void tile_node_f64(Op op, Fn fn, int mode, double* r, const double* a, const double* b,
                       const double* c, int64_t n) {
  MT_TILE_NODE_MODES(double)
}
#undef MT_TILE_NODE_MODES

template <typename C>
void run_node(Op op, Fn fn, int mode, C* r, const C* a, const C* b, const C* c, int64_t n) {
  if constexpr (std::is_same_v<C, float>)
    tile_node_f32(op, fn, mode, r, a, b, c, n);
  else
    tile_node_f64(op, fn, mode, r, a, b, c, n);
}

template <typename C>
TileEvaluator<C>::TileEvaluator(const Program& p, const C* s) {
  auto plan = std::make_shared<Plan>();
  const size_t nodes = p.nodes.size();
  const auto end = int(nodes);  // "read at the end": outputs that a step does not write
  // Uniform nodes and their values, in node order (operands come first).
  std::vector<char> uniform(nodes, 0);
  plan->uniform.assign(nodes, C(0));
  std::vector<C>& u = plan->uniform;
  for (size_t i = 0; i < nodes; ++i) {
    const Node& nd = p.nodes[i];
    if (nd.op == Op::Input) continue;
    if (nd.op == Op::Const || nd.op == Op::Scalar) {
      u[i] = nd.op == Op::Const ? C(nd.value) : s[nd.index];
      uniform[i] = 1;
      continue;
    }
    bool all = true;
    for (int k : {nd.a, nd.b, nd.c}) all = all && (k < 0 || uniform[size_t(k)]);
    if (!all) continue;
    auto at = [&](int k) { return k >= 0 ? &u[size_t(k)] : nullptr; };
    run_node<C>(nd.op, nd.fn, 0, &u[i], at(nd.a), at(nd.b), at(nd.c), 1);
    uniform[i] = 1;
  }
  // The nodes an output needs (others are never run), and where each is last read: by a
  // later node, or at the end (an output not written straight by its step).
  std::vector<char> live(nodes, 0);
  for (int o : p.output_nodes) live[size_t(o)] = 1;
  for (size_t i = nodes; i-- > 0;)
    if (live[i])
      for (int k : {p.nodes[i].a, p.nodes[i].b, p.nodes[i].c})
        if (k >= 0) live[size_t(k)] = 1;
  std::vector<int> uses(nodes, 0);
  for (size_t i = 0; i < nodes; ++i)
    if (live[i])
      for (int k : {p.nodes[i].a, p.nodes[i].b, p.nodes[i].c})
        if (k >= 0) ++uses[size_t(k)];
  // exp(-a): a negation that only an exp reads (and no output) is not run; the exp reads a.
  std::vector<char> folded(nodes, 0);
  for (size_t i = 0; i < nodes; ++i) {
    const Node& nd = p.nodes[i];
    if (!live[i] || uniform[i] || nd.op != Op::Call || nd.fn != Fn::Exp) continue;
    const auto k = size_t(nd.a);
    if (p.nodes[k].op == Op::Neg && !uniform[k] && uses[k] == 1 &&
        std::find(p.output_nodes.begin(), p.output_nodes.end(), int(k)) == p.output_nodes.end())
      folded[k] = 1;
  }
  // x / (c + exp(-x)) in float, c uniform, the add, exp and negation read by nothing else:
  // one loop (mode 4, cpu::div_c_plus_exp_neg_f32_loop), its operands x and c.
  std::vector<int> div_c(nodes, -1);
  auto single = [&](int k) {
    return !uniform[size_t(k)] && uses[size_t(k)] == 1 &&
           std::find(p.output_nodes.begin(), p.output_nodes.end(), k) == p.output_nodes.end();
  };
  for (size_t i = 0; i < nodes && std::is_same_v<C, float>; ++i) {
    const Node& nd = p.nodes[i];
    if (!live[i] || uniform[i] || nd.op != Op::Div) continue;
    const Node& add = p.nodes[size_t(nd.b)];
    if (add.op != Op::Add || !single(nd.b) || !uniform[size_t(add.a)]) continue;
    const Node& ex = p.nodes[size_t(add.b)];
    if (ex.op != Op::Call || ex.fn != Fn::Exp || !single(add.b)) continue;
    const Node& neg = p.nodes[size_t(ex.a)];
    if (neg.op != Op::Neg || !single(ex.a) || neg.a != nd.a) continue;
    div_c[i] = add.a;
    folded[size_t(nd.b)] = folded[size_t(add.b)] = folded[size_t(ex.a)] = 1;
  }
  // What a folded node's consumer reads in its place: its first operand (a negation's, the
  // exp of x / (c + exp(-x))), or the product's other factor (below).
  std::vector<int> fold_src(nodes, -1);
  for (size_t i = 0; i < nodes; ++i) fold_src[i] = p.nodes[i].a;
  // sigmoid(x * c) and exp(x * c) in float, c uniform, the product read by nothing else: one
  // loop (mode 5, cpu::sigmoid_mul_c_f32_loop / exp_mul_c_f32_loop), its operands x and c.
  std::vector<int> scale_c(nodes, -1);
  for (size_t i = 0; i < nodes && std::is_same_v<C, float>; ++i) {
    const Node& nd = p.nodes[i];
    if (!live[i] || uniform[i] || nd.op != Op::Call || (nd.fn != Fn::Sigmoid && nd.fn != Fn::Exp))
      continue;
    const Node& mul = p.nodes[size_t(nd.a)];
    if (mul.op != Op::Mul || !single(nd.a) || folded[size_t(nd.a)]) continue;
    const bool ca = uniform[size_t(mul.a)] != 0, cb = uniform[size_t(mul.b)] != 0;
    if (ca == cb) continue;  // both uniform: the product is uniform (never here); neither
    scale_c[i] = ca ? mul.a : mul.b;
    fold_src[size_t(nd.a)] = ca ? mul.b : mul.a;
    folded[size_t(nd.a)] = 1;
  }
  auto operand = [&](int k) { return k >= 0 && folded[size_t(k)] ? fold_src[size_t(k)] : k; };
  std::vector<int> last(nodes, -1);
  for (size_t i = 0; i < nodes; ++i)
    if (live[i] && !folded[i])
      for (int k : {p.nodes[i].a, p.nodes[i].b, p.nodes[i].c})
        if (k >= 0) last[size_t(operand(k))] = int(i);
  std::vector<int> out_of(nodes, -1);
  for (size_t k = 0; k < p.output_nodes.size(); ++k) {
    const int o = p.output_nodes[k];
    // straight into the output when nothing else reads the node and no other output is it
    if (p.nodes[size_t(o)].op != Op::Input && !uniform[size_t(o)] && uses[size_t(o)] == 0 &&
        std::count(p.output_nodes.begin(), p.output_nodes.end(), o) == 1)
      out_of[size_t(o)] = int(k);
    else
      last[size_t(o)] = end;
  }
  // Buffers: taken by a node's step, given back after its last reader's step has taken its
  // own (a step may write over an operand it reads last), most recently freed first.
  std::vector<Ref> where(nodes);
  std::vector<int> free_buffers;
  std::vector<int> broadcast;  // (?: reads a uniform branch from a buffer) node, buffer pairs
  auto take = [&] {
    if (free_buffers.empty()) return plan->buffers++;
    const int b = free_buffers.back();
    free_buffers.pop_back();
    return b;
  };
  for (size_t i = 0; i < nodes; ++i) {
    const Node& nd = p.nodes[i];
    if (nd.op == Op::Input) {
      where[i] = {RefKind::Input, nd.index};
      continue;
    }
    if (uniform[i]) {
      where[i] = {RefKind::Uniform, int(i)};
      continue;
    }
    if (!live[i] || folded[i]) continue;
    typename Plan::Step st{.op = nd.op, .fn = nd.fn, .mode = 0, .r = {}, .a = {}, .b = {}, .c = {}};
    Ref* ops[3] = {&st.a, &st.b, &st.c};
    const int idx[3] = {operand(nd.a),
                        div_c[i] >= 0     ? div_c[i]
                        : scale_c[i] >= 0 ? scale_c[i]
                                          : nd.b,
                        nd.c};
    if (idx[0] != nd.a) st.mode = 3;
    for (int o = 0; o < 3; ++o) {
      if (idx[o] < 0) continue;
      *ops[o] = where[size_t(idx[o])];
      if (ops[o]->kind != RefKind::Uniform) continue;
      if (nd.op == Op::Select) {  // a buffer of its own, filled once with the value
        const int b = plan->buffers++;
        broadcast.push_back(idx[o]), broadcast.push_back(b);
        *ops[o] = {RefKind::Buffer, b};
      } else {
        st.mode = o == 0 ? 1 : 2;  // one at most: a node of two uniform operands is uniform
      }
    }
    if (div_c[i] >= 0) st.mode = 4;    // b: c, a uniform
    if (scale_c[i] >= 0) st.mode = 5;  // b: c, a uniform
    // operands read for the last time here give their buffers back first
    for (int o = 0; o < 3; ++o)
      if (idx[o] >= 0 && where[size_t(idx[o])].kind == RefKind::Buffer &&
          last[size_t(idx[o])] == int(i) &&
          std::find(idx, idx + o, idx[o]) == idx + o)  // once for a == b
        free_buffers.push_back(where[size_t(idx[o])].index);
    st.r = out_of[i] >= 0 ? Ref{RefKind::Output, out_of[i]} : Ref{RefKind::Buffer, take()};
    where[i] = st.r;
    plan->steps.push_back(st);
  }
  for (size_t k = 0; k < p.output_nodes.size(); ++k) {
    const Ref w = where[size_t(p.output_nodes[k])];
    plan->outputs.push_back(w.kind == RefKind::Output ? Ref{} : w);
  }
  buf_.resize(size_t(plan->buffers) * size_t(kChunk));
  for (size_t k = 0; k < broadcast.size(); k += 2) {
    C* r = buf_.data() + size_t(broadcast[k + 1]) * size_t(kChunk);
    std::fill(r, r + kChunk, u[size_t(broadcast[k])]);
  }
  plan_ = std::move(plan);
}

template <typename C>
int TileEvaluator<C>::num_buffers() const {
  return plan_->buffers;
}

template <typename C>
void TileEvaluator<C>::run(const C* const* in, C* const* out, int64_t n) {
  MT_ASSERT(n >= 0 && n <= kChunk, "[jit] a tile of {} elements; at most {}", n, kChunk);
  const Plan& plan = *plan_;
  C* const buf = buf_.data();
  auto ptr = [&](const Ref& r) -> C* {
    switch (r.kind) {
      case RefKind::Input:
        return const_cast<C*>(in[r.index]);
      case RefKind::Buffer:
        return buf + size_t(r.index) * size_t(kChunk);
      case RefKind::Uniform:
        return const_cast<C*>(&plan.uniform[size_t(r.index)]);
      case RefKind::Output:
        return out[r.index];
      case RefKind::None:
        break;
    }
    return nullptr;
  };
  for (const auto& st : plan.steps) {
    if constexpr (std::is_same_v<C, float>) {
      if (st.mode == 4) {
        cpu::div_c_plus_exp_neg_f32_loop(ptr(st.r), ptr(st.a), *ptr(st.b), n);
        continue;
      }
      if (st.mode == 5) {
        if (st.fn == Fn::Sigmoid)
          cpu::sigmoid_mul_c_f32_loop(ptr(st.r), ptr(st.a), *ptr(st.b), n);
        else
          cpu::exp_mul_c_f32_loop(ptr(st.r), ptr(st.a), *ptr(st.b), n);
        continue;
      }
    }
    run_node<C>(st.op, st.fn, st.mode, ptr(st.r), ptr(st.a), ptr(st.b), ptr(st.c), n);
  }
  for (size_t k = 0; k < plan.outputs.size(); ++k) {
    const Ref& w = plan.outputs[k];
    if (w.kind == RefKind::Uniform) {
      std::fill(out[k], out[k] + n, plan.uniform[size_t(w.index)]);
    } else if (w.kind != RefKind::None) {
      const C* r = ptr(w);
      if (r != out[k]) std::copy(r, r + n, out[k]);
    }
  }
}

template <typename C>
void eval_chunk(const Program& p, const C* const* in, C* const* out, const C* s, int64_t n,
                std::vector<C>&) {
  TileEvaluator<C> ev(p, s);
  ev.run(in, out, n);
}

template class TileEvaluator<float>;
template class TileEvaluator<double>;
template void eval_chunk<float>(const Program&, const float* const*, float* const*, const float*,
                                int64_t, std::vector<float>&);
template void eval_chunk<double>(const Program&, const double* const*, double* const*,
                                 const double*, int64_t, std::vector<double>&);

}  // namespace mt::jit::expr
