// SPDX-License-Identifier: MIT
// Shape: a fixed-capacity list of sizes or strides (up to kMaxDims), so that making
// a tensor allocates nothing for its metadata.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "runtime/error.h"

namespace mt {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  Shape(std::span<const int64_t> v) { assign(v.begin(), v.end()); }     // NOLINT
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT
  explicit Shape(size_t n, int64_t value = 0) {
    check_size(n);
    n_ = uint8_t(n);
    for (size_t i = 0; i < n; ++i) d_[i] = value;
  }

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t* data() { return d_; }
  const int64_t* data() const { return d_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t& operator[](size_t i) { return d_[i]; }
  int64_t operator[](size_t i) const { return d_[i]; }
  int64_t& back() { return d_[n_ - 1]; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    check_size(n_ + 1u);
    d_[n_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    check_size(n_ + 1u);
    for (size_t i = n_; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
    ++n_;
  }
  void erase(size_t pos) {
    for (size_t i = pos + 1; i < n_; ++i) d_[i - 1] = d_[i];
    --n_;
  }
  void resize(size_t n, int64_t value = 0) {
    check_size(n);
    for (size_t i = n_; i < n; ++i) d_[i] = value;
    n_ = uint8_t(n);
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  operator std::span<const int64_t>() const { return {d_, n_}; }  // NOLINT

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.n_ != b.n_) return false;
    for (size_t i = 0; i < a.n_; ++i)
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }

 private:
  template <typename It>
  void assign(It b, It e) {
    size_t n = size_t(e - b);
    check_size(n);
    n_ = uint8_t(n);
    for (size_t i = 0; i < n; ++i) d_[i] = int64_t(b[i]);
  }
  static void check_size(size_t n) {
    MT_CHECK(n <= size_t(kMaxDims), "[shape] tensors have at most {} dimensions, got {}", kMaxDims,
             n);
  }
  int64_t d_[kMaxDims] = {};
  uint8_t n_ = 0;
};

namespace detail {
// "[op] the sizes [...] have 2^64 elements, more than int64 can count; ..." (or a
// negative size): the error of checked_numel.
[[noreturn]] void throw_bad_shape(const Shape& s, const char* op);
// "[2, 3]": the text of fmt's "{}" for a Shape.
std::string shape_str(const Shape& s);
}  // namespace detail

// Note [Checked shapes]
// Every shape a tensor gets is checked where it is made (the factories, view, reshape,
// expand): no size is negative, and the product of the sizes, counting a 0 as a 1 (what
// the contiguous strides and the extents need), fits in int64. Shapes derived from a
// checked one (a slice, a transpose, a flatten) then cannot overflow either, and neither
// can numel times the element size, which the factories and expand check as well.
// The number of elements of `s`, refusing ("[op] ...") negative sizes and shapes past int64.
inline int64_t checked_numel(const Shape& s, const char* op) {
  int64_t n = 1, strided = 1;
  for (int64_t v : s) {
    if (v < 0 || __builtin_mul_overflow(strided, v > 1 ? v : 1, &strided)) [[unlikely]]
      detail::throw_bad_shape(s, op);
    n *= v;  // 0 <= n <= strided: no overflow
  }
  return n;
}

// Product of sizes (1 for a 0-d shape), for shapes already checked; one that overflows
// is refused all the same, never wrapped.
inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s)
    if (__builtin_mul_overflow(n, v, &n)) [[unlikely]]
      detail::throw_bad_shape(s, "tensor");
  return n;
}

}  // namespace mt

template <>
struct fmt::formatter<mt::Shape> : mt::detail::TextFormatter {
  auto format(const mt::Shape& s, fmt::format_context& ctx) const {
    return write(mt::detail::shape_str(s), ctx);
  }
};
