// SPDX-License-Identifier: MIT
// Shared test helpers: doctest printers for minitensor types.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "minitensor.h"

namespace doctest {
template <>
struct StringMaker<mt::Shape> {
  static String convert(const mt::Shape& s) { return fmt::format("{}", s).c_str(); }
};
template <>
struct StringMaker<mt::DType> {
  static String convert(mt::DType t) { return fmt::format("{}", t).c_str(); }
};
template <>
struct StringMaker<mt::DispatchKeySet> {
  static String convert(mt::DispatchKeySet k) { return k.str().c_str(); }
};
}  // namespace doctest

// The message of the mt::Error that fn throws, or "(no error)": for tests that check the
// exact text users see.
inline std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const mt::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Collects what the dispatcher logs (MT_TRACE=dispatch lines, a fallback's warning) while it
// lives; count(s) is the number of lines that contain s. Its end also turns the dispatch
// trace and the registration log off, which a case may have turned on.
struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() {
    mt::dispatcher().set_log_sink([this](std::string_view l) { lines.emplace_back(l); });
  }
  ~LogCapture() {
    mt::dispatcher().set_trace_dispatch(false);
    mt::dispatcher().set_log_registrations(false);
    mt::dispatcher().set_log_sink(nullptr);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  int count(std::string_view what) const {
    int n = 0;
    for (const std::string& l : lines) n += l.find(what) != std::string::npos;
    return n;
  }
};

// True where no CUDA device can be used: the GPU cases skip (doctest's skip decorator).
inline bool no_gpu() { return !mt::cuda::is_available(); }
// The first CUDA device, for the GPU cases.
inline const mt::Device kGpu{mt::DeviceType::CUDA, 0};
// True where NVRTC cannot be loaded: the cases that compile kernels skip.
inline bool no_nvrtc() { return !mt::jit::nvrtc_available(); }

// The largest |a - b| over the elements, in float64 on the CPU (0 for empty tensors).
// A tensor's elements as doubles, in order.
inline std::vector<double> vals(const mt::Tensor& t) { return t.to_vector<double>(); }

inline double max_diff(const mt::Tensor& a, const mt::Tensor& b) {
  mt::Tensor d = mt::abs(a.cpu().to(mt::DType::Float64) - b.cpu().to(mt::DType::Float64));
  return d.numel() ? mt::max(d).item<double>() : 0.0;
}

// The archs the "compiles to CUBIN" cases build every kernel for: sm_80 and sm_90; in the
// sanitizer build sm_90 alone. NVRTC is not instrumented there: what that build adds is the
// host code around it (sources, options, lowered names), and the plain build, which CI
// runs too, compiles for both.
inline std::vector<int> cubin_test_archs() {
#if defined(__SANITIZE_ADDRESS__)
  return {90};
#else
  return {80, 90};
#endif
}

// MT_LOG=compile for a scope, with the dispatcher's log collected.
struct CompileLog {
  std::vector<std::string> lines;
  CompileLog() {
    ::setenv("MT_LOG", "compile", 1);
    mt::dispatcher().set_log_sink([this](std::string_view l) { lines.emplace_back(l); });
  }
  ~CompileLog() {
    mt::dispatcher().set_log_sink(nullptr);
    ::unsetenv("MT_LOG");
  }
  bool has(std::string_view text) const {
    for (const std::string& l : lines)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }
};
