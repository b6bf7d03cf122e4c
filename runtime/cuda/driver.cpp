// SPDX-License-Identifier: MIT
// Loading libcuda.so.1, device properties, primary contexts, current streams, events.
// Built only with the CUDA headers; stub.cpp stands in without them.
#ifdef MT_HAVE_CUDA

#include "runtime/cuda/driver.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <atomic>
#include <cctype>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda.h"
#include "runtime/error.h"

namespace mt::cuda {
namespace {

// Note [Driver entry points]
// Only cuGetProcAddress_v2 is looked up with dlsym; every other entry point comes from
// it. cuGetProcAddress hands out the newest ABI of a symbol up to the CUDA version asked
// for, and that ABI is not always the one <cuda.h> declares under the plain name: in
// CUDA 13.0, "cuCtxSynchronize" at version 13000 is cuCtxSynchronize_v2(CUcontext),
// while cuda.h's cuCtxSynchronize takes no argument. So each entry is asked for at the
// version whose signature cuda.h declares (cuMemAlloc -> cuMemAlloc_v2, 3020), and a
// static_assert against cudaTypedefs.h's PFN_<name>_v<version> proves that version
// right at compile time. Loading happens once, in a function-local static (thread-safe),
// and never throws: a failure becomes the reason that unavailable_reason() reports. The
// library is never closed.
struct Driver {
  DriverApi api{};
  int version = 0;
  int count = 0;
  std::vector<DeviceProps> props;
  std::string reason;  // empty when CUDA is available
};

// Every member of DriverApi is resolved in load(): the static_assert catches a member
// added without updating the count, load() a count without its MT_RESOLVE line. The
// kNumOptionalEntries last members may stay null.
constexpr int kNumDriverEntries = 53;
constexpr int kNumOptionalEntries = 2;
static_assert(sizeof(DriverApi) == (kNumDriverEntries + kNumOptionalEntries) * sizeof(void*),
              "a DriverApi member was added: resolve it in load() and update the count");

std::string error_text_with(const DriverApi& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &text);
  if (!name) return fmt::format("CUresult {}", int(r));
  return fmt::format("{} ({})", name, text ? text : "no description");
}

std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

bool query_props(Driver& d, int index) {
  const DriverApi& api = d.api;
  DeviceProps p;
  CUdevice dev = 0;
  char name[256] = {};
  auto fail = [&](const char* call, CUresult r) {
    d.reason =
        fmt::format("querying cuda:{} failed: {} failed: {}", index, call, error_text_with(api, r));
    return false;
  };
  if (CUresult r = api.cuDeviceGet(&dev, index)) return fail("cuDeviceGet", r);
  if (CUresult r = api.cuDeviceGetName(name, sizeof(name) - 1, dev)) {
    return fail("cuDeviceGetName", r);
  }
  p.name = name;
  if (CUresult r = api.cuDeviceTotalMem(&p.total_memory, dev)) {
    return fail("cuDeviceTotalMem", r);
  }
  const std::pair<int*, CUdevice_attribute> attrs[] = {
      {&p.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {&p.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {&p.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {&p.max_threads_per_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {&p.max_shared_per_block, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
      {&p.max_shared_per_block_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
      {&p.l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
      {&p.warp_size, CU_DEVICE_ATTRIBUTE_WARP_SIZE},
  };
  for (auto [out, attr] : attrs) {
    if (CUresult r = api.cuDeviceGetAttribute(out, attr, dev)) {
      return fail("cuDeviceGetAttribute", r);
    }
  }
  d.props.push_back(std::move(p));
  return true;
}

// load()'s pieces: open the driver, resolve its entry points, initialize it and query
// the devices. Each sets d.reason and returns false (or null) where it stops.

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// dlopens libcuda.so.1 and finds cuGetProcAddress_v2 in it.
GetProc open_driver(Driver& d) {
  dlerror();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    d.reason = fmt::format("libcuda.so.1 could not be loaded: {}", err ? err : "unknown error");
    return nullptr;
  }
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    d.reason =
        "libcuda.so.1 has no cuGetProcAddress_v2: the NVIDIA driver predates CUDA 12; "
        "update the driver";
  }
  return get_proc;
}

// Sets fn to the driver's `name` for the ABI of CUDA `version`, counting it in `resolved`.
template <typename Fn>
bool resolve(Driver& d, GetProc get_proc, const char* name, int version, Fn& fn, int& resolved) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != CUDA_SUCCESS) {
    d.reason =
        fmt::format("cuGetProcAddress_v2(\"{}\") failed: {}", name, error_text_with(d.api, r));
    if (r == CUDA_ERROR_STUB_LIBRARY) {
      d.reason +=
          "; this libcuda.so.1 is the toolkit's link stub, not the driver: take the "
          "stubs folder off LD_LIBRARY_PATH";
    }
    return false;
  }
  if (status != CU_GET_PROC_ADDRESS_SUCCESS || !p) {
    d.reason = fmt::format(
        "libcuda.so.1 has no {} for CUDA {} (the driver supports CUDA {}); update the driver", name,
        version_text(version), d.version ? version_text(d.version) : "unknown");
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  ++resolved;
  return true;
}

// Fills d.api, every entry point of kNumDriverEntries, and d.version.
bool resolve_entry_points(Driver& d, GetProc get_proc) {
  int resolved = 0;
  // #name and PFN_##name keep the name as written (cuMemAlloc); d.api.name follows
  // cuda.h's macros (cuMemAlloc_v2). `version` is that of the ABI cuda.h declares.
#define MT_RESOLVE(name, version)                                              \
  static_assert(std::is_same_v<decltype(d.api.name), PFN_##name##_v##version>, \
                #name ": cuda.h declares another ABI than version " #version); \
  if (!resolve(d, get_proc, #name, version, d.api.name, resolved)) return false
  MT_RESOLVE(cuGetErrorName, 6000);  // first, so that later failures have names
  MT_RESOLVE(cuGetErrorString, 6000);
  MT_RESOLVE(cuDriverGetVersion, 2020);
  if (d.api.cuDriverGetVersion(&d.version) != CUDA_SUCCESS) d.version = 0;
  MT_RESOLVE(cuInit, 2000);
  MT_RESOLVE(cuDeviceGet, 2000);
  MT_RESOLVE(cuDeviceGetCount, 2000);
  MT_RESOLVE(cuDeviceGetName, 2000);
  MT_RESOLVE(cuDeviceGetAttribute, 2000);
  MT_RESOLVE(cuDeviceTotalMem, 3020);
  MT_RESOLVE(cuDevicePrimaryCtxRetain, 7000);
  MT_RESOLVE(cuCtxSetCurrent, 4000);
  MT_RESOLVE(cuCtxGetCurrent, 4000);
  MT_RESOLVE(cuCtxGetDevice, 2000);
  MT_RESOLVE(cuCtxSynchronize, 2000);
  MT_RESOLVE(cuStreamCreate, 2000);
  MT_RESOLVE(cuStreamDestroy, 4000);
  MT_RESOLVE(cuStreamSynchronize, 2000);
  MT_RESOLVE(cuStreamQuery, 2000);
  MT_RESOLVE(cuStreamWaitEvent, 3020);
  MT_RESOLVE(cuEventCreate, 2000);
  MT_RESOLVE(cuEventRecord, 2000);
  MT_RESOLVE(cuEventSynchronize, 2000);
  MT_RESOLVE(cuEventQuery, 2000);
  MT_RESOLVE(cuEventElapsedTime, 12080);
  MT_RESOLVE(cuEventDestroy, 4000);
  MT_RESOLVE(cuMemAlloc, 3020);
  MT_RESOLVE(cuMemFree, 3020);
  MT_RESOLVE(cuMemGetInfo, 3020);
  MT_RESOLVE(cuMemcpyHtoDAsync, 3020);
  MT_RESOLVE(cuMemcpyDtoHAsync, 3020);
  MT_RESOLVE(cuMemcpyDtoDAsync, 3020);
  MT_RESOLVE(cuMemsetD8Async, 3020);
  MT_RESOLVE(cuMemsetD32Async, 3020);
  MT_RESOLVE(cuModuleLoadData, 2000);
  MT_RESOLVE(cuModuleLoadDataEx, 2010);
  MT_RESOLVE(cuModuleGetFunction, 2000);
  MT_RESOLVE(cuModuleGetGlobal, 3020);
  MT_RESOLVE(cuModuleUnload, 2000);
  MT_RESOLVE(cuLaunchKernel, 4000);
  MT_RESOLVE(cuLaunchKernelEx, 11060);
  MT_RESOLVE(cuFuncGetAttribute, 2020);
  MT_RESOLVE(cuFuncSetAttribute, 9000);
  MT_RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050);
  MT_RESOLVE(cuStreamBeginCapture, 10010);  // _v2: with the capture mode
  MT_RESOLVE(cuStreamEndCapture, 10000);
  MT_RESOLVE(cuStreamIsCapturing, 10000);
  MT_RESOLVE(cuThreadExchangeStreamCaptureMode, 10010);
  MT_RESOLVE(cuGraphInstantiateWithFlags, 11040);
  MT_RESOLVE(cuGraphLaunch, 10000);
  MT_RESOLVE(cuGraphExecDestroy, 10000);
  MT_RESOLVE(cuGraphDestroy, 10000);
  MT_RESOLVE(cuGraphGetNodes, 10000);
  MT_RESOLVE(cuGraphNodeGetType, 10000);
#undef MT_RESOLVE
  // Optional entry points: left null where the driver has none.
  auto optional = [&](const char* name, int version, auto& fn) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
        status == CU_GET_PROC_ADDRESS_SUCCESS && p)
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  static_assert(std::is_same_v<decltype(d.api.cuGraphKernelNodeGetParams),
                               PFN_cuGraphKernelNodeGetParams_v12000>);
  static_assert(std::is_same_v<decltype(d.api.cuFuncGetName), PFN_cuFuncGetName_v12030>);
  optional("cuGraphKernelNodeGetParams", 12000, d.api.cuGraphKernelNodeGetParams);
  optional("cuFuncGetName", 12030, d.api.cuFuncGetName);
  if (resolved != kNumDriverEntries) {
    d.reason = fmt::format(
        "minitensor resolved {} of {} driver entry points (a bug: see "
        "kNumDriverEntries in runtime/cuda/driver.cpp)",
        resolved, kNumDriverEntries);
    return false;
  }
  return true;
}

// cuInit, then the device count and each device's properties.
bool init_devices(Driver& d) {
  if (CUresult r = d.api.cuInit(0)) {
    d.reason = "cuInit failed: " + error_text_with(d.api, r);
    return false;
  }
  if (CUresult r = d.api.cuDeviceGetCount(&d.count)) {
    d.reason = "cuDeviceGetCount failed: " + error_text_with(d.api, r);
    d.count = 0;
    return false;
  }
  if (d.count <= 0) {
    d.reason = "the driver sees no CUDA device (cuDeviceGetCount returned 0)";
    d.count = 0;
    return false;
  }
  for (int i = 0; i < d.count; ++i) {
    if (!query_props(d, i)) {
      d.count = 0;
      d.props.clear();
      return false;
    }
  }
  return true;
}

Driver load() {
  Driver d;
  GetProc get_proc = open_driver(d);
  if (get_proc && resolve_entry_points(d, get_proc)) init_devices(d);
  return d;
}

const Driver& the_driver() {
  static const Driver d = load();
  return d;
}

// Lazily made per-device state: the retained primary context and the streams.
// Fast paths read atomics; the mutex guards creation.
struct DeviceState {
  std::mutex mutex;
  std::atomic<CUcontext> context{nullptr};
  std::atomic<CUstream> own_stream{nullptr};
  std::atomic<CUstream> current_stream{nullptr};  // nullptr: own_stream
  std::atomic<CUstream> capture_stream{nullptr};  // set while a Graph captures
  std::string refusal;                            // guarded by mutex
};

DeviceState& device_state(int index) {
  // Leaked on purpose: contexts and streams outlive static destruction.
  static auto* states = [] {
    auto* v = new std::vector<std::unique_ptr<DeviceState>>();
    for (int i = 0; i < device_count(); ++i) v->push_back(std::make_unique<DeviceState>());
    return v;
  }();
  return *(*states)[size_t(index)];
}

std::string_view driver_call_name(std::string_view call) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t i = 0; i + 2 < call.size(); ++i) {
    if ((i == 0 || !ident(call[i - 1])) && call[i] == 'c' && call[i + 1] == 'u' &&
        std::isupper(static_cast<unsigned char>(call[i + 2]))) {
      size_t j = i + 2;
      while (j < call.size() && ident(call[j])) ++j;
      return call.substr(i, j - i);
    }
  }
  return call;
}

}  // namespace

bool is_available() { return the_driver().reason.empty(); }

int device_count() { return the_driver().count; }

std::string unavailable_reason() { return the_driver().reason; }

const DriverApi& driver() {
  const Driver& d = the_driver();
  MT_CHECK(d.reason.empty(), "[cuda] CUDA is unavailable: {}", d.reason);
  return d.api;
}

int driver_version() {
  driver();
  return the_driver().version;
}

std::string error_text(CUresult r) { return error_text_with(the_driver().api, r); }

void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) [[likely]]
    return;
  MT_ERROR("[cuda] {} failed: {}", driver_call_name(call ? call : "driver call"), error_text(r));
}

namespace detail {
void check_device(int index) {
  driver();
  MT_CHECK(index >= 0 && index < device_count(),
           "[cuda] invalid device cuda:{}: this machine has {} CUDA device(s), cuda:0 to cuda:{}",
           index, device_count(), device_count() - 1);
}
}  // namespace detail

const DeviceProps& device_props(int index) {
  detail::check_device(index);
  return the_driver().props[size_t(index)];
}

CUcontext primary_context(int index) {
  detail::check_device(index);
  DeviceState& s = device_state(index);
  if (CUcontext c = s.context.load(std::memory_order_acquire)) return c;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (CUcontext c = s.context.load(std::memory_order_relaxed)) return c;
  CUdevice dev = 0;
  CUcontext c = nullptr;
  MT_CU_CHECK(driver().cuDeviceGet(&dev, index));
  MT_CU_CHECK(driver().cuDevicePrimaryCtxRetain(&c, dev));
  s.context.store(c, std::memory_order_release);
  return c;
}

DeviceGuard::DeviceGuard(int index) : DeviceGuard(primary_context(index)) {}

DeviceGuard::DeviceGuard(CUcontext ctx) {
  MT_CU_CHECK(driver().cuCtxGetCurrent(&prev_));
  if (prev_ != ctx) {
    MT_CU_CHECK(driver().cuCtxSetCurrent(ctx));
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) driver().cuCtxSetCurrent(prev_);  // nothing to do if this fails
}

CUstream current_stream(int index) {
  detail::check_device(index);
  DeviceState& s = device_state(index);
  if (CUstream c = s.current_stream.load(std::memory_order_acquire)) return c;
  if (CUstream own = s.own_stream.load(std::memory_order_acquire)) return own;
  DeviceGuard guard(index);  // before the lock: it may take the same mutex
  std::lock_guard<std::mutex> lock(s.mutex);
  if (CUstream own = s.own_stream.load(std::memory_order_relaxed)) return own;
  // Blocking with respect to the legacy default stream, so stray work there stays ordered.
  CUstream own = nullptr;
  MT_CU_CHECK(driver().cuStreamCreate(&own, CU_STREAM_DEFAULT));
  s.own_stream.store(own, std::memory_order_release);
  return own;
}

void set_current_stream(int index, CUstream stream) {
  detail::check_device(index);
  device_state(index).current_stream.store(stream, std::memory_order_release);
}

StreamGuard::StreamGuard(int index, CUstream s) : index_(index) {
  detail::check_device(index);
  prev_ = device_state(index).current_stream.load(std::memory_order_acquire);
  set_current_stream(index, s);
}

StreamGuard::~StreamGuard() {
  device_state(index_).current_stream.store(prev_, std::memory_order_release);
}

namespace detail {

CUstream capture_stream(int index) {
  check_device(index);
  return device_state(index).capture_stream.load(std::memory_order_acquire);
}

void set_capture_stream(int index, CUstream s) {
  check_device(index);
  DeviceState& st = device_state(index);
  std::lock_guard<std::mutex> lock(st.mutex);
  st.capture_stream.store(s, std::memory_order_release);
  if (s) st.refusal.clear();  // a new capture; at its end the refusal is kept for capture_end
}

void refuse_during_capture(int index, const std::string& what, const std::string& fix) {
  const std::string body = fmt::format(
      "{}: cuda:{} is capturing a CUDA graph (mt::cuda::Graph), and this call would break the "
      "capture; {}",
      what, index, fix);
  DeviceState& st = device_state(index);
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    if (st.refusal.empty() && st.capture_stream.load(std::memory_order_relaxed))
      st.refusal = "[cuda] " + body;
  }
  MT_ERROR("[cuda] {}", body);
}

std::string take_capture_refusal(int index) {
  DeviceState& st = device_state(index);
  std::lock_guard<std::mutex> lock(st.mutex);
  return std::exchange(st.refusal, std::string());
}

}  // namespace detail

