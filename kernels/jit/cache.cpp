// SPDX-License-Identifier: MIT
#include "kernels/jit/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "kernels/jit/sha256.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace mt::jit {

// Note [Kernel cache consistency]
// Each compiled module is one file, <dir>/<key>.mtk, where key is the SHA-256 of
// everything that changes the binary (see cache_key). A file holds a fixed
// header (magic, format version, sizes, key, checksum, arch, options digest), then
// metadata (name, target, lowered names, log), then the CUBIN or PTX; the checksum
// is a SHA-256 of the header fields before it, the arch, the options digest, the
// metadata and the payload, so a file renamed or with its key rewritten to stand for
// another kernel fails it.
//  - Writes never expose a partial file: a writer fills a temporary file of its
//    own (.tmp-<key>-<pid>-<n>, O_EXCL) in the same directory, then rename()s it
//    over <key>.mtk, which is atomic. Two processes storing one key both write
//    complete files with the same content; the last rename wins.
//  - Reads trust nothing: an entry that is not a regular file (a FIFO, a directory,
//    a link) or is larger than kMaxCacheEntryBytes is removed unread (opened with
//    O_NONBLOCK, checked by fstat first); a file whose size, magic, version, key,
//    checksum, arch, options, target or binary magic is wrong (truncated, a flipped bit, a crash
//    mid-write on a filesystem that reorders) is deleted and the module recompiled, never loaded.
//    The delete checks the inode first, so it cannot remove a good file that another process
//    renamed into place meanwhile.
//  - The directory is bounded (max_bytes) by least-recently-used eviction: a
//    hit sets the file's mtime to now; after each store the oldest files go
//    until the total fits. Eviction racing a reader is harmless: an open file
//    stays readable, and a file gone before open() is just a miss. Temporaries
//    left by a crashed writer are removed once they are an hour old.
//  - Whoever writes the directory chooses the CUBIN that gets loaded, so it is
//    created with mode 0700, and one owned by another user or writable by its group or
//    others (even with the sticky bit) is not used at all; an entry (or events.log) owned
//    by another user is never read: it is deleted and reported. A directory that cannot
//    be used or written is reported once, with the reason (docs/jit.md's threat model).
// No fsync: a file lost or torn by a power cut fails its checksum and recompiles.

// Note [Kernel cache history]
// What the cache did is recorded two ways, both for the pictures (`minitensor cache
// --plot`, docs/memory.md) and for `minitensor cache ls`'s hit counts:
//  - In memory, per KernelCache, when record_history(true) was called: every event
//    (memory hit, disk hit, compile, write, write failure, eviction, corrupt entry) in a
//    ring of the last max_events. Off, get() pays one relaxed atomic load.
//  - On disk, when the config's `log` is on (the process's cache from the environment):
//    the disk events, one line each ("<time> <kind> <key> <bytes> <name>"), appended to
//    <dir>/events.log with O_APPEND, so that lines of several processes interleave whole
//    (each is far below PIPE_BUF). Memory hits are not logged: they say nothing about the
//    directory, and they are the frequent ones. When the log passes kLogMaxBytes it is
//    renamed to events.log.1 (the older one dropped), so the two stay under twice that;
//    they are not counted against max_bytes and `cache clear` deletes them. A write that
//    fails is dropped silently: the log is a record, never a reason to fail a compile.
//    Readers trust nothing in it (a malformed line is skipped), and it lives in the same
//    0700 directory as the entries.

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'M', 'T', 'K', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 2;  // 2: arch and options digest, checksum over the header
constexpr size_t kKeySize = 64;         // hex digits
// magic, version, metadata size, payload size, key, checksum, arch, options digest
constexpr size_t kChecksumAt = 8 + 4 + 4 + 8 + kKeySize;
constexpr size_t kHeaderSize = kChecksumAt + 32 + 4 + 32;
constexpr const char* kSuffix = ".mtk";
constexpr const char* kTempPrefix = ".tmp-";
constexpr int64_t kStaleTempSeconds = 3600;
constexpr const char* kLogName = "events.log";
constexpr const char* kOldLogName = "events.log.1";
constexpr const char* kAutotuneName = "autotune.tsv";  // the autotuner's winners (autotune.cpp)
constexpr uint64_t kLogMaxBytes = uint64_t(256) << 10;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += char(uint8_t(v >> (8 * i)));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += char(uint8_t(v >> (8 * i)));
}
void put_str(std::string& out, std::string_view s) {
  put_u32(out, uint32_t(s.size()));
  out += s;
}

