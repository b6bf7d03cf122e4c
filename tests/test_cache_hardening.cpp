// SPDX-License-Identifier: MIT
// The kernel cache against hostile or broken directories: entries swapped between kernels,
// FIFOs, directories, huge sparse files, unwritable and foreign directories. Most cases
// store made-up results under made-up keys and need no NVRTC; the ones through get() do.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "child.h"
#include "helpers.h"
#include "kernels/jit/cache.h"
#include "kernels/jit/nvrtc.h"
#include "runtime/error.h"

namespace fs = std::filesystem;
using namespace mt::jit;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_test_cache_XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    REQUIRE(p != nullptr);
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

std::string key_of(char c) { return std::string(64, c); }

// A made-up CUBIN result: enough for the file format, which checks only the ELF magic.
CompileResult fake_result(const std::string& tag) {
  CompileResult r;
  r.name = "fake.cu";
  r.target = "sm_90";
  r.binary = "\177ELF fake cubin " + tag;
  r.lowered_names = {{"fake<float>", "_Z4fakeIfEvPT_"}};
  return r;
}

CompileRequest request(int arch, std::vector<std::string> options) {
  CompileRequest r;
  r.name = "fake.cu";
  r.arch = arch;
  r.options = std::move(options);
  return r;
}

bool not_root() { return ::geteuid() != 0; }

constexpr uid_t kNobody = 65534;

}  // namespace