bool is_capturing(int index) {
  if (!is_available()) return false;
  return detail::capture_stream(index) != nullptr;
}

void synchronize(int index) {
  if (is_capturing(index))
    detail::refuse_during_capture(index, "synchronize",
                                  "call it after Graph::capture_end (replays are asynchronous: "
                                  "synchronize after replay to wait for one)");
  DeviceGuard guard(index);
  MT_CU_CHECK(driver().cuStreamSynchronize(current_stream(index)));
}

EventTimer::EventTimer(int index) : index_(index) {
  DeviceGuard guard(index);
  MT_CU_CHECK(driver().cuEventCreate(&start_, CU_EVENT_DEFAULT));
  if (CUresult r = driver().cuEventCreate(&stop_, CU_EVENT_DEFAULT)) {
    driver().cuEventDestroy(start_);
    check(r, "cuEventCreate");
  }
}

EventTimer::~EventTimer() {
  // Destroying an event needs no current context; errors cannot be reported here.
  if (start_) driver().cuEventDestroy(start_);
  if (stop_) driver().cuEventDestroy(stop_);
}

EventTimer::EventTimer(EventTimer&& o) noexcept
    : index_(o.index_),
      start_(std::exchange(o.start_, nullptr)),
      stop_(std::exchange(o.stop_, nullptr)) {}