// Reads little-endian fields from a byte range; any overrun sets ok = false.
struct Reader {
  std::string_view data;
  size_t pos = 0;
  bool ok = true;
  uint64_t uint(int bytes) {
    if (pos + size_t(bytes) > data.size()) return ok = false, 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(data[pos + size_t(i)])) << (8 * i);
    pos += size_t(bytes);
    return v;
  }
  std::string_view bytes(size_t n) {
    if (pos + n > data.size()) return ok = false, std::string_view();
    std::string_view s = data.substr(pos, n);
    pos += n;
    return s;
  }
  std::string str() { return std::string(bytes(size_t(uint(4)))); }
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + '\n';
  return s;
}

// All zero for a file stored without its request (KernelCache::store without `from`): such
// a file is bound by its key alone.
Digest options_digest(const CompileRequest* r) { return r ? sha256(join(r->options)) : Digest{}; }

std::string_view as_view(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

// The checksum binds the header's fields (all but the checksum itself) to the contents.
Digest checksum(std::string_view head, std::string_view tail, std::string_view meta,
                std::string_view payload) {
  return Sha256().update(head).update(tail).update(meta).update(payload).finish();
}

std::string serialize(const std::string& key, const CompileResult& r, const CompileRequest* from) {
  std::string meta;
  put_str(meta, r.name);
  put_str(meta, r.target);
  put_str(meta, r.log);
  put_u64(meta, uint64_t(r.compile_ms * 1000.0));
  put_u32(meta, uint32_t(r.lowered_names.size()));
  for (const auto& l : r.lowered_names) put_str(meta, l.expression), put_str(meta, l.lowered);
  std::string head(kMagic, sizeof(kMagic));
  put_u32(head, kFormatVersion);
  put_u32(head, uint32_t(meta.size()));
  put_u64(head, uint64_t(r.binary.size()));
  head += key;
  std::string tail;
  put_u32(tail, uint32_t(from ? from->arch : 0));
  tail += as_view(options_digest(from));
  const Digest sum = checksum(head, tail, meta, r.binary);

  std::string out = head;
  out += as_view(sum);
  out += tail;
  out += meta;
  out += r.binary;
  return out;
}

// Parses and verifies a whole file; returns the problem, or "" when `out` is valid.
// With `expect`, the arch, options and kind of target (sm_90a or not) must be the request's.
std::string parse(std::string_view file, std::string_view key, CompileResult& out,
                  const CompileRequest* expect = nullptr, int* arch = nullptr) {
  if (file.size() < kHeaderSize) return "truncated header";
  Reader rd{file};
  if (rd.bytes(sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic))) return "bad magic";
  if (rd.uint(4) != kFormatVersion) return "unknown format version";
  const uint64_t meta_size = rd.uint(4);
  const uint64_t payload_size = rd.uint(8);
  const std::string_view file_key = rd.bytes(kKeySize);
  const std::string_view sum = rd.bytes(32);
  const std::string_view tail = rd.bytes(4 + 32);
  const uint32_t file_arch = uint32_t(Reader{tail}.uint(4));
  if (arch) *arch = int(file_arch);
  if (meta_size > file.size() || payload_size > file.size()) return "truncated";
  if (kHeaderSize + meta_size + payload_size != file.size())
    return file.size() < kHeaderSize + meta_size + payload_size ? "truncated" : "trailing bytes";
  if (!key.empty() && file_key != key) return "key mismatch";
  const std::string_view meta = rd.bytes(meta_size);
  const std::string_view payload = rd.bytes(payload_size);
  if (sum != as_view(checksum(file.substr(0, kChecksumAt), tail, meta, payload)))
    return "checksum mismatch";
  const bool bound = tail.substr(4) != as_view(Digest{});
  if (expect && bound && file_arch != uint32_t(expect->arch)) return "arch mismatch";
  if (expect && bound && tail.substr(4) != as_view(options_digest(expect)))
    return "options mismatch";

  Reader m{meta};
  out.name = m.str();
  out.target = m.str();
  out.log = m.str();
  out.compile_ms = double(m.uint(8)) / 1000.0;
  const uint64_t n = m.uint(4);
  out.lowered_names.clear();
  for (uint64_t i = 0; i < n && m.ok; ++i) {
    LoweredName l;
    l.expression = m.str();
    l.lowered = m.str();
    out.lowered_names.push_back(std::move(l));
  }
  if (!m.ok || m.pos != meta.size()) return "malformed metadata";
  // The key covers the target already; this refuses an entry renamed to another key.
  if (expect && out.target.ends_with('a') != expect->arch_specific) return "target mismatch";
  out.binary.assign(payload);
  if (out.is_cubin() ? !out.binary.starts_with("\177ELF")
                     : (out.binary.empty() || out.binary.back() != '\0'))
    return out.is_cubin() ? "payload is not an ELF CUBIN" : "payload is not PTX text";
  return "";
}

