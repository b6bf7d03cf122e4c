// SPDX-License-Identifier: MIT
// mt::cuda::Graph: stream capture into a CUDA graph, instantiated once and replayed with
// one launch. Built only with the CUDA headers; stub.cpp stands in without them.
#ifdef MT_HAVE_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/driver.h"
#include "runtime/error.h"

namespace mt::cuda {

// Note [CUDA graph capture]
// What the driver API documents (cuStreamBeginCapture, cuThreadExchangeStreamCaptureMode,
// cuStreamIsCapturing, and the programming guide's "prohibited and unhandled operations"),
// and what this file does with it:
//  - Work queued on a capturing stream is recorded into a graph, not run. Capture cannot
//    start on the legacy (null) stream, and while a stream that is not
//    CU_STREAM_NON_BLOCKING captures, any use of the legacy stream in that context is
//    invalid (the legacy stream implicitly waits for every blocking stream). So the
//    capture stream is a non-blocking stream of the graph's own, made the device's
//    current stream for the capture: every op minitensor queues on the device goes there.
//    The current stream is process-wide (driver.h), so other threads must not queue work
//    on the device during a capture: it would be recorded too.
//  - Synchronizing or querying a capturing stream, an event recorded in it, or a broader
//    handle that contains it (the context: cuCtxSynchronize) is invalid and invalidates
//    the capture; synchronous calls (a copy to pageable host memory, which waits) are
//    too. cuMemFree is one: it synchronizes. minitensor's synchronizing calls
//    (cuda::synchronize, a copy to or from the host, empty_cache, EventTimer::elapsed_ms)
//    check is_capturing() first and throw an mt::Error that says a capture is in progress
//    and what to do, instead of letting the driver break the capture; the first such
//    refusal is kept and capture_end fails with it, so a graph with work missing is never
//    instantiated. (A copy from the host is refused too: it would be recorded as a node
//    that reads the host memory again at each replay.)
//  - The capture mode says which "potentially unsafe" calls (cuMemAlloc is the example
//    the documentation gives: it is not ordered on the stream, so a replay does not
//    repeat it) a thread may make during a capture. GLOBAL (the default) forbids them in
//    the capturing thread and in every other thread while a global capture runs;
//    THREAD_LOCAL only in the capturing thread; RELAXED in none, though calls that
//    necessarily conflict with capture (querying a captured event, synchronizing the
//    stream) stay invalid. The capture starts in THREAD_LOCAL mode, so unsafe calls of
//    the capturing thread fail loudly while other threads (other devices, a data loader)
//    are left alone. The caching allocator is the one component that must call
//    cuMemAlloc during a capture (a pool block the capture needs): it switches its
//    thread to RELAXED with cuThreadExchangeStreamCaptureMode around that one call and
//    back, which is legal because the address is handed to the graph once and never
//    freed while the graph lives (Note [Caching allocator]: the graph's private pool).
//  - cuStreamEndCapture must come from the thread that began a non-relaxed capture; it
//    returns no graph when the capture was invalidated. Ending a capture severs the
//    stream from it, so the stream and device are usable again either way.
//  - A graph launch (cuGraphLaunch) is asynchronous on the stream given, like a kernel,
//    and one instantiated graph runs one launch at a time in launch order. The graph's
//    pool may only be freed once the last replay finished: replay records an event, and
//    the destructor waits for it.
//  - Random ops recorded in a graph replay the same numbers (the generator's counter
//    advanced once, at capture), and an input's storage must stay alive and at the same
//    address for as long as the graph is replayed; change its contents in place.

namespace {

void destroy_quietly(CUgraph g) {
  if (g) driver().cuGraphDestroy(g);
}

// Kernel, memcpy and memset nodes of g (not the empty or event nodes a capture may add).
size_t count_work_nodes(CUgraph g) {
  size_t n = 0;
  MT_CU_CHECK(driver().cuGraphGetNodes(g, nullptr, &n));
  std::vector<CUgraphNode> nodes(n);
  if (n) MT_CU_CHECK(driver().cuGraphGetNodes(g, nodes.data(), &n));
  size_t work = 0;
  for (size_t i = 0; i < n; ++i) {
    CUgraphNodeType t{};
    MT_CU_CHECK(driver().cuGraphNodeGetType(nodes[i], &t));
    work += t == CU_GRAPH_NODE_TYPE_KERNEL || t == CU_GRAPH_NODE_TYPE_MEMCPY ||
            t == CU_GRAPH_NODE_TYPE_MEMSET;
  }
  return work;
}

// The work nodes of g by kind (Graph::node_kinds), counted in order of first appearance.
std::vector<std::string> work_node_kinds(CUgraph g) {
  size_t n = 0;
  MT_CU_CHECK(driver().cuGraphGetNodes(g, nullptr, &n));
  std::vector<CUgraphNode> nodes(n);
  if (n) MT_CU_CHECK(driver().cuGraphGetNodes(g, nodes.data(), &n));
  std::vector<std::pair<std::string, size_t>> kinds;
  for (size_t i = 0; i < n; ++i) {
    CUgraphNodeType t{};
    MT_CU_CHECK(driver().cuGraphNodeGetType(nodes[i], &t));
    std::string kind = t == CU_GRAPH_NODE_TYPE_MEMCPY   ? "memcpy"
                       : t == CU_GRAPH_NODE_TYPE_MEMSET ? "memset"
                       : t == CU_GRAPH_NODE_TYPE_KERNEL ? "kernel"
                                                        : "";
    if (kind.empty()) continue;
    const DriverApi& api = driver();
    CUDA_KERNEL_NODE_PARAMS p{};
    const char* name = nullptr;
    if (kind == "kernel" && api.cuGraphKernelNodeGetParams && api.cuFuncGetName &&
        api.cuGraphKernelNodeGetParams(nodes[i], &p) == CUDA_SUCCESS && p.func &&
        api.cuFuncGetName(&name, p.func) == CUDA_SUCCESS && name)
      kind += std::string(" ") + name;
    auto at =
        std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
    if (at == kinds.end())
      kinds.emplace_back(kind, 1);
    else
      ++at->second;
  }
  std::vector<std::string> out;
  for (const auto& [kind, count] : kinds) out.push_back(fmt::format("{} x {}", count, kind));
  return out;
}

}  // namespace

struct Graph::Impl {
  int index = -1;
  CUstream stream = nullptr;           // the capture stream, from capture_begin to capture_end
  std::optional<StreamGuard> current;  // makes `stream` current during the capture
  uint64_t pool = 0;
  CUgraphExec exec = nullptr;
  CUevent done = nullptr;  // recorded after each replay
  bool replayed = false;
  size_t nodes = 0;
  std::vector<std::string> kinds;  // node_kinds()
  bool owns_capture = false;       // this graph set the device's capture state
  bool driver_capture = false;     // between a successful cuStreamBeginCapture and its end