EventTimer& EventTimer::operator=(EventTimer&& o) noexcept {
  if (this != &o) {
    if (start_) driver().cuEventDestroy(start_);
    if (stop_) driver().cuEventDestroy(stop_);
    index_ = o.index_;
    start_ = std::exchange(o.start_, nullptr);
    stop_ = std::exchange(o.stop_, nullptr);
  }
  return *this;
}

void EventTimer::start() {
  MT_CHECK(start_, "[cuda] EventTimer::start on a moved-from timer");
  DeviceGuard guard(index_);
  MT_CU_CHECK(driver().cuEventRecord(start_, current_stream(index_)));
}

void EventTimer::stop() {
  MT_CHECK(stop_, "[cuda] EventTimer::stop on a moved-from timer");
  DeviceGuard guard(index_);
  MT_CU_CHECK(driver().cuEventRecord(stop_, current_stream(index_)));
}

float EventTimer::elapsed_ms() const {
  MT_CHECK(start_ && stop_, "[cuda] EventTimer::elapsed_ms on a moved-from timer");
  if (is_capturing(index_))
    detail::refuse_during_capture(index_, "EventTimer::elapsed_ms",
                                  "time the replay instead: start() and stop() around "
                                  "Graph::replay, after capture_end");
  DeviceGuard guard(index_);
  float ms = 0;
  MT_CU_CHECK(driver().cuEventSynchronize(stop_));
  MT_CU_CHECK(driver().cuEventElapsedTime(&ms, start_, stop_));
  return ms;
}

}  // namespace mt::cuda

#endif  // MT_HAVE_CUDA
