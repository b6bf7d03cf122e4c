// SPDX-License-Identifier: MIT
// The CPU kernels' threads: the thread count (MT_NUM_THREADS, OMP_NUM_THREADS, the cores
// this process may run on) and the library's own pool behind parallel_for.
//
// Note [The CPU thread pool]
// One pool runs every parallel loop of the library, matmul's included: OpenBLAS is told
// to use one thread, and parallel matmuls are cut into row (or column) blocks, one cblas
// call each, on this pool. Two pools (OpenMP's and OpenBLAS's), each spinning between its
// own jobs, took the cores from each other.
//  - The caller works too. A job is cut into chunks (at least `grain` items, at most
//    kChunksPerThread per thread) that every participant claims from one atomic word,
//    caller included; the caller waits only for chunks a worker has claimed and not yet
//    finished. A worker that is not running (another process has its core) never holds
//    the caller up: the caller takes its chunks. With static halves (OpenMP's schedule),
//    a 2^20-float SiLU on 2 busy cores took 60x its single-thread time, waiting for the
//    descheduled half.
//  - Workers spin at most kSpinMicros after a job (the next op usually comes sooner),
//    then sleep on a futex (std::atomic::wait): no thread burns a core between ops.
//  - A job publishes (job id, next chunk) in one 64-bit word; a claim is a compare-and-
//    swap on it, so a worker that wakes late fails its claim instead of reading a job
//    that has ended. The job's fields are only read after a successful claim, which
//    keeps the job alive until the chunk is done.
//  - One caller at a time: a second thread calling while a job runs, or a kernel
//    calling parallel_for from inside a chunk, runs its loop on its own thread.
//  - Threads that cannot be started (no memory, a thread limit) leave the caller to do
//    the work alone. The pool is never destroyed: workers may outlive main() (detached).
//  - When the threads stop paying (a job took as long as the caller's pace says one thread
//    would have, or the caller waited for a worker longer than half its own work: the
//    workers' cores are taken, or the loop is memory-bound), the next parallel loops run
//    on the caller alone: 1 after the first such job, doubling up to 256 while the loops
//    that try threads again (probes) still do not pay, halving when one does (a probe
//    that does not pay can cost a time slice; one that pays saves less than half a job).
//    Counted in loops, not time: a pause of some milliseconds covered one or two calls of
//    a multi-millisecond matmul, and most calls were probes. A
//    worker descheduled in the middle of a chunk makes the caller wait until the
//    scheduler runs it again, a whole time slice of the other load (several ms): with
//    busy loops beside them, a 512^3 matmul on 2 threads took 2x to 8x its 1-thread time
//    before this.
//  - An exception in a chunk (std::bad_alloc included) is caught there, the remaining
//    chunks are skipped, and the caller rethrows it as an mt::Error.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

#ifdef MT_HAVE_CBLAS
#include <cblas.h>  // OpenBLAS's defines OPENBLAS_VERSION and openblas_set_num_threads
#endif

namespace mt::cpu {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kChunksPerThread = 4;
constexpr int kSpinMicros = 30;

// The CPUs this process may run on (taskset, cgroups' cpusets), else the hardware's.
int usable_cpus() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1, int(std::thread::hardware_concurrency()));
}

// A positive integer (the first of a comma list, as OMP_NUM_THREADS allows), else 0.
int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return 0;
  std::string_view text(v);
  text = text.substr(0, text.find(','));
  long long n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range && end == text.data() + text.size()) return kMaxThreads;
  if (ec != std::errc() || end != text.data() + text.size() || n < 1) return 0;
  return int(std::min<long long>(n, kMaxThreads));
}

std::atomic<int> g_threads{0};  // 0: not yet read from the environment

void single_threaded_blas() {
#ifdef OPENBLAS_VERSION
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
#endif
}

using Clock = std::chrono::steady_clock;

thread_local bool t_in_chunk = false;  // this thread is running a chunk (any pool job)

