// SPDX-License-Identifier: MIT
// The kernel cache: NVRTC results kept in memory and in files on disk, keyed by a
// SHA-256 of everything that changes the binary. Note [Kernel cache consistency]
// in cache.cpp says how files stay valid with several processes at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/jit/nvrtc.h"

namespace mt::jit {

// One compile: what compile() takes, as a value.
struct CompileRequest {
  std::string source;
  std::string name;  // "silu.cu"
  std::vector<std::string> name_expressions;
  std::vector<std::string> options = default_options();
  int arch = 0;  // compute capability, major * 10 + minor
  std::vector<Header> headers;
  bool arch_specific = false;  // sm_90a rather than sm_90 (Note [Arch-specific targets])
};

// 64 hex digits: SHA-256 over the cache format version, source, name, name
// expressions, options, NVRTC target (sm_90 / sm_90a / compute_90), NVRTC version and the
// headers. Needs NVRTC loaded (for the target and version).
std::string cache_key(const CompileRequest& request);

struct CacheConfig {
  std::string dir;  // empty: memory only
  uint64_t max_bytes = uint64_t(256) << 20;
  // MT_KERNEL_CACHE (a directory; "0" turns the disk cache off), else
  // $XDG_CACHE_HOME/minitensor/kernels, else ~/.cache/minitensor/kernels;
  // MT_KERNEL_CACHE_MAX_MB bounds it. Throws mt::Error on a malformed value.
  static CacheConfig from_env();
  // Print the first reason the disk cache cannot be used or written to stderr, once.
  bool warn = true;
  // One line a get() through the dispatcher's log sink: "[jit] compile|disk hit|memory hit
  // NAME ..." (MT_LOG=jit; KernelCache::set_log).
  bool log = false;
  // Append the disk events (disk hit, compile, write, eviction, corrupt entry) to
  // <dir>/events.log, which every process shares (Note [Kernel cache history]); on in
  // from_env(), so that `minitensor cache ls` can count hits across processes.
  bool event_log = false;
};

// One thing the kernel cache did (Note [Kernel cache history]).
struct CacheEvent {
  enum class Kind { MemoryHit, DiskHit, Compile, Write, WriteFailure, Eviction, Corrupt };
  Kind kind = Kind::MemoryHit;
  double time_s = 0;   // wall clock, seconds since the Unix epoch (logs of processes merge)
  std::string key;     // 64 hex digits
  std::string name;    // "silu.cu"; empty for an eviction (the file is not read)
  uint64_t bytes = 0;  // the binary (hit, compile, write), the file (eviction, corrupt)
};
// "memory_hit", "disk_hit", "compile", "write", "write_failure", "eviction", "corrupt".
const char* event_name(CacheEvent::Kind kind);

struct CacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t misses = 0;  // compiled by NVRTC
  uint64_t disk_writes = 0;
  uint64_t write_failures = 0;  // the disk could not take a file (the result is still used)
  uint64_t corrupt_files = 0;   // found invalid, deleted and recompiled
  uint64_t evictions = 0;       // removed to stay under max_bytes
  double compile_ms = 0;        // NVRTC time of the misses
  double disk_load_ms = 0;      // read + verify time of the disk hits
};

// One file of the disk cache, as `minitensor cache ls` shows it.
struct CacheEntryInfo {
  std::string key;
  std::string name;    // "silu.cu"
  std::string target;  // "sm_90", "sm_90a", "compute_90"
  int arch = 0;        // the request's compute capability, as stored
  std::string path;
  uint64_t size_bytes = 0;
  double age_s = 0;  // since last use (the file's mtime)
  bool valid = false;
  std::string problem;  // why not valid: "truncated", "checksum mismatch", ...
};

// Entry files larger than this are refused unread (a CUBIN is a few MiB at most).
constexpr uint64_t kMaxCacheEntryBytes = uint64_t(64) << 20;

class KernelCache {
 public:
  explicit KernelCache(CacheConfig config);
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The compiled result: from memory, else from disk, else from NVRTC (then stored).
  // Thread-safe; one key compiles once even when many threads ask at the same time.
  std::shared_ptr<const CompileResult> get(const CompileRequest& request);

  const CacheConfig& config() const { return config_; }
  bool disk_enabled() const { return !config_.dir.empty(); }
  void set_max_bytes(uint64_t max_bytes);
  void set_log(bool on) { log_.store(on); }
  CacheStats stats() const;
  void reset_stats();

  // The disk entries, least recently used first; each file fully verified.
  std::vector<CacheEntryInfo> list() const;
  // Total bytes of the entry files on disk.
  uint64_t disk_bytes() const;
  // Forgets everything in memory and deletes every cache file (stray temporaries, the event
  // log and the autotuner's autotune.tsv too).
  // Throws mt::Error with the reason when the directory is missing, is not a directory,
  // or a file could not be deleted.
  void clear();
  void clear_memory();

  // The disk layer on its own, for tests and the CLI. load() returns nothing for a
  // missing or invalid file, and deletes an invalid one; with `expect`, a file stored for
  // other options or another arch is invalid too. store() returns false (and counts a
  // write failure) when the file could not be written; `from` gives the options and
  // arch bound into the header (none: the file is bound by its key alone, and a load
  // with `expect` checks only that).
  std::string path_for(const std::string& key) const;
  std::optional<CompileResult> load(const std::string& key, const CompileRequest* expect = nullptr);
  bool store(const std::string& key, const CompileResult& result,
             const CompileRequest* from = nullptr);
  // The first reason the disk cache could not be used or written ("" when none so far):
  // an unwritable directory, one owned by another user or writable by others, an entry owned
  // by another user, a full disk.
  std::string disk_problem() const;
  // Deletes least recently used files until the total is at most max_bytes; never `keep`.
  void evict(const std::string& keep = {});

  // The event record of this cache object: off by default (off, it costs a relaxed atomic
  // load per get()); on, the last `max_events` events are kept. Turning it on clears it.
  void record_history(bool on, size_t max_events = 4096);
  std::vector<CacheEvent> history() const;
  // The disk events of every process that used this directory with `event_log` on, oldest
  // first, from <dir>/events.log (and the rotated events.log.1); malformed lines skipped.
  std::vector<CacheEvent> disk_log() const;

 private:
  struct Slot {
    std::mutex mutex;
    std::shared_ptr<const CompileResult> result;
  };
  void count(uint64_t CacheStats::*field, double CacheStats::*ms = nullptr, double value = 0);
  void note(CacheEvent::Kind kind, const std::string& key, const std::string& name, uint64_t bytes);
  void report(const std::string& problem);
  bool dir_usable();  // false (and reported) when the directory belongs to another user

  CacheConfig config_;
  std::atomic<bool> log_;
  mutable std::mutex mutex_;  // guards slots_, stats_ and config_.max_bytes
  std::unordered_map<std::string, std::shared_ptr<Slot>> slots_;
  CacheStats stats_;
  std::string disk_problem_;
  std::atomic<bool> recording_{false};
  size_t max_events_ = 4096;
  std::deque<CacheEvent> events_;  // guarded by mutex_
};

// "" when `dir` is missing, or is a directory of this user that only this user can write;
// else why neither the kernel cache nor the autotuner may trust a file in it.
std::string cache_dir_problem(const std::string& dir);

// The process's cache, configured from the environment on first use.
KernelCache& kernel_cache();

}  // namespace mt::jit
