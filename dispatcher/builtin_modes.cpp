// SPDX-License-Identifier: MIT
#include <fmt/ranges.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "dispatcher/mode.h"

namespace mt {
namespace {

struct Formulas {
  std::shared_mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<FlopFormula>> map;
};

int64_t numel_of(const Value& v) {
  if (v.is_tensor() && v.to_tensor().defined()) return v.to_tensor().numel();
  int64_t n = 0;
  if (v.is_tensor_list())
    for (const Tensor& t : v.to_tensor_list()) n += t.defined() ? t.numel() : 0;
  return n;
}

int64_t results_numel(const Stack&, const Stack& out) {
  int64_t n = 0;
  for (const Value& v : out) n += numel_of(v);
  return n;
}

// a [.., m, k] @ b [.., k, n] -> [.., m, n]: each output element is k multiplies and k adds.
int64_t matmul_flops(const Stack& args, const Stack& out) {
  const Tensor& a = args.at(0).to_tensor();
  return 2 * out.at(0).to_tensor().numel() * a.sizes()[a.sizes().size() - 1];
}

Formulas& formulas() {
  static Formulas* f = [] {
    auto* f = new Formulas();  // never destroyed: formulas are for the process
    f->map["mt::matmul"] = std::make_shared<FlopFormula>(matmul_flops);
    // Elementwise ops (one FLOP per output element) and reductions (one per input element).
    for (const char* op :
         {"mt::add",        "mt::sub",        "mt::mul",           "mt::div",
          "mt::add.Scalar", "mt::sub.Scalar", "mt::mul.Scalar",    "mt::div.Scalar",
          "mt::neg",        "mt::exp",        "mt::log",           "mt::sqrt",
          "mt::sigmoid",    "mt::tanh",       "mt::relu",          "mt::gelu",
          "mt::pow",        "mt::silu",       "mt::silu_backward", "mt::add_",
          "mt::sub_",       "mt::mul_",       "mt::foreach_add_"})
      f->map[op] = std::make_shared<FlopFormula>(results_numel);
    for (const char* op : {"mt::sum", "mt::mean"})
      f->map[op] = std::make_shared<FlopFormula>(
          [](const Stack& args, const Stack&) { return numel_of(args.at(0)); });
    return f;
  }();
  return *f;
}

std::shared_ptr<FlopFormula> find_formula(const std::string& op) {
  Formulas& f = formulas();
  std::shared_lock lock(f.mutex);
  auto it = f.map.find(op);
  return it == f.map.end() ? nullptr : it->second;
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0 && s[i - 1] != '-') out += ',';
    out += s[i];
  }
  return out;
}

// What a mode sees of a result: a stack entry's tensors after the call. The arguments are
// those below the results when the op has any (a mode's stack holds just its arguments).
Stack results_of(const OperatorHandle& op, const Stack& stack) {
  const size_t n = std::min(stack.size(), op.schema().returns.size());
  return Stack(stack.end() - std::ptrdiff_t(n), stack.end());
}

}  // namespace

void register_flop_formula(std::string_view op, FlopFormula formula) {
  MT_CHECK(formula != nullptr,
           "[register_flop_formula] the formula for {} is an empty function; "
           "pass a callable",
           mt::quoted(op));
  const std::string name = dispatcher().find_or_throw(op).name().str();
  Formulas& f = formulas();
  std::unique_lock lock(f.mutex);
  f.map[name] = std::make_shared<FlopFormula>(std::move(formula));
}

// ---- FlopCounterMode ------------------------------------------------------------------------

void FlopCounterMode::dispatch(const OperatorHandle& op, Stack& stack) {
  const Stack args = stack;
  redispatch(op, stack);
  const std::string name = op.name().str();
  std::shared_ptr<FlopFormula> formula = find_formula(name);
  if (!formula) {
    ++uncounted_[name];
    return;
  }
  const int64_t flops = (*formula)(args, results_of(op, stack));
  for (const std::string& s : scopes_) counts_[s][name] += flops;
}

FlopCounterMode::Scope::Scope(FlopCounterMode& mode, std::string name) : mode_(mode) {
  MT_CHECK(!name.empty() && name != "Global",
           "[FlopCounterMode] a scope needs a name of its own (not empty, not 'Global')");
  if (std::find(mode.scope_order_.begin(), mode.scope_order_.end(), name) ==
      mode.scope_order_.end())
    mode.scope_order_.push_back(name);
  mode.scopes_.push_back(std::move(name));
}
FlopCounterMode::Scope::~Scope() { mode_.scopes_.pop_back(); }

