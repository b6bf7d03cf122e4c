// SPDX-License-Identifier: MIT
// Value and Stack: the boxed calling convention. A boxed kernel or fallback sees
// its arguments as Values on a Stack, pops them, and pushes its results.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/tensor.h"

namespace mt {

class Value {
 public:
  using Storage =
      std::variant<std::monostate, Tensor, std::vector<Tensor>, int64_t, double, bool, std::string,
                   std::vector<int64_t>, std::vector<double>, DType, Device>;

  Value() = default;                     // None
  Value(std::nullopt_t) {}               // NOLINT
  Value(Tensor t) : v_(std::move(t)) {}  // NOLINT: an undefined Tensor boxes as a Tensor
  Value(std::optional<Tensor> t) {       // NOLINT
    if (t) v_ = std::move(*t);
  }
  // int?, float?, ScalarType? and the like: the value, or None.
  template <typename T>
  Value(const std::optional<T>& o) {  // NOLINT
    if (o) *this = Value(*o);
  }
  Value(std::vector<Tensor> ts) : v_(std::move(ts)) {}  // NOLINT
  Value(int64_t i) : v_(i) {}                           // NOLINT
  Value(int i) : v_(int64_t(i)) {}                      // NOLINT
  Value(double d) : v_(d) {}                            // NOLINT
  Value(bool b) : v_(b) {}                              // NOLINT
  Value(std::string s) : v_(std::move(s)) {}            // NOLINT
  Value(const char* s) : v_(std::string(s)) {}          // NOLINT
  Value(std::vector<int64_t> l) : v_(std::move(l)) {}   // NOLINT
  Value(const Shape& s) : v_(s.vec()) {}                // NOLINT
  Value(std::vector<double> l) : v_(std::move(l)) {}    // NOLINT
  Value(DType t) : v_(t) {}                             // NOLINT
  Value(Device d) : v_(d) {}                            // NOLINT

  bool is_none() const { return v_.index() == 0; }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_tensor_list() const { return std::holds_alternative<std::vector<Tensor>>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_int_list() const { return std::holds_alternative<std::vector<int64_t>>(v_); }

  const Tensor& to_tensor() const { return get<Tensor>("Tensor"); }
  std::optional<Tensor> to_optional_tensor() const {
    if (is_none()) return std::nullopt;
    return to_tensor();
  }
  const std::vector<Tensor>& to_tensor_list() const { return get<std::vector<Tensor>>("Tensor[]"); }
  int64_t to_int() const { return get<int64_t>("int"); }
  double to_double() const { return is_int() ? double(to_int()) : get<double>("float"); }
  bool to_bool() const { return get<bool>("bool"); }
  const std::string& to_string() const { return get<std::string>("str"); }
  const std::vector<int64_t>& to_int_list() const { return get<std::vector<int64_t>>("int[]"); }
  const std::vector<double>& to_double_list() const { return get<std::vector<double>>("float[]"); }
  DType to_dtype() const { return get<DType>("ScalarType"); }
  Device to_device() const { return get<Device>("Device"); }

  std::string_view type_name() const;  // "Tensor", "int", "None", ...
  std::string str() const;             // short, for traces: "Tensor[2, 3] float32 cpu", "1.5"
  const Storage& storage() const { return v_; }

 private:
  template <typename T>
  const T& get(const char* want) const {
    const T* p = std::get_if<T>(&v_);
    if (!p) bad_type(want);
    return *p;
  }
  [[noreturn]] void bad_type(const char* want) const;
  Storage v_;
};

using Stack = std::vector<Value>;

// Converts a Value to the C++ type a kernel takes (the canonical argument types of
// dispatcher/kernel_function.h).
template <typename T>
T value_to(const Value& v);

template <>
inline Tensor value_to<Tensor>(const Value& v) {
  return v.to_tensor();
}
template <>
inline std::optional<Tensor> value_to<std::optional<Tensor>>(const Value& v) {
  return v.to_optional_tensor();
}
template <>
inline std::vector<Tensor> value_to<std::vector<Tensor>>(const Value& v) {
  return v.to_tensor_list();
}
template <>
inline int64_t value_to<int64_t>(const Value& v) {
  return v.to_int();
}
template <>
inline double value_to<double>(const Value& v) {
  return v.to_double();
}
template <>
inline bool value_to<bool>(const Value& v) {
  return v.to_bool();
}
template <>
inline std::string value_to<std::string>(const Value& v) {
  return v.to_string();
}
template <>
inline std::vector<int64_t> value_to<std::vector<int64_t>>(const Value& v) {
  return v.to_int_list();
}
template <>
inline std::vector<double> value_to<std::vector<double>>(const Value& v) {
  return v.to_double_list();
}
template <>
inline DType value_to<DType>(const Value& v) {
  return v.to_dtype();
}
template <>
inline Device value_to<Device>(const Value& v) {
  return v.to_device();
}
template <>
inline std::optional<int64_t> value_to<std::optional<int64_t>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<int64_t>(v.to_int());
}
template <>
inline std::optional<double> value_to<std::optional<double>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<double>(v.to_double());
}
template <>
inline std::optional<DType> value_to<std::optional<DType>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<DType>(v.to_dtype());
}
template <>
inline std::optional<Device> value_to<std::optional<Device>>(const Value& v) {
  return v.is_none() ? std::nullopt : std::optional<Device>(v.to_device());
}

}  // namespace mt