  ~Impl() { reset(); }

  bool capturing() const { return owns_capture; }

  // Ends a capture in progress (its graph discarded), waits for the last replay, and
  // frees everything: the graph is empty after. Never throws.
  void reset() noexcept {
    if (index < 0) return;
    try {
      DeviceGuard guard(index);
      if (driver_capture) {
        CUgraph g = nullptr;
        driver().cuStreamEndCapture(stream, &g);
        driver_capture = false;
        destroy_quietly(g);
      }
      end_capture_state();
      if (done && replayed) driver().cuEventSynchronize(done);
      if (exec) driver().cuGraphExecDestroy(exec);
      if (done) driver().cuEventDestroy(done);
      if (stream) driver().cuStreamDestroy(stream);
    } catch (...) {
      // The driver is unavailable (process exit): nothing more can be done.
    }
    end_capture_state();  // a no-op unless the guard above threw
    if (pool) detail::release_pool(index, pool);
    index = -1;
    stream = nullptr;
    pool = 0;
    exec = nullptr;
    done = nullptr;
    replayed = false;
    nodes = 0;
    kinds.clear();
  }

  // The device stops being captured: current stream restored, allocations no longer
  // routed to the pool.
  void end_capture_state() noexcept {
    if (!owns_capture) return;
    owns_capture = false;
    current.reset();  // the previous current stream again
    try {
      detail::set_capture_stream(index, nullptr);
    } catch (...) {
    }
    if (pool) detail::end_pool_routing(index, pool);
  }
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

void Graph::capture_begin(int index) {
  MT_CHECK(impl_, "[cuda] Graph::capture_begin on a moved-from graph");
  Impl& g = *impl_;
  MT_CHECK(!g.capturing(),
           "[cuda] Graph::capture_begin: this graph is already capturing cuda:{}; call "
           "capture_end first",
           g.index);
  MT_CHECK(!g.exec,
           "[cuda] Graph::capture_begin: this graph was captured already (on cuda:{}); a "
           "graph is captured once: replay it, or capture into a new mt::cuda::Graph",
           g.index);
  detail::check_device(index);
  MT_CHECK(!is_capturing(index),
           "[cuda] Graph::capture_begin: cuda:{} is already capturing another graph; one "
           "capture at a time per device: call capture_end on that graph first",
           index);
  DeviceGuard guard(index);
  current_stream(index);  // the device's own stream exists before the capture
  CUstream s = nullptr;
  MT_CU_CHECK(driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  g.index = index;
  g.stream = s;
  try {
    MT_CU_CHECK(driver().cuEventCreate(&g.done, CU_EVENT_DISABLE_TIMING));
    g.pool = detail::begin_pool(index, s);
    g.owns_capture = true;
    g.current.emplace(index, s);
    detail::set_capture_stream(index, s);
    MT_CU_CHECK(driver().cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    g.driver_capture = true;
  } catch (...) {
    g.reset();  // ends what was started; the graph stays empty
    throw;
  }
}

void Graph::capture_end() {
  MT_CHECK(impl_, "[cuda] Graph::capture_end on a moved-from graph");
  Impl& g = *impl_;
  MT_CHECK(g.capturing() || !g.exec,
           "[cuda] Graph::capture_end: this graph's capture has ended already; replay it");
  MT_CHECK(g.capturing(),
           "[cuda] Graph::capture_end without capture_begin: call capture_begin(device) first");
  DeviceGuard guard(g.index);
  CUgraph graph = nullptr;
  const CUresult r = driver().cuStreamEndCapture(g.stream, &graph);
  g.driver_capture = false;
  const std::string refusal = detail::take_capture_refusal(g.index);
  g.end_capture_state();
  const int index = g.index;
  std::string cause;
  if (!refusal.empty()) {
    cause = refusal;
  } else if (r != CUDA_SUCCESS || !graph) {
    cause =
        r == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
            ? "cuStreamEndCapture failed: " + error_text(r) +
                  "; call capture_end on the thread that called capture_begin"
            : "cuStreamEndCapture failed: " +
                  (r == CUDA_SUCCESS ? std::string("the capture was invalidated") : error_text(r)) +
                  "; an operation during the capture was not capturable (one that "
                  "synchronizes, or work on the legacy default stream)";
  } else {
    try {
      g.nodes = count_work_nodes(graph);
      g.kinds = work_node_kinds(graph);
      CUgraphExec exec = nullptr;
      MT_CU_CHECK(driver().cuGraphInstantiateWithFlags(&exec, graph, 0));
      g.exec = exec;
    } catch (const Error& e) {
      cause = e.what();
    }
  }
  destroy_quietly(graph);
  if (!cause.empty()) {
    // Outputs of the failed capture that are still held join the general allocator; the
    // graph is empty and may capture again.
    g.reset();
    MT_ERROR(
        "[cuda] Graph::capture_end: the capture of cuda:{} failed, and the graph is "
        "left empty: {}",
        index, cause);
  }
  driver().cuStreamDestroy(std::exchange(g.stream, nullptr));
}

void Graph::replay() {
  MT_CHECK(impl_, "[cuda] Graph::replay on a moved-from graph");
  Impl& g = *impl_;
  MT_CHECK(!g.capturing(), "[cuda] Graph::replay during the capture: call capture_end first");
  MT_CHECK(g.exec,
           "[cuda] Graph::replay: nothing was captured; call capture_begin(device), queue the "
           "work, then capture_end");
  MT_CHECK(!is_capturing(g.index),
           "[cuda] Graph::replay: cuda:{} is capturing another graph; replay after its "
           "capture_end",
           g.index);
  DeviceGuard guard(g.index);
  CUstream s = current_stream(g.index);
  MT_CU_CHECK(driver().cuGraphLaunch(g.exec, s));
  MT_CU_CHECK(driver().cuEventRecord(g.done, s));
  g.replayed = true;
}

bool Graph::captured() const { return impl_ && impl_->exec; }
int Graph::device_index() const { return impl_ ? impl_->index : -1; }
size_t Graph::num_nodes() const { return impl_ ? impl_->nodes : 0; }
std::vector<std::string> Graph::node_kinds() const {
  return impl_ ? impl_->kinds : std::vector<std::string>{};
}
size_t Graph::pool_bytes() const {
  return impl_ && impl_->pool ? detail::pool_bytes(impl_->index, impl_->pool) : 0;
}

}  // namespace mt::cuda

#endif  // MT_HAVE_CUDA