std::string errno_text(int err) { return std::strerror(err); }

// What reading one entry found.
struct EntryRead {
  bool missing = false;    // no such file: a plain miss
  bool removable = false;  // an entry that must go: not a regular file, too large, foreign
  bool foreign = false;    // owned by another user: planted, never loaded
  std::string problem;     // "" when `bytes` holds the whole file
  struct stat st {};
};

// Reads one entry without trusting it: never blocks (a FIFO), never follows a link,
// checks the type and size by fstat before reading, reads at most that many bytes, and
// tells a read error from the end of the file.
EntryRead read_entry(const std::string& path, std::string& bytes) {
  EntryRead e;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      e.missing = true;
      e.problem = "missing";
    } else if (err == ELOOP && ::lstat(path.c_str(), &e.st) == 0) {
      e.removable = true;
      e.problem = "not a regular file (a symbolic link)";
    } else {
      e.problem = "cannot open: " + errno_text(err);
    }
    return e;
  }
  if (::fstat(fd, &e.st) != 0) {
    e.problem = "cannot stat: " + errno_text(errno);
  } else if (e.st.st_uid != ::geteuid()) {
    e.removable = e.foreign = true;
    e.problem = fmt::format("owned by uid {}, not by this user (uid {})", e.st.st_uid, ::geteuid());
  } else if (!S_ISREG(e.st.st_mode)) {
    e.removable = true;
    e.problem = S_ISDIR(e.st.st_mode)    ? "not a regular file (a directory)"
                : S_ISFIFO(e.st.st_mode) ? "not a regular file (a FIFO)"
                                         : "not a regular file";
  } else if (uint64_t(e.st.st_size) > kMaxCacheEntryBytes) {
    e.removable = true;
    e.problem = fmt::format("too large ({} bytes; an entry is at most {})", e.st.st_size,
                            kMaxCacheEntryBytes);
  } else {
    bytes.resize(size_t(e.st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        e.problem = "read error: " + errno_text(errno);
        break;
      }
      if (r == 0) break;  // the file shrank: parse() reports it truncated
      got += size_t(r);
    }
    bytes.resize(got);
  }
  ::close(fd);
  return e;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data.remove_prefix(size_t(w));
  }
  return true;
}

// Removes `path` only if it is still the entry (inode) that was read; a directory
// only when it is empty (rmdir), never recursively.
void remove_if_same(const std::string& path, const struct stat& seen) {
  struct stat now;
  if (::lstat(path.c_str(), &now) == 0 && now.st_ino == seen.st_ino && now.st_dev == seen.st_dev) {
    if (S_ISDIR(now.st_mode))
      ::rmdir(path.c_str());
    else
      ::unlink(path.c_str());
  }
}

