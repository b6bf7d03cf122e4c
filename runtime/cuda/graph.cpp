// mt::cuda::Graph: a placeholder until the CUDA-graph implementation lands. Every call
// that would capture or replay throws, so code written against runtime/cuda/graph.h
// links and falls back (mt::compile runs its plan without a graph).
#include "runtime/cuda/graph.h"

#include "runtime/error.h"

namespace mt::cuda {

struct Graph::Impl {};

Graph::Graph() = default;
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

void Graph::capture_begin(int) { MT_ERROR("[cuda] Graph: CUDA graph capture is not implemented yet"); }
void Graph::capture_end() { MT_ERROR("[cuda] Graph: CUDA graph capture is not implemented yet"); }
void Graph::replay() { MT_ERROR("[cuda] Graph: CUDA graph capture is not implemented yet"); }
bool Graph::captured() const { return false; }
int Graph::device_index() const { return -1; }
size_t Graph::num_nodes() const { return 0; }
size_t Graph::pool_bytes() const { return 0; }

bool is_capturing(int) { return false; }

}  // namespace mt::cuda
