// SPDX-License-Identifier: MIT
// Device: where a tensor's memory lives (cpu, or cuda:N).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/error.h"

namespace mt {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // always 0 for cpu

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  Device(const char* spec);       // NOLINT: "cpu", "cuda", "cuda:1"
  Device(std::string_view spec);  // NOLINT

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

inline constexpr Device kCPU{DeviceType::CPU, 0};
std::string_view device_type_name(DeviceType t);  // "cpu", "cuda"

}  // namespace mt

template <>
struct fmt::formatter<mt::Device> : mt::detail::TextFormatter {
  auto format(const mt::Device& d, fmt::format_context& ctx) const { return write(d.str(), ctx); }
};