// mkdir -p with mode 0700 for every directory it creates; returns the problem or "".
std::string make_dirs(const std::string& dir) {
  fs::path sofar;
  for (const fs::path& part : fs::path(dir)) {
    sofar /= part;
    if (::mkdir(sofar.c_str(), 0700) != 0 && errno != EEXIST)
      return fmt::format("cannot create '{}': {}", sofar.string(), errno_text(errno));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("cannot stat it: {}", errno_text(errno));
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  return "";
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
double mtime_s(const struct stat& st) {
  return double(st.st_mtim.tv_sec) + 1e-9 * double(st.st_mtim.tv_nsec);
}

bool is_entry_name(std::string_view n) {
  return n.size() == kKeySize + 4 && n.ends_with(kSuffix) &&
         n.find_first_not_of("0123456789abcdef") == kKeySize;
}

constexpr std::pair<CacheEvent::Kind, const char*> kEventNames[] = {
    {CacheEvent::Kind::MemoryHit, "memory_hit"},
    {CacheEvent::Kind::DiskHit, "disk_hit"},
    {CacheEvent::Kind::Compile, "compile"},
    {CacheEvent::Kind::Write, "write"},
    {CacheEvent::Kind::WriteFailure, "write_failure"},
    {CacheEvent::Kind::Eviction, "eviction"},
    {CacheEvent::Kind::Corrupt, "corrupt"},
};

// One log line; the name with every byte outside printable ASCII (and space) as '?'.
std::string log_line(const CacheEvent& e) {
  std::string name = e.name.empty() ? "-" : e.name.substr(0, 200);
  for (char& c : name)
    if (c <= ' ' || c > '~') c = '?';
  return fmt::format("{:.6f} {} {} {} {}\n", e.time_s, event_name(e.kind), e.key, e.bytes, name);
}

void append_log(const std::string& dir, const CacheEvent& e) {
  const std::string path = dir + "/" + kLogName;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) > kLogMaxBytes)
    ::rename(path.c_str(), (dir + "/" + kOldLogName).c_str());
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) return;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid())
    write_all(fd, log_line(e));
  ::close(fd);
}

void parse_log(std::string_view text, std::vector<CacheEvent>& out) {
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    if (eol == std::string_view::npos) break;  // a torn last line
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol + 1);
    std::string_view f[5];
    int n = 0;
    while (n < 5 && !line.empty()) {
      const size_t sp = n == 4 ? std::string_view::npos : line.find(' ');
      f[n++] = line.substr(0, sp);
      line = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
    }
    if (n != 5 || f[2].size() != kKeySize ||
        f[2].find_first_not_of("0123456789abcdef") != std::string_view::npos)
      continue;
    CacheEvent e;
    const auto* kind = std::find_if(std::begin(kEventNames), std::end(kEventNames),
                                    [&](const auto& k) { return f[1] == k.second; });
    if (kind == std::end(kEventNames)) continue;
    e.kind = kind->first;
    const std::string t(f[0]);
    char* end = nullptr;
    e.time_s = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size() || !std::isfinite(e.time_s)) continue;
    if (std::from_chars(f[3].data(), f[3].data() + f[3].size(), e.bytes).ec != std::errc())
      continue;
    e.key = std::string(f[2]);
    e.name = f[4] == "-" ? "" : std::string(f[4]);
    out.push_back(std::move(e));
  }
}

struct DiskFile {
  std::string path, name;
  uint64_t size;
  double mtime;
  bool regular;
};

// The entries of `dir` (regular or not), least recently used first; also removes stale
// temporaries. lstat only: nothing is opened here.
std::vector<DiskFile> scan(const std::string& dir) {
  std::vector<DiskFile> files;
  std::error_code ec;
  const double now = now_s();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    const bool regular = S_ISREG(st.st_mode);
    if (is_entry_name(name)) {
      files.push_back({path, name, regular ? uint64_t(st.st_size) : 0, mtime_s(st), regular});
    } else if (!regular) {
      continue;
    } else if (name.starts_with(kTempPrefix) && now - mtime_s(st) > kStaleTempSeconds) {
      ::unlink(path.c_str());
    }
  }
  std::sort(files.begin(), files.end(), [](const DiskFile& a, const DiskFile& b) {
    return a.mtime != b.mtime ? a.mtime < b.mtime : a.name < b.name;
  });
  return files;
}

// The headers a compile sees, hashed; the embedded ones alone only once.
std::string headers_digest(const std::vector<Header>& user) {
  auto digest = [](const std::vector<Header>& headers) {
    Sha256 h;
    for (const auto& hd : headers) h.field(hd.name).field(hd.text);
    return to_hex(h.finish());
  };
  if (!user.empty()) return digest(all_headers(user));
  static const std::string embedded = digest(all_headers({}));
  return embedded;
}

}  // namespace