TEST_SUITE("jit") {
  TEST_CASE("jit cache: another kernel's file with its key field rewritten is refused") {
    TempDir dir;
    KernelCache cache({.dir = dir.path, .warn = false});
    const std::string a = key_of('a'), b = key_of('b');
    REQUIRE(cache.store(a, fake_result("A")));
    REQUIRE(cache.store(b, fake_result("B")));
    REQUIRE(cache.load(b)->binary == fake_result("B").binary);
    // B's entry becomes A's file with the key field (bytes 24..87) rewritten to B's key.
    std::string forged = read_bytes(cache.path_for(a));
    REQUIRE(forged.substr(24, 64) == a);
    forged.replace(24, 64, b);
    write_bytes(cache.path_for(b), forged);
    const auto entries = cache.list();
    REQUIRE(entries.size() == 2);
    CHECK(entries[0].valid != entries[1].valid);
    for (const auto& e : entries)
      if (e.key == b) CHECK(e.problem == "checksum mismatch");
    CHECK_FALSE(cache.load(b).has_value());
    CHECK(cache.stats().corrupt_files == 1);
    CHECK_FALSE(fs::exists(cache.path_for(b)));
    CHECK(cache.load(a)->binary == fake_result("A").binary);
  }

  TEST_CASE("jit cache: the header binds the request's arch and options") {
    TempDir dir;
    KernelCache cache({.dir = dir.path, .warn = false});
    const std::string k = key_of('c');
    const CompileRequest req = request(90, {"-O3", "-DX=1"});
    REQUIRE(cache.store(k, fake_result("C"), &req));
    CHECK(cache.list().at(0).arch == 90);
    CHECK(cache.load(k, &req).has_value());
    const CompileRequest other_arch = request(80, req.options);
    CHECK_FALSE(cache.load(k, &other_arch).has_value());
    CHECK_FALSE(fs::exists(cache.path_for(k)));

    REQUIRE(cache.store(k, fake_result("C"), &req));
    const CompileRequest other_options = request(90, {"-O3", "-DX=2"});
    CHECK_FALSE(cache.load(k, &other_options).has_value());
    CHECK(cache.stats().corrupt_files == 2);

    // Stored without its request (tests, tools), a file is bound by its key alone.
    REQUIRE(cache.store(k, fake_result("C")));
    CHECK(cache.load(k, &other_options).has_value());
    CHECK(cache.stats().corrupt_files == 2);

    // A flipped arch byte fails the checksum even where nothing is expected.
    REQUIRE(cache.store(k, fake_result("C"), &req));
    std::string bytes = read_bytes(cache.path_for(k));
    bytes[120] = char(bytes[120] ^ 1);
    write_bytes(cache.path_for(k), bytes);
    CHECK(cache.list().at(0).problem == "checksum mismatch");
  }

  TEST_CASE("jit cache: a FIFO entry is skipped and removed without hanging") {
    TempDir dir;
    KernelCache cache({.dir = dir.path, .warn = false});
    const std::string k = key_of('d');
    REQUIRE(::mkfifo(cache.path_for(k).c_str(), 0600) == 0);
    // In a child with a time limit: before the fix, open() blocked for a writer forever.
    CHECK(in_child([&] {
            const auto entries = cache.list();
            return entries.size() == 1 && !entries[0].valid &&
                   entries[0].problem == "not a regular file (a FIFO)";
          }) == 0);
    CHECK(in_child([&] { return !cache.load(k).has_value() && !fs::exists(cache.path_for(k)); }) ==
          0);
    REQUIRE(::mkfifo(cache.path_for(k).c_str(), 0600) == 0);
    CHECK(in_child([&] { return cache.store(k, fake_result("D")) && cache.load(k).has_value(); }) ==
          0);
  }

  TEST_CASE("jit cache: a directory entry is reported, removed, and the next store works") {
    TempDir dir;
    KernelCache cache({.dir = dir.path, .warn = false});
    const std::string k = key_of('e');
    REQUIRE(fs::create_directory(cache.path_for(k)));
    const auto entries = cache.list();
    REQUIRE(entries.size() == 1);  // `cache stats` counted 0 entries before
    CHECK(entries[0].problem == "not a regular file (a directory)");
    CHECK_FALSE(cache.load(k).has_value());
    CHECK(cache.stats().corrupt_files == 1);
    CHECK_FALSE(fs::exists(cache.path_for(k)));
    CHECK(cache.store(k, fake_result("E")));
    CHECK(cache.load(k)->binary == fake_result("E").binary);

    // A directory with something inside is not removed (never recursively), but refused.
    const std::string k2 = key_of('f');
    REQUIRE(fs::create_directories(cache.path_for(k2) + "/inside"));
    CHECK_FALSE(cache.load(k2).has_value());
    CHECK(fs::exists(cache.path_for(k2) + "/inside"));
    CHECK_FALSE(cache.store(k2, fake_result("F")));
    CHECK(cache.disk_problem().find("cannot rename a file to") != std::string::npos);
  }

  TEST_CASE("jit cache: a huge sparse entry is refused by its size, unread") {
    TempDir dir;
    KernelCache cache({.dir = dir.path, .warn = false});
    const std::string k = key_of('0');
    const int fd = ::open(cache.path_for(k).c_str(), O_WRONLY | O_CREAT, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(3) << 30) == 0);  // 3 GiB of holes
    ::close(fd);
    const auto entries = cache.list();
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].problem == "too large (3221225472 bytes; an entry is at most " +
                                    std::to_string(kMaxCacheEntryBytes) + ")");
    CHECK_FALSE(cache.load(k).has_value());
    CHECK_FALSE(fs::exists(cache.path_for(k)));
  }

  TEST_CASE("jit cache: clear reports a missing directory, a file, and entries it cannot delete") {
    TempDir dir;
    {
      KernelCache cache({.dir = dir.sub("missing"), .warn = false});
      CHECK(error_of([&] { cache.clear(); }) == "[jit] cannot clear the kernel cache '" +
                                                    dir.sub("missing") +
                                                    "': No such file or directory");
    }
    {
      write_bytes(dir.sub("file"), "x");
      KernelCache cache({.dir = dir.sub("file"), .warn = false});
      CHECK(error_of([&] { cache.clear(); }) ==
            "[jit] cannot clear the kernel cache '" + dir.sub("file") +
                "': it is not a directory; set MT_KERNEL_CACHE to the cache directory");
    }
    // A read-only directory: root ignores permissions, so the child drops to nobody.
    const std::string ro = dir.sub("ro");
    KernelCache cache({.dir = ro, .warn = false});
    REQUIRE(cache.store(key_of('1'), fake_result("1")));
    if (!not_root()) {
      REQUIRE(::chown(dir.path.c_str(), kNobody, kNobody) == 0);
      REQUIRE(::chown(ro.c_str(), kNobody, kNobody) == 0);
    }
    REQUIRE(::chmod(ro.c_str(), 0500) == 0);
    CHECK(in_child([&] {
            if (!not_root() && ::setuid(kNobody) != 0) return false;
            const std::string e = error_of([&] { cache.clear(); });
            return e == "[jit] could not delete 1 entry of the kernel cache (first '" +
                            cache.path_for(key_of('1')) +
                            "': Permission denied); check the directory's permissions";
          }) == 0);
    CHECK(fs::exists(cache.path_for(key_of('1'))));
    ::chmod(ro.c_str(), 0700);
    CHECK(error_of([&] { cache.clear(); }) == "(no error)");
    CHECK_FALSE(fs::exists(cache.path_for(key_of('1'))));
  }

  TEST_CASE("jit cache: a cache that cannot be written is reported once, with the reason") {
    TempDir dir;
    write_bytes(dir.sub("file"), "x");
    const std::string where = dir.sub("file") + "/kernels";
    // stderr into a file for the two stores.
    const std::string log = dir.sub("stderr.txt");
    std::fflush(stderr);
    const int saved = ::dup(2);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
    KernelCache cache({.dir = where});
    const bool first = cache.store(key_of('2'), fake_result("2"));
    const bool second = cache.store(key_of('3'), fake_result("3"));
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    CHECK_FALSE(first);
    CHECK_FALSE(second);
    CHECK(cache.stats().write_failures == 2);
    const std::string problem = "cannot create '" + where + "': Not a directory";
    CHECK(cache.disk_problem() == problem);
    const std::string printed = read_bytes(log);
    CHECK(printed == "minitensor: [jit] the kernel cache in '" + where +
                         "' cannot be used or written: " + problem +
                         "; the kernels it lacks are compiled again in each process (set "
                         "MT_KERNEL_CACHE to a directory of your own, or to 0 to keep kernels in "
                         "memory only)\n");
  }

  TEST_CASE("jit cache: the directories it creates have mode 0700") {
    TempDir dir;
    const mode_t old = ::umask(0);  // even with a permissive umask
    KernelCache cache({.dir = dir.sub("a/b/kernels"), .warn = false});
    const bool stored = cache.store(key_of('4'), fake_result("4"));
    ::umask(old);
    REQUIRE(stored);
    for (const char* d : {"a", "a/b", "a/b/kernels"}) {
      CAPTURE(d);
      struct stat st;
      REQUIRE(::stat(dir.sub(d).c_str(), &st) == 0);
      CHECK((st.st_mode & 07777) == 0700);
    }
    struct stat st;
    REQUIRE(::stat(cache.path_for(key_of('4')).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }

  TEST_CASE("jit cache: a directory owned by another user is refused" * doctest::skip(not_root())) {
    TempDir dir;
    const std::string foreign = dir.sub("kernels");
    KernelCache cache({.dir = foreign, .warn = false});
    REQUIRE(cache.store(key_of('5'), fake_result("5")));  // a valid entry, then chown
    REQUIRE(::chown(foreign.c_str(), kNobody, kNobody) == 0);
    CHECK_FALSE(cache.load(key_of('5')).has_value());
    CHECK(fs::exists(cache.path_for(key_of('5'))));  // left alone, not loaded
    CHECK_FALSE(cache.store(key_of('6'), fake_result("6")));
    CHECK(cache.disk_problem() ==
          "it is owned by uid 65534, not by this user (uid 0), and whoever can write it chooses "
          "the kernels that get loaded");
  }

  TEST_CASE("jit cache: get() recompiles an entry swapped in from another kernel" *
            doctest::skip(no_nvrtc())) {
    TempDir dir;
    auto tiny = [](int tag) {
      CompileRequest r;
      r.name = "tiny.cu";
      r.source =
          "__global__ void tiny(float* p) { p[threadIdx.x] = " + std::to_string(tag) + ".0f; }\n";
      r.name_expressions = {"tiny"};
      r.arch = 90;
      return r;
    };
    const CompileRequest one = tiny(1), two = tiny(2);
    std::string bin_one, bin_two;
    {
      KernelCache cache({.dir = dir.path, .warn = false});
      bin_one = cache.get(one)->binary;
      bin_two = cache.get(two)->binary;
      REQUIRE(bin_one != bin_two);
      std::string forged = read_bytes(cache.path_for(cache_key(one)));
      forged.replace(24, 64, cache_key(two));
      write_bytes(cache.path_for(cache_key(two)), forged);
    }
    KernelCache fresh({.dir = dir.path, .warn = false});
    CHECK(fresh.get(two)->binary == bin_two);
    CHECK(fresh.stats().corrupt_files == 1);
    CHECK(fresh.stats().misses == 1);
  }
}
