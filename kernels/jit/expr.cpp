// SPDX-License-Identifier: MIT
#include "kernels/jit/expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>

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
    // The line holding pos, and a caret under it.
    size_t line_start = src_.rfind('\n', pos == 0 ? 0 : pos - 1);
    line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
    if (pos > 0 && pos <= src_.size() && src_[pos - 1] == '\n') line_start = pos;
    size_t line_end = src_.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = src_.size();
    const int line = int(std::count(src_.begin(), src_.begin() + long(line_start), '\n')) + 1;
    const size_t col = std::min(pos, line_end) - line_start;
    MT_ERROR("[jit] pointwise '{}': {} (line {}, column {})\n  {}\n  {}^", name_, what, line,
             col + 1, src_.substr(line_start, line_end - line_start), std::string(col, ' '));
  }

  int add(Node n) {
    p_.nodes.push_back(n);
    return int(p_.nodes.size()) - 1;
  }
  int leaf(Op op, int index) { return add(Node{.op = op, .index = index}); }

  void next() {
    while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) ++pos_;
    // comments
    if (pos_ + 1 < src_.size() && src_[pos_] == '/' && src_[pos_ + 1] == '/') {
      while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
      return next();
    }
    tok_ = Token{};
    tok_.pos = pos_;
    if (pos_ >= src_.size()) return;
    const char c = src_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && pos_ + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])))) {
      const std::string rest(src_.substr(pos_));
      char* end = nullptr;
      tok_.value = std::strtod(rest.c_str(), &end);
      size_t len = size_t(end - rest.c_str());
      if (len < rest.size() && (rest[len] == 'f' || rest[len] == 'F')) ++len;
      if (len < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[len])) || rest[len] == '_'))
        fail(pos_ + len, "malformed number");
      tok_.kind = Token::Number;
      tok_.text = rest.substr(0, len);
      pos_ += len;
      return;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos_;
      while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
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
    fail(pos_, fmt::format("unexpected character '{}'", c));
  }

  bool peek_is_assign() const {
    size_t q = pos_;
    while (q < src_.size() && std::isspace(static_cast<unsigned char>(src_[q]))) ++q;
    return q < src_.size() && src_[q] == '=' && (q + 1 >= src_.size() || src_[q + 1] != '=');
  }
  bool is(std::string_view punct) const { return tok_.kind == Token::Punct && tok_.text == punct; }
  bool accept(std::string_view punct) {
    if (!is(punct)) return false;
    next();
    return true;
  }
  void expect(std::string_view punct) {
    if (!accept(punct))
      fail(tok_.pos, fmt::format("expected '{}'{}", punct, found()));
  }
  void expect_end(std::string_view where) {
    if (tok_.kind != Token::End) fail(tok_.pos, fmt::format("unexpected '{}' {}", tok_.text, where));
  }
  std::string found() const {
    return tok_.kind == Token::End ? " at the end of the body" : fmt::format(", found '{}'", tok_.text);
  }

  void set_single_output(std::vector<int>& assigned, int v, std::string_view what) {
    if (p_.outputs.size() != 1)
      fail(tok_.pos, fmt::format("{} sets the output, but there are {} outputs ({}); assign each "
                                 "one by name",
                                 what, p_.outputs.size(), fmt::join(p_.outputs, ", ")));
    assigned[0] = v;
  }

  int parse_expr() {
    const int c = parse_binary(0);
    if (!accept("?")) return c;
    const int a = parse_expr();
    expect(":");
    const int b = parse_expr();
    return add(Node{.op = Op::Select, .a = c, .b = a, .c = b});
  }

  // Precedence climbing over the binary operators, lowest first.
  int parse_binary(int level) {
    static const std::vector<std::vector<std::pair<std::string_view, Op>>> levels = {
        {{"||", Op::Or}},
        {{"&&", Op::And}},
        {{"==", Op::Eq}, {"!=", Op::Ne}},
        {{"<", Op::Lt}, {"<=", Op::Le}, {">", Op::Gt}, {">=", Op::Ge}},
        {{"+", Op::Add}, {"-", Op::Sub}},
        {{"*", Op::Mul}, {"/", Op::Div}},
    };
    if (level == int(levels.size())) return parse_unary();
    int lhs = parse_binary(level + 1);
    for (;;) {
      bool matched = false;
      for (const auto& [text, op] : levels[size_t(level)]) {
        if (is(text)) {
          next();
          const int rhs = parse_binary(level + 1);
          lhs = add(Node{.op = op, .a = lhs, .b = rhs});
          matched = true;
          break;
        }
      }
      if (!matched) return lhs;
    }
  }

  int parse_unary() {
    if (accept("-")) return add(Node{.op = Op::Neg, .a = parse_unary()});
    if (accept("+")) return parse_unary();
    if (accept("!")) return add(Node{.op = Op::Not, .a = parse_unary()});
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
          fail(t.pos, fmt::format("unknown function '{}'; the functions are {}", t.text, function_list()));
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
    return fmt::format("{} (and their C spellings: expf, fabsf, fmaxf, ...)", fmt::join(names, ", "));
  }

  std::string_view name_, src_;
  Program& p_;
  bool infer_;
  size_t pos_ = 0;
  Token tok_;
  std::map<std::string, int, std::less<>> vars_;
};