std::string cache_dir_problem(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return "";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format(
        "it is owned by uid {}, not by this user (uid {}), and whoever can write it chooses "
        "the kernels that get loaded",
        st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format(
        "it is writable by {} (mode {:04o}), and whoever can write it chooses the kernels that "
        "get loaded; chmod 700 it",
        (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "its group and others"
        : (st.st_mode & S_IWGRP)                         ? "its group"
                                                         : "others",
        st.st_mode & 07777);
  return "";
}

std::string cache_key(const CompileRequest& r) {
  const NvrtcVersion v = nvrtc_version();
  Sha256 h;
  h.field("minitensor kernel cache").field(std::to_string(kFormatVersion));
  h.field(r.source).field(r.name);
  h.field(join(r.name_expressions)).field(join(r.options));
  h.field(nvrtc_target(r.arch, r.arch_specific, r.name))
      .field(fmt::format("nvrtc {}.{}", v.major, v.minor));
  h.field(headers_digest(r.headers));
  return to_hex(h.finish());
}

CacheConfig CacheConfig::from_env() {
  CacheConfig c;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (const std::string d = env("MT_KERNEL_CACHE"); !d.empty()) {
    c.dir = d == "0" ? "" : d;
  } else if (const std::string x = env("XDG_CACHE_HOME"); !x.empty()) {
    c.dir = x + "/minitensor/kernels";
  } else if (const std::string home = env("HOME"); !home.empty()) {
    c.dir = home + "/.cache/minitensor/kernels";
  }
  // MT_LOG is a comma list of words; the dispatcher reads (and warns about) the others.
  std::string log = "," + env("MT_LOG") + ",";
  std::erase(log, ' ');
  c.log = log.find(",jit,") != std::string::npos;
  c.event_log = true;
  if (const std::string mb = env("MT_KERNEL_CACHE_MAX_MB"); !mb.empty()) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(mb.data(), mb.data() + mb.size(), v);
    MT_CHECK(ec == std::errc() && p == mb.data() + mb.size() && v < (uint64_t(1) << 40),
             "[jit] MT_KERNEL_CACHE_MAX_MB='{}' is not a size in MiB; set it to a whole number "
             "such as 256, or unset it",
             mb);
    c.max_bytes = v << 20;
  }
  return c;
}

KernelCache::KernelCache(CacheConfig config) : config_(std::move(config)), log_(config_.log) {}

namespace {
// MT_LOG=jit: which level served a request, one line a get().
void log_get(std::string_view level, const CompileRequest& r, const std::string& key, double ms) {
  const size_t n = r.name_expressions.size();
  const std::string kernels = n == 0 ? std::string()
                              : n == 1
                                  ? fmt::format(" [{}]", r.name_expressions[0])
                                  : fmt::format(" [{} and {} more]", r.name_expressions[0], n - 1);
  mt::detail::log_line(fmt::format("[jit] {:<10} {}{} for {}{} (key {})", level, r.name, kernels,
                                   nvrtc_target(r.arch, r.arch_specific, r.name),
                                   ms >= 0 ? fmt::format(", {:.1f} ms", ms) : "",
                                   key.substr(0, 16)));
}
}  // namespace

const char* event_name(CacheEvent::Kind kind) {
  for (const auto& [k, name] : kEventNames)
    if (k == kind) return name;
  return "unknown";
}

void KernelCache::note(CacheEvent::Kind kind, const std::string& key, const std::string& name,
                       uint64_t bytes) {
  const bool recording = recording_.load(std::memory_order_relaxed);
  const bool logging = config_.event_log && disk_enabled() && kind != CacheEvent::Kind::MemoryHit;
  if (!recording && !logging) [[likely]]
    return;
  CacheEvent e{kind, now_s(), key, name, bytes};
  if (logging && cache_dir_problem(config_.dir).empty() && make_dirs(config_.dir).empty())
    append_log(config_.dir, e);
  if (recording) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(e));
    while (events_.size() > max_events_) events_.pop_front();
  }
}

void KernelCache::record_history(bool on, size_t max_events) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
  max_events_ = std::max<size_t>(1, max_events);
  recording_.store(on, std::memory_order_relaxed);
}

std::vector<CacheEvent> KernelCache::history() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {events_.begin(), events_.end()};
}

std::vector<CacheEvent> KernelCache::disk_log() const {
  std::vector<CacheEvent> out;
  if (!disk_enabled() || !cache_dir_problem(config_.dir).empty()) return out;
  for (const char* name : {kOldLogName, kLogName}) {
    std::string bytes;
    if (read_entry(config_.dir + "/" + name, bytes).problem.empty()) parse_log(bytes, out);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const CacheEvent& a, const CacheEvent& b) { return a.time_s < b.time_s; });
  return out;
}

void KernelCache::count(uint64_t CacheStats::*field, double CacheStats::*ms, double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++(stats_.*field);
  if (ms) stats_.*ms += value;
}

