// SPDX-License-Identifier: MIT
// The CUDA backend of a build without cuda.h and nvrtc.h: nothing is available, and
// every call says how to get a build that has it.
#ifndef MT_HAVE_CUDA

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/hooks.h"
#include "runtime/error.h"

namespace mt::cuda {
namespace {

#ifdef MT_CUDA_DISABLED  // meson.build: -Dcuda=disabled
constexpr const char* kNoBackend =
    "this build of minitensor has no CUDA backend: it was configured with -Dcuda=disabled; "
    "reconfigure with -Dcuda=auto or -Dcuda=enabled (the CUDA headers are needed at build "
    "time only)";
#else
constexpr const char* kNoBackend =
    "this build of minitensor has no CUDA backend (cuda.h and nvrtc.h were not found when "
    "it was configured); reconfigure with -Dcuda=enabled, adding -Dcudatoolkit=/path/to/cuda "
    "if the toolkit is not in /usr/local/cuda";
#endif

[[noreturn]] void unavailable() { MT_ERROR("[cuda] CUDA is unavailable: {}", kNoBackend); }

}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kNoBackend; }
int driver_version() { unavailable(); }
const DeviceProps& device_props(int) { unavailable(); }

Allocator* caching_allocator(int) { unavailable(); }
AllocatorStats allocator_stats(int) { unavailable(); }
void reset_peak_stats(int) { unavailable(); }
void empty_cache(int) { unavailable(); }

void copy(const Tensor&, const Tensor&) { unavailable(); }
void fill(const Tensor&, double) { unavailable(); }
void synchronize(int) { unavailable(); }
CopyKernel set_copy_kernel(CopyKernel) { return nullptr; }
FillKernel set_fill_kernel(FillKernel) { return nullptr; }
RandomKernel set_random_kernel(RandomKernel) { return nullptr; }
RandomKernel random_kernel() { return nullptr; }

EventTimer::EventTimer(int index) : index_(index) { unavailable(); }
EventTimer::~EventTimer() = default;
EventTimer::EventTimer(EventTimer&& o) noexcept : index_(o.index_) {}
EventTimer& EventTimer::operator=(EventTimer&& o) noexcept {
  index_ = o.index_;
  return *this;
}
void EventTimer::start() { unavailable(); }
void EventTimer::stop() { unavailable(); }
float EventTimer::elapsed_ms() const { unavailable(); }

struct Graph::Impl {};
Graph::Graph() = default;
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
void Graph::capture_begin(int) { unavailable(); }
void Graph::capture_end() { unavailable(); }
void Graph::replay() { unavailable(); }
bool Graph::captured() const { return false; }
int Graph::device_index() const { return -1; }
size_t Graph::num_nodes() const { return 0; }
std::vector<std::string> Graph::node_kinds() const { return {}; }
size_t Graph::pool_bytes() const { return 0; }
bool is_capturing(int) { return false; }

MemorySnapshot memory_snapshot(int) { unavailable(); }
void record_memory_history(bool, size_t, int) { unavailable(); }
std::vector<MemoryEvent> memory_history(int) { unavailable(); }
// Nothing is recorded without a CUDA backend; the guard still nests.
namespace {
thread_local const char* t_memory_context = nullptr;
}
MemoryContext::MemoryContext(const char* what) : prev_(t_memory_context) {
  t_memory_context = what;
}
MemoryContext::~MemoryContext() { t_memory_context = prev_; }
const char* MemoryContext::current() { return t_memory_context; }

}  // namespace mt::cuda

#endif  // !MT_HAVE_CUDA