void check_names(std::string_view op, const Program& p) {
  std::vector<std::string> all;
  for (const auto* list : {&p.inputs, &p.scalars, &p.outputs})
    for (const auto& n : *list) {
      const bool ok = !n.empty() && (std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_') &&
                      std::all_of(n.begin(), n.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                      });
      MT_CHECK(ok, "[jit] pointwise '{}': '{}' is not a valid name (letters, digits, _)", op, n);
      MT_CHECK(!functions().count(n) && !is_decl(n) && n != "return",
               "[jit] pointwise '{}': '{}' is a function or keyword; pick another name", op, n);
      MT_CHECK(std::find(all.begin(), all.end(), n) == all.end(),
               "[jit] pointwise '{}': the name '{}' is used twice among inputs, scalars and "
               "outputs",
               op, n);
      all.push_back(n);
    }
}

}  // namespace

int fn_arity(Fn f) {
  return f == Fn::Max || f == Fn::Min || f == Fn::Pow ? 2 : 1;
}

const char* fn_name(Fn f) {
  static const char* const kNames[kNumFns] = {
      "exp", "log", "sqrt", "rsqrt", "tanh", "sin", "cos", "abs", "erf", "floor", "ceil",
      "log1p", "expm1", "sigmoid", "max", "min", "pow", "sign", "relu"};
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
  MT_CHECK(!p.outputs.empty(), "[jit] pointwise '{}': needs at least one output", name);
  check_names(name, p);
  Parser parser(name, body, p, infer_inputs);
  parser.run();
  check_names(name, p);  // inferred inputs too
  MT_CHECK(!p.inputs.empty(),
           "[jit] pointwise '{}': the expression reads no input tensor, so there is no shape to "
           "compute over; name at least one input",
           name);
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
      case Op::Const: e = fmt::format("C({:.17g})", n.value); break;
      case Op::Input: e = fmt::format("in[{}]  /* {} */", n.index, p.inputs[size_t(n.index)]); break;
      case Op::Scalar: e = fmt::format("s[{}]  /* {} */", n.index, p.scalars[size_t(n.index)]); break;
      case Op::Neg: e = "-" + v(n.a); break;
      case Op::Not: e = fmt::format("{} == C(0) ? C(1) : C(0)", v(n.a)); break;
      case Op::And: e = fmt::format("({} != C(0) && {} != C(0)) ? C(1) : C(0)", v(n.a), v(n.b)); break;
      case Op::Or: e = fmt::format("({} != C(0) || {} != C(0)) ? C(1) : C(0)", v(n.a), v(n.b)); break;
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Div:
        e = fmt::format("{} {} {}", v(n.a), kBin.at(n.op), v(n.b));
        break;
      case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::Eq: case Op::Ne:
        e = fmt::format("({} {} {}) ? C(1) : C(0)", v(n.a), kBin.at(n.op), v(n.b));
        break;
      case Op::Select: e = fmt::format("{} != C(0) ? {} : {}", v(n.a), v(n.b), v(n.c)); break;
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

namespace {

template <typename C>
C call(Fn f, C x, C y) {
  switch (f) {
    case Fn::Exp: return std::exp(x);
    case Fn::Log: return std::log(x);
    case Fn::Sqrt: return std::sqrt(x);
    case Fn::Rsqrt: return C(1) / std::sqrt(x);
    case Fn::Tanh: return std::tanh(x);
    case Fn::Sin: return std::sin(x);
    case Fn::Cos: return std::cos(x);
    case Fn::Abs: return std::fabs(x);
    case Fn::Erf: return std::erf(x);
    case Fn::Floor: return std::floor(x);
    case Fn::Ceil: return std::ceil(x);
    case Fn::Log1p: return std::log1p(x);
    case Fn::Expm1: return std::expm1(x);
    case Fn::Sigmoid: return C(1) / (C(1) + std::exp(-x));
    case Fn::Max: return std::fmax(x, y);
    case Fn::Min: return std::fmin(x, y);
    case Fn::Pow: return std::pow(x, y);
    case Fn::Sign: return x > C(0) ? C(1) : x < C(0) ? C(-1) : C(x * C(0));
    case Fn::Relu: return x < C(0) ? C(0) : x;
  }
  return x;
}

}  // namespace

template <typename C>
void eval_chunk(const Program& p, const C* const* in, C* const* out, const C* s, int64_t n,
                std::vector<C>& scratch) {
  const size_t nodes = p.nodes.size();
  scratch.resize(nodes * size_t(kChunk));
  std::vector<const C*> val(nodes);
  for (size_t i = 0; i < nodes; ++i) {
    const Node& nd = p.nodes[i];
    C* r = scratch.data() + i * size_t(kChunk);
    val[i] = r;
    const C* a = nd.a >= 0 ? val[size_t(nd.a)] : nullptr;
    const C* b = nd.b >= 0 ? val[size_t(nd.b)] : nullptr;
    const C* c = nd.c >= 0 ? val[size_t(nd.c)] : nullptr;
    auto each = [&](auto f) {
      for (int64_t j = 0; j < n; ++j) r[j] = f(j);
    };
    switch (nd.op) {
      case Op::Const: each([&](int64_t) { return C(nd.value); }); break;
      case Op::Input: val[i] = in[nd.index]; break;
      case Op::Scalar: each([&](int64_t) { return s[nd.index]; }); break;
      case Op::Neg: each([&](int64_t j) { return C(-a[j]); }); break;
      case Op::Not: each([&](int64_t j) { return C(a[j] == C(0)); }); break;
      case Op::Add: each([&](int64_t j) { return C(a[j] + b[j]); }); break;
      case Op::Sub: each([&](int64_t j) { return C(a[j] - b[j]); }); break;
      case Op::Mul: each([&](int64_t j) { return C(a[j] * b[j]); }); break;
      case Op::Div: each([&](int64_t j) { return C(a[j] / b[j]); }); break;
      case Op::Lt: each([&](int64_t j) { return C(a[j] < b[j]); }); break;
      case Op::Le: each([&](int64_t j) { return C(a[j] <= b[j]); }); break;
      case Op::Gt: each([&](int64_t j) { return C(a[j] > b[j]); }); break;
      case Op::Ge: each([&](int64_t j) { return C(a[j] >= b[j]); }); break;
      case Op::Eq: each([&](int64_t j) { return C(a[j] == b[j]); }); break;
      case Op::Ne: each([&](int64_t j) { return C(a[j] != b[j]); }); break;
      case Op::And: each([&](int64_t j) { return C(a[j] != C(0) && b[j] != C(0)); }); break;
      case Op::Or: each([&](int64_t j) { return C(a[j] != C(0) || b[j] != C(0)); }); break;
      case Op::Select: each([&](int64_t j) { return a[j] != C(0) ? b[j] : c[j]; }); break;
      case Op::Call:
        each([&](int64_t j) { return call<C>(nd.fn, a[j], b ? b[j] : C(0)); });
        break;
    }
  }
  for (size_t k = 0; k < p.output_nodes.size(); ++k) {
    const C* r = val[size_t(p.output_nodes[k])];
    std::copy(r, r + n, out[k]);
  }
}

template void eval_chunk<float>(const Program&, const float* const*, float* const*, const float*,
                                int64_t, std::vector<float>&);
template void eval_chunk<double>(const Program&, const double* const*, double* const*,
                                 const double*, int64_t, std::vector<double>&);

}  // namespace mt::jit::expr