std::shared_ptr<const CompileResult> KernelCache::get(const CompileRequest& r) {
  const std::string key = cache_key(r);
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = slots_[key];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  // One thread fills a slot; the others wait here for its result (or its error).
  std::lock_guard<std::mutex> fill(slot->mutex);
  if (slot->result) {
    count(&CacheStats::memory_hits);
    if (log_) log_get("memory hit", r, key, -1);
    note(CacheEvent::Kind::MemoryHit, key, r.name, slot->result->binary.size());
    return slot->result;
  }
  if (disk_enabled()) {
    const auto start = std::chrono::steady_clock::now();
    if (std::optional<CompileResult> res = load(key, &r)) {
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      count(&CacheStats::disk_hits, &CacheStats::disk_load_ms, ms);
      if (log_) log_get("disk hit", r, key, ms);
      note(CacheEvent::Kind::DiskHit, key, r.name, res->binary.size());
      slot->result = std::make_shared<const CompileResult>(std::move(*res));
      return slot->result;
    }
  }
  CompileResult res =
      compile(r.source, r.name, r.name_expressions, r.options, r.arch, r.headers, r.arch_specific);
  count(&CacheStats::misses, &CacheStats::compile_ms, res.compile_ms);
  if (log_) log_get("compile", r, key, res.compile_ms);
  note(CacheEvent::Kind::Compile, key, r.name, res.binary.size());
  if (disk_enabled() && store(key, res, &r)) evict(key);
  slot->result = std::make_shared<const CompileResult>(std::move(res));
  return slot->result;
}

std::string KernelCache::path_for(const std::string& key) const {
  return config_.dir + "/" + key + kSuffix;
}

void KernelCache::report(const std::string& problem) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first = disk_problem_.empty();
    if (first) disk_problem_ = problem;
  }
  if (first && config_.warn)
    std::fprintf(stderr,
                 "minitensor: [jit] the kernel cache in '%s' cannot be used or written: %s; the "
                 "kernels it lacks are compiled again in each process (set MT_KERNEL_CACHE to a "
                 "directory of your own, or to 0 to keep kernels in memory only)\n",
                 config_.dir.c_str(), problem.c_str());
}

std::string KernelCache::disk_problem() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return disk_problem_;
}

bool KernelCache::dir_usable() {
  const std::string problem = cache_dir_problem(config_.dir);
  if (problem.empty()) return true;
  report(problem);
  return false;
}

std::optional<CompileResult> KernelCache::load(const std::string& key,
                                               const CompileRequest* expect) {
  if (!disk_enabled() || !dir_usable()) return std::nullopt;
  const std::string path = path_for(key);
  std::string bytes;
  const EntryRead e = read_entry(path, bytes);
  if (e.missing) return std::nullopt;
  CompileResult res;
  const std::string problem = e.problem.empty() ? parse(bytes, key, res, expect) : e.problem;
  if (problem.empty()) {
    if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0)  // most recently used now
      report(fmt::format("cannot update '{}': {}", path, errno_text(errno)));
    return res;
  }
  count(&CacheStats::corrupt_files);
  note(CacheEvent::Kind::Corrupt, key, "", bytes.size());
  // A regular file that fails its checks, or an entry that is not one, goes; a file
  // that could not be read (EIO, EACCES) stays and is reported.
  if (e.problem.empty() || e.removable) remove_if_same(path, e.st);
  if (!e.problem.empty() && (e.foreign || !e.removable))
    report(fmt::format("'{}': {}", path, problem));
  return std::nullopt;
}

bool KernelCache::store(const std::string& key, const CompileResult& result,
                        const CompileRequest* from) {
  if (!disk_enabled() || !dir_usable()) return false;
  static std::atomic<uint64_t> counter{0};
  std::string problem = make_dirs(config_.dir);
  if (problem.empty()) problem = cache_dir_problem(config_.dir);
  const std::string tmp =
      fmt::format("{}/{}{}-{}-{}", config_.dir, kTempPrefix, key, ::getpid(), counter.fetch_add(1));
  if (problem.empty()) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      problem = fmt::format("cannot create a file in it: {}", errno_text(errno));
    } else {
      if (!write_all(fd, serialize(key, result, from)))
        problem = fmt::format("cannot write '{}': {}", tmp, errno_text(errno));
      if (::close(fd) != 0 && problem.empty())
        problem = fmt::format("cannot write '{}': {}", tmp, errno_text(errno));
      if (problem.empty() && ::rename(tmp.c_str(), path_for(key).c_str()) != 0)
        problem = fmt::format("cannot rename a file to '{}': {}", path_for(key), errno_text(errno));
      if (!problem.empty()) ::unlink(tmp.c_str());
    }
  }
  const bool ok = problem.empty();
  count(ok ? &CacheStats::disk_writes : &CacheStats::write_failures);
  note(ok ? CacheEvent::Kind::Write : CacheEvent::Kind::WriteFailure, key, result.name,
       result.binary.size());
  if (!ok) report(problem);
  return ok;
}

