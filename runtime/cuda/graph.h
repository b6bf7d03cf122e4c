// SPDX-License-Identifier: MIT
// CUDA graphs: the work queued on one device's stream, captured once and replayed with a
// single launch (torch.cuda.CUDAGraph in miniature). Used directly, and by mt::compile's
// CUDA replay (kernels/compile/).
//
//   mt::cuda::Graph g;
//   g.capture_begin(0);          // cuda:0's work now goes to a capture stream
//   Tensor y = mt::silu(x);      // recorded, not run; y's memory comes from g's pool
//   g.capture_end();             // instantiated
//   g.replay();                  // runs the recorded kernels on the current stream;
//                                // y holds the result, x is read from the same address
//
// Interface fixed by the lead so that mt::compile and the CUDA-graph work can proceed in
// parallel; the implementation lives in graph.cpp (stub.cpp without CUDA: every call
// throws a clear mt::Error).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace mt::cuda {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts capturing the work that minitensor queues on cuda:index: a capture stream of
  // the graph's own becomes the device's current stream until capture_end, and the
  // caching allocator serves that stream's allocations from a private pool owned by the
  // graph (kept until the graph is destroyed, so replays write to the same addresses).
  // Throws if a capture is already in progress on the device or the graph was captured.
  void capture_begin(int index = 0);
  // Ends the capture, restores the previous current stream and instantiates the graph.
  // A failed capture (an operation that synchronizes, a sync read of a value) throws an
  // mt::Error naming the cause, and leaves the graph empty.
  void capture_end();
  // Launches the captured graph on the device's current stream (asynchronous, like a kernel).
  void replay();

  bool captured() const;
  int device_index() const;  // -1 before capture_begin
  size_t num_nodes() const;  // kernel, memcpy and memset nodes in the captured graph
  // Those nodes by kind, counted, in order of first appearance: "3 x memset",
  // "2 x kernel reduce_rows<float, ...>" (a kernel's name where the driver tells it,
  // CUDA 12.3 on; "kernel" alone otherwise). For MT_LOG=compile.
  std::vector<std::string> node_kinds() const;
  size_t pool_bytes() const;  // device memory held by the graph's private pool

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True while a Graph is capturing cuda:index (ops that would synchronize check it and
// throw instead of breaking the capture).
bool is_capturing(int index = 0);

}  // namespace mt::cuda
