// SPDX-License-Identifier: MIT
#include "tools/bench/timing.h"

#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "kernels/cpu/loops.h"

namespace mt::bench {

void parallel_copy(char* dst, const char* src, int64_t nbytes) {
  cpu::parallel_for(nbytes, 4 * cpu::kGrainSize,
                    [&](int64_t b, int64_t e) { std::memcpy(dst + b, src + b, size_t(e - b)); });
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

namespace {
// One flush buffer per device, made on first use; never freed (no device frees at exit).
Tensor& flush_buffer(int device) {
  static auto* buffers = new std::map<int, Tensor>;
  auto it = buffers->find(device);
  if (it == buffers->end())
    it = buffers
             ->emplace(device, empty({64 << 20}, {.dtype = DType::Float32,
                                                  .device = Device(DeviceType::CUDA, device)}))
             .first;
  return it->second;
}
}  // namespace

double cuda_median_ms(int device, const CudaTiming& timing, const std::function<void()>& fn) {
  cuda::EventTimer timer(device);
  for (int i = 0; i < timing.warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < std::max(1, timing.repeats); ++i) {
    if (timing.flush_l2) flush_buffer(device).fill_(1.0);
    timer.start();
    fn();
    timer.stop();
    ms.push_back(timer.elapsed_ms());
  }
  return median(std::move(ms));
}

void check_device(const Device& device, std::string_view what) {
  MT_CHECK(device.is_cpu() || device.is_cuda(), "[{}] --device must be cpu or cuda, got {}", what,
           device.str());
  if (device.is_cuda()) {
    MT_CHECK(cuda::is_available(), "[{}] --device {}: CUDA is unavailable on this machine ({})",
             what, device.str(), cuda::unavailable_reason());
    MT_CHECK(device.index < cuda::device_count(), "[{}] --device {}: only {} CUDA device(s)", what,
             device.str(), cuda::device_count());
  }
}

}  // namespace mt::bench
