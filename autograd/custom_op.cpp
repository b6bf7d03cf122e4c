// SPDX-License-Identifier: MIT
#include "autograd/custom_op.h"

#include <algorithm>

namespace mt::detail {

FunctionSchema custom_op_schema(std::string_view name, FunctionSchema inferred,
                                const CustomOpOptions& opts) {
  FunctionSchema s = inferred;
  if (!opts.schema.empty()) {
    s = parse_schema(std::string(name) + opts.schema);
    InferredSignature sig;
    for (auto& a : inferred.arguments) sig.args.push_back(a.type);
    for (auto& r : inferred.returns) sig.returns.push_back(r.type);
    MT_CHECK(sig.matches(s),
             "[custom_op] the schema {} given for '{}' does not match the C++ signature of the "
             "function, {}; change one of them",
             s.str(), name, sig.str());
  }
  int set = 0;
  for (const std::string& m : opts.mutates_args) {
    auto it = std::find_if(s.arguments.begin(), s.arguments.end(),
                           [&](const Argument& a) { return a.name == m; });
    MT_CHECK(it != s.arguments.end(),
             "[custom_op] mutates_args names '{}', which is not an argument of {}; the "
             "arguments are named as in the schema (_0, _1, ... when it is inferred)",
             m, s.str());
    MT_CHECK(it->type.kind == TypeKind::Tensor,
             "[custom_op] mutates_args names '{}', but only Tensor arguments can be mutated", m);
    if (!it->alias) it->alias = AliasInfo{fmt::format("a{}", set++), true};
    it->alias->is_write = true;
  }
  return s;
}

PostCall::PostCall(FunctionSchema s) : schema(std::move(s)) {
  for (size_t i = 0; i < schema.arguments.size() && i < 64; ++i) {
    const Argument& a = schema.arguments[i];
    if (a.type.kind == TypeKind::Tensor && a.alias && a.alias->is_write)
      mutated_args |= uint64_t(1) << i;
  }
  for (size_t o = 0; o < schema.returns.size() && o < 64; ++o)
    if (schema.returns[o].alias) annotated_returns |= uint64_t(1) << o;
}

void PostCall::alias_error(size_t i, size_t o) const {
  MT_ERROR(
      "[custom_op] '{}' returned a tensor that shares memory with its input {} (output {}), "
      "but the schema {} declares no alias. Return a fresh tensor (for example x.clone()), "
      "or declare the alias with Tensor(a) in an explicit schema",
      schema.full_name(), i, o, schema.str());
}

std::shared_ptr<Library> by_name_library(std::string_view op, std::source_location loc) {
  (void)dispatcher().find_or_throw(
      op);  // a clear error when there is no such op (or it was dropped)
  return std::make_shared<Library>(Library::Kind::Fragment, parse_operator_name(op).ns,
                                   std::nullopt, loc);
}

}  // namespace mt::detail
