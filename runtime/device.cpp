// SPDX-License-Identifier: MIT
#include "runtime/device.h"

#include <charconv>

#include "runtime/error.h"

namespace mt {

std::string_view device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

Device::Device(const char* spec) : Device(std::string_view(spec)) {}

Device::Device(std::string_view spec) {
  auto bad = [&] {
    MT_ERROR("[device] cannot parse device '{}'; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0",
             spec);
  };
  std::string_view kind = spec.substr(0, spec.find(':'));
  if (kind == "cpu") {
    type = DeviceType::CPU;
  } else if (kind == "cuda") {
    type = DeviceType::CUDA;
  } else {
    bad();
  }
  index = 0;
  if (kind.size() < spec.size()) {
    std::string_view num = spec.substr(kind.size() + 1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (num.empty() || ec != std::errc() || p != num.data() + num.size() || index < 0) bad();
    if (type == DeviceType::CPU && index != 0) bad();
  }
}

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return fmt::format("cuda:{}", index);
}

}  // namespace mt