struct alignas(64) Worker {
  std::atomic<uint32_t> wake{0};  // bumped for each job; the futex word
  std::atomic<bool> sleeping{false};
};

class Pool {
 public:
  // Runs fn over [0, n) in chunks on up to `threads` threads; false if the pool is busy
  // (the caller then runs the loop itself).
  bool run(int64_t n, int64_t grain, int threads, detail::RangeFn fn, void* ctx) {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (skip_ > 0) {
      --skip_;
      return false;
    }
    const Clock::time_point t0 = Clock::now();
    const int workers = start_workers(threads - 1);
    if (workers == 0) return false;
    const int64_t most = int64_t(workers + 1) * kChunksPerThread;
    // at most 0xffff: the count travels in the claim word (below)
    const int64_t nchunks = std::min<int64_t>({(n + grain - 1) / grain, most, int64_t(0xffff)});
    chunk_.store((n + nchunks - 1) / nchunks, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    nchunks_.store(nchunks, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t job = ++job_ & 0xffffffffu;
    // The job's chunk count is in the claim word with it: a worker still holding the
    // previous job's exhausted word (its next == its count) can then never claim a chunk
    // of this one while the fields above are being set, whatever nchunks_ says by then.
    claim_.store(job << 32 | uint64_t(nchunks) << 16, std::memory_order_release);
    // Wake as many workers as the chunks can use, beyond the caller.
    const int wake = int(std::min<int64_t>(workers, nchunks - 1));
    for (int i = 0; i < wake; ++i) {
      Worker& w = *slots_[size_t(i)];
      w.wake.fetch_add(1, std::memory_order_seq_cst);
      if (w.sleeping.load(std::memory_order_seq_cst)) w.wake.notify_one();
    }
    const int64_t mine = work(job);
    const Clock::time_point t1 = Clock::now();
    wait_done(nchunks);
    const Clock::time_point t2 = Clock::now();
    auto ns = [](Clock::duration d) {
      return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
    };
    backoff_ = detail::next_backoff(backoff_, ns(t2 - t0), ns(t1 - t0), mine, nchunks);
    skip_ = backoff_;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // Claims and runs chunks of job `job` until none is left; returns how many it ran.
  int64_t work(uint64_t job) {
    int64_t ran = 0;
    uint64_t word = claim_.load(std::memory_order_acquire);
    for (;;) {
      if ((word >> 32) != job) return ran;
      const int64_t c = int64_t(word & 0xffffu), count = int64_t(word >> 16 & 0xffffu);
      if (c >= count) return ran;
      if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        continue;
      run_chunk(c);
      ++ran;
      word = claim_.load(std::memory_order_acquire);
    }
  }

  void run_chunk(int64_t c) {
    if (!failed_.load(std::memory_order_relaxed)) {
      const int64_t chunk = chunk_.load(std::memory_order_relaxed);
      const int64_t b = c * chunk, e = std::min(n_.load(std::memory_order_relaxed), b + chunk);
      t_in_chunk = true;
      try {
        if (b < e) fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), b, e);
      } catch (...) {  // an exception must not leave a thread: carried to the caller
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
      t_in_chunk = false;
    }
    const int64_t nchunks = nchunks_.load(std::memory_order_relaxed);
    if (int64_t(done_.fetch_add(1, std::memory_order_acq_rel)) + 1 == nchunks) done_.notify_one();
  }

  // The caller: every chunk is claimed; wait for those still running on workers.
  void wait_done(int64_t nchunks) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 0;; ++i) {
      const uint32_t d = done_.load(std::memory_order_acquire);
      if (int64_t(d) == nchunks) return;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) {
        done_.wait(d, std::memory_order_acquire);
      } else {
        pause();
      }
    }
  }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // Starts workers up to `want` (under mutex_); returns how many there are.
  int start_workers(int want) {
    while (int(threads_) < want) {
      auto* w = new Worker;  // never freed, like the pool
      try {
        std::thread([this, w] { worker_loop(*w); }).detach();
      } catch (const std::system_error&) {  // no memory or a thread limit: fewer workers
        delete w;
        break;
      }
      slots_.push_back(w);
      ++threads_;
    }
    return std::min(want, int(threads_));
  }

  void worker_loop(Worker& w) {
    uint32_t seen = 0;
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
      for (int i = 0; w.wake.load(std::memory_order_acquire) == seen; ++i) {
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) {
          w.sleeping.store(true, std::memory_order_seq_cst);
          w.wake.wait(seen, std::memory_order_seq_cst);
          w.sleeping.store(false, std::memory_order_relaxed);
        } else {
          pause();
        }
      }
      seen = w.wake.load(std::memory_order_acquire);
      work(claim_.load(std::memory_order_acquire) >> 32);
    }
  }

  std::mutex mutex_;                // one caller at a time; guards the rest up to claim_
  int64_t backoff_ = 0, skip_ = 0;  // parallel loops to run on the caller alone
  std::vector<Worker*> slots_;
  size_t threads_ = 0;
  uint64_t job_ = 0;
  alignas(64) std::atomic<uint64_t> claim_{0};  // job id << 32 | chunks << 16 | next chunk
  alignas(64) std::atomic<uint32_t> done_{0};   // chunks finished
  std::atomic<int64_t> n_{0}, chunk_{0}, nchunks_{0};
  std::atomic<detail::RangeFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: detached workers use it until exit
  return *p;
}

}  // namespace

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  n = detail::threads_from_environment();
  single_threaded_blas();
  g_threads.store(n, std::memory_order_relaxed);
  return n;
}