void KernelCache::evict(const std::string& keep) {
  if (!disk_enabled()) return;
  uint64_t max_bytes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    max_bytes = config_.max_bytes;
  }
  std::vector<DiskFile> files = scan(config_.dir);
  uint64_t total = 0;
  for (const auto& f : files) total += f.size;  // 0 for an entry that is not a regular file
  const std::string keep_name = keep.empty() ? "" : keep + kSuffix;
  for (const auto& f : files) {
    if (total <= max_bytes) break;
    if (f.name == keep_name || !f.regular) continue;
    if (::unlink(f.path.c_str()) == 0) {
      count(&CacheStats::evictions);
      note(CacheEvent::Kind::Eviction, f.name.substr(0, kKeySize), "", f.size);
      total -= f.size;
    } else if (errno == ENOENT) {
      total -= f.size;  // another process evicted it
    }
  }
}

void KernelCache::set_max_bytes(uint64_t max_bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    config_.max_bytes = max_bytes;
  }
  evict();
}

CacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void KernelCache::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = {};
}

std::vector<CacheEntryInfo> KernelCache::list() const {
  std::vector<CacheEntryInfo> out;
  if (!disk_enabled()) return out;
  const double now = now_s();
  for (const auto& f : scan(config_.dir)) {
    CacheEntryInfo e;
    e.key = f.name.substr(0, kKeySize);
    e.path = f.path;
    e.size_bytes = f.size;
    e.age_s = std::max(0.0, now - f.mtime);
    std::string bytes;
    const EntryRead rd = read_entry(f.path, bytes);
    e.problem = rd.problem;
    if (e.problem.empty()) {
      CompileResult r;
      e.problem = parse(bytes, e.key, r, nullptr, &e.arch);
      e.name = r.name;
      e.target = r.target;
    }
    e.valid = e.problem.empty();
    out.push_back(std::move(e));
  }
  return out;
}

uint64_t KernelCache::disk_bytes() const {
  uint64_t total = 0;
  if (disk_enabled())
    for (const auto& f : scan(config_.dir)) total += f.size;
  return total;
}

void KernelCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.clear();
}

void KernelCache::clear() {
  clear_memory();
  if (!disk_enabled()) return;
  const std::string& dir = config_.dir;
  struct stat st;
  MT_CHECK(::stat(dir.c_str(), &st) == 0, "[jit] cannot clear the kernel cache '{}': {}", dir,
           errno_text(errno));
  MT_CHECK(S_ISDIR(st.st_mode),
           "[jit] cannot clear the kernel cache '{}': it is not a directory; set "
           "MT_KERNEL_CACHE to the cache directory",
           dir);
  std::error_code ec;
  size_t failed = 0;
  std::string first_error;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_entry_name(name) && !name.starts_with(kTempPrefix) && name != kLogName &&
        name != kOldLogName && name != kAutotuneName)
      continue;
    struct stat est;
    const bool is_dir = ::lstat(it->path().c_str(), &est) == 0 && S_ISDIR(est.st_mode);
    if ((is_dir ? ::rmdir(it->path().c_str()) : ::unlink(it->path().c_str())) != 0 &&
        errno != ENOENT) {
      if (failed++ == 0)
        first_error = fmt::format("'{}': {}", it->path().string(), errno_text(errno));
    }
  }
  MT_CHECK(!ec, "[jit] cannot clear the kernel cache '{}': {}", dir, ec.message());
  MT_CHECK(failed == 0,
           "[jit] could not delete {} entr{} of the kernel cache (first {}); check the "
           "directory's permissions",
           failed, failed == 1 ? "y" : "ies", first_error);
}

KernelCache& kernel_cache() {
  static KernelCache cache(CacheConfig::from_env());
  return cache;
}

}  // namespace mt::jit

namespace mt::jit {
void set_cache_log(bool on) { kernel_cache().set_log(on); }
}  // namespace mt::jit