int64_t FlopCounterMode::total() const {
  int64_t t = 0;
  for (const auto& [_, n] : by_op()) t += n;
  return t;
}

std::map<std::string, int64_t> FlopCounterMode::by_op(const std::string& scope) const {
  auto it = counts_.find(scope);
  return it == counts_.end() ? std::map<std::string, int64_t>() : it->second;
}

std::string FlopCounterMode::table() const {
  std::string out = fmt::format("{:<24} {:<22} {:>16}\n", "scope", "op", "FLOPs");
  for (const std::string& s : scope_order_) {
    auto it = counts_.find(s);
    if (it == counts_.end()) continue;
    int64_t sum = 0;
    for (const auto& [_, n] : it->second) sum += n;
    out += fmt::format("{:<24} {:<22} {:>16}\n", s, "(total)", with_commas(sum));
    for (const auto& [op, n] : it->second)
      out += fmt::format("{:<24} {:<22} {:>16}\n", "", op, with_commas(n));
  }
  if (!uncounted_.empty()) {
    std::vector<std::string> parts;
    for (const auto& [op, n] : uncounted_) parts.push_back(fmt::format("{} ({}x)", op, n));
    out += fmt::format("no formula (0 FLOPs): {}\n", fmt::join(parts, ", "));
  }
  return out;
}

void FlopCounterMode::reset() {
  counts_.clear();
  uncounted_.clear();
  scope_order_ = {"Global"};
}

// ---- DebugMode ------------------------------------------------------------------------------

std::string content_hash(const Tensor& t) {
  if (!t.defined()) return "undefined";
  if (t.is_fake()) return "fake";
  Tensor h = t;
  if (!t.device().is_cpu()) {
    ExcludeDispatchKeyGuard no_grad(DispatchKey::Autograd);
    h = call<Tensor>("mt::to.device", t, kCPU);
  }
  uint64_t hash = 1469598103934665603ull;
  const size_t es = h.element_size();
  const auto* base = static_cast<const unsigned char*>(h.data_ptr());
  const size_t nd = h.sizes().size();
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < h.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * h.strides()[d];
    const unsigned char* p = base + off * int64_t(es);
    for (size_t b = 0; b < es; ++b) hash = (hash ^ p[b]) * 1099511628211ull;
    for (size_t d = nd; d-- > 0;) {  // the next index, last dim fastest
      if (++idx[d] < h.sizes()[d]) break;
      idx[d] = 0;
    }
  }
  return fmt::format("{:016x}", hash);
}

namespace {
std::string brief(const Value& v) {
  auto tensor = [](const Tensor& t) {
    if (!t.defined()) return std::string("undefined");
    return fmt::format("{}{} {} #{}", t.dtype(), t.sizes(), t.device().str(), content_hash(t));
  };
  if (v.is_tensor()) return tensor(v.to_tensor());
  if (v.is_tensor_list()) {
    std::vector<std::string> parts;
    for (const Tensor& t : v.to_tensor_list()) parts.push_back(tensor(t));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
  return v.str();
}
}  // namespace

void DebugMode::dispatch(const OperatorHandle& op, Stack& stack) {
  const FunctionSchema& s = op.schema();
  std::vector<std::string> args;
  for (size_t i = 0; i < stack.size() && i < s.arguments.size(); ++i)
    args.push_back(fmt::format("{}={}", s.arguments[i].name, brief(stack[i])));
  redispatch(op, stack);
  std::vector<std::string> outs;
  for (const Value& v : results_of(op, stack)) outs.push_back(brief(v));
  std::string line =
      fmt::format("{}({}) -> {}", op.name().str(), fmt::join(args, ", "),
                  outs.size() == 1 ? outs[0] : fmt::format("({})", fmt::join(outs, ", ")));
  if (print_) Dispatcher::singleton().log(line);
  lines_.push_back(std::move(line));
}

std::string DebugMode::str() const {
  std::string out;
  for (const std::string& l : lines_) out += l + "\n";
  return out;
}

}  // namespace mt