void set_num_threads(int n) {
  MT_CHECK(n >= 1, "[set_num_threads] the number of threads must be at least 1, got {}", n);
  MT_CHECK(n <= kMaxThreads, "[set_num_threads] {} threads is more than the {} this library runs",
           n, kMaxThreads);
  single_threaded_blas();
  g_threads.store(n, std::memory_order_relaxed);
}

namespace detail {

int64_t next_backoff(int64_t backoff, int64_t job, int64_t callers, int64_t callers_chunks,
                     int64_t chunks) {
  constexpr int64_t kMost = 256;
  if (callers_chunks <= 0) return backoff;  // no estimate
  // The caller's pace, for every chunk: about what one thread alone would have taken.
  const double alone = double(callers) * double(chunks) / double(callers_chunks);
  // Threads that did not pay, or a caller that waited for a worker longer than half its
  // own work (a worker descheduled in a chunk; the pace above misleads when the caller
  // itself was descheduled in its chunks).
  if (double(job) >= alone || 2 * (job - callers) > callers)
    return backoff == 0 ? 1 : std::min(2 * backoff, kMost);
  if (double(job) < 0.9 * alone) return backoff / 2;
  return backoff;
}

int threads_from_environment() {
  const int cpus = usable_cpus();
  for (const char* name : {"MT_NUM_THREADS", "OMP_NUM_THREADS"})
    if (int n = env_threads(name)) return std::min(n, cpus);  // more threads than cores only lose
  return cpus;
}

void rethrow_as_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc& b) {
    MT_ERROR(
        "[cpu] out of memory inside a CPU kernel's loop ({}); free memory or use smaller "
        "tensors",
        b.what());
  } catch (const std::exception& x) {
    MT_ERROR("[cpu] a CPU kernel's loop threw {}", x.what());
  } catch (...) {
    MT_ERROR("[cpu] a CPU kernel's loop threw an exception that is not a std::exception");
  }
}

void parallel_for_impl(int64_t n, int64_t grain, RangeFn fn, void* ctx) {
  grain = std::max<int64_t>(grain, 1);
  const int threads = int(std::min<int64_t>(num_threads(), (n + grain - 1) / grain));
  try {
    if (threads > 1 && !t_in_chunk && pool().run(n, grain, threads, fn, ctx)) return;
    fn(ctx, 0, n);
  } catch (...) {
    rethrow_as_error(std::current_exception());
  }
}

}  // namespace detail
}  // namespace mt::cpu
