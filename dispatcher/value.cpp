// SPDX-License-Identifier: MIT
#include <fmt/format.h>

#include "dispatcher/kernel_function.h"

namespace mt {

std::string_view Value::type_name() const {
  static constexpr std::string_view names[] = {"None",    "Tensor",     "Tensor[]", "int",
                                               "float",   "bool",       "str",      "int[]",
                                               "float[]", "ScalarType", "Device"};
  return names[v_.index()];
}

void Value::bad_type(const char* want) const {
  MT_ERROR(
      "[boxed] expected a value of type {} on the stack, got {}; the boxed arguments do "
      "not match the operator's schema",
      want, type_name());
}

std::string Value::str() const {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(const Tensor& t) const {
      if (!t.defined()) return "Tensor(undefined)";
      return fmt::format("Tensor{} {} {}{}", t.sizes(), t.dtype(), t.device(),
                         t.is_fake() ? " fake" : "");
    }
    std::string operator()(const std::vector<Tensor>& ts) const {
      std::string s = "[";
      for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + (*this)(ts[i]);
      return s + "]";
    }
    std::string operator()(int64_t i) const { return fmt::format("{}", i); }
    std::string operator()(double d) const { return fmt::format("{}", d); }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(const std::string& s) const { return fmt::format("\"{}\"", s); }
    std::string operator()(const std::vector<int64_t>& l) const {
      return fmt::format("[{}]", fmt::join(l, ", "));
    }
    std::string operator()(const std::vector<double>& l) const {
      return fmt::format("[{}]", fmt::join(l, ", "));
    }
    std::string operator()(DType t) const { return std::string(dtype_name(t)); }
    std::string operator()(Device d) const { return d.str(); }
  };
  return std::visit(Visitor{}, v_);
}

}  // namespace mt
