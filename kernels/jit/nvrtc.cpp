// SPDX-License-Identifier: MIT
#include "kernels/jit/nvrtc.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>

#include "kernels/jit/embedded.h"
#include "runtime/error.h"

#if defined(MT_HAVE_CUDA)
#include <dlfcn.h>
#include <link.h>
#include <nvrtc.h>
#endif

namespace mt::jit {

const std::string& CompileResult::lowered_name(std::string_view expression) const {
  for (const auto& l : lowered_names)
    if (l.expression == expression) return l.lowered;
  std::string have;
  for (const auto& l : lowered_names) have += (have.empty() ? "" : ", ") + l.expression;
  MT_ERROR(
      "[jit] '{}' was not compiled into '{}' ({}); add it to the name expressions "
      "(compiled: {})",
      expression, name, target, have.empty() ? "none" : have);
}

const std::vector<std::string>& default_options() {
  static const std::vector<std::string> opts = {"-std=c++17", "-default-device", "-lineinfo"};
  return opts;
}

const std::vector<Header>& embedded_headers() {
  static const std::vector<Header> headers = [] {
    std::vector<Header> out;
    for (std::string_view n : embedded_source_names())
      if (n.ends_with(".cuh") || n.ends_with(".h"))
        out.push_back({std::string(n), std::string(embedded_source(n))});
    return out;
  }();
  return headers;
}

std::vector<Header> all_headers(const std::vector<Header>& headers) {
  std::vector<Header> all = headers;
  for (const auto& h : embedded_headers())
    if (std::none_of(all.begin(), all.end(), [&](const Header& u) { return u.name == h.name; }))
      all.push_back(h);
  return all;
}

namespace {

// Appends "   11 | text" lines around `line` of `text`, marking `line` with '>'.
void append_context(std::string& out, std::string_view text, int line) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (end == text.size() && pos == end && !lines.empty()) break;  // after a final newline
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  const int first = std::max(1, line - 2), last = std::min(int(lines.size()), line + 2);
  if (line < 1 || line > int(lines.size())) return;
  const int width = int(fmt::formatted_size("{}", last));
  for (int i = first; i <= last; ++i)
    out += fmt::format(" {} {:>{}} | {}\n", i == line ? '>' : ' ', i, width, lines[i - 1]);
}

// Parses "file(123): error: ..." into file and line; false for other log lines.
bool parse_diagnostic(std::string_view l, std::string_view& file, int& line, bool& is_error) {
  const size_t open = l.find('(');
  const size_t close = l.find("): ");
  if (open == std::string_view::npos || close == std::string_view::npos || close < open + 2)
    return false;
  int n = 0;
  for (size_t i = open + 1; i < close; ++i) {
    if (l[i] < '0' || l[i] > '9') return false;
    n = n * 10 + (l[i] - '0');
  }
  std::string_view rest = l.substr(close + 3);
  is_error = rest.starts_with("error") || rest.starts_with("catastrophic error");
  file = l.substr(0, open);
  line = n;
  return true;
}

// The message of a failed compile: NVRTC's log, each error followed by the
// source lines around it (from the main source or one of the headers).
[[maybe_unused]] std::string format_compile_error(std::string_view name, std::string_view target,
                                                  std::string_view log, std::string_view source,
                                                  const std::vector<Header>& headers,
                                                  const std::vector<std::string>& options) {
  std::string out = fmt::format("[jit] NVRTC failed to compile '{}' for {}:\n", name, target);
  auto text_of = [&](std::string_view file) -> const std::string_view {
    if (file == name) return source;
    for (const auto& h : headers)
      if (h.name == file) return h.text;
    return {};
  };
  std::string_view pending_file;
  int pending_line = 0;
  auto flush = [&] {
    if (pending_line == 0) return;
    std::string_view text = text_of(pending_file);
    if (!text.empty()) append_context(out, text, pending_line);
    pending_line = 0;
  };
  for (size_t pos = 0; pos < log.size();) {
    size_t end = log.find('\n', pos);
    if (end == std::string_view::npos) end = log.size();
    std::string_view l = log.substr(pos, end - pos);
    pos = end + 1;
    std::string_view file;
    int line = 0;
    bool is_error = false;
    const bool diag = parse_diagnostic(l, file, line, is_error);
    if (diag || l.find_first_not_of(" \t\r") == std::string_view::npos) flush();
    if (l.find_first_not_of(" \t\r") != std::string_view::npos) out += fmt::format(" {}\n", l);
    if (diag && is_error) pending_file = file, pending_line = line;
  }
  flush();
  if (log.find("__nv_name_map") != std::string_view::npos)
    out += fmt::format(
        " note: each name expression must name a __global__ function (or an "
        "instantiation of a __global__ template) defined in '{}'\n",
        name);
  // ptxas: "Instruction 'wgmma.fence' not supported on .target 'sm_90'".
  int sm = 0;
  if (target.starts_with("sm_"))
    std::from_chars(target.data() + 3, target.data() + target.size(), sm);
  if (sm >= 90 && !target.ends_with('a') &&
      log.find(fmt::format("not supported on .target '{}'", target)) != std::string_view::npos)
    out += fmt::format(
        " note: Hopper-only (or Blackwell-only) PTX such as wgmma and setmaxnreg needs the "
        "arch-specific target {}a: ask for it with KernelSpec::arch_specific = true (the CUBIN "
        "then runs on this compute capability only)\n",
        target);
  std::string opts;
  for (const auto& o : options) opts += (opts.empty() ? "" : " ") + o;
  out += fmt::format("options: {}", opts.empty() ? "(none)" : opts);
  return out;
}

}  // namespace

#if defined(MT_HAVE_CUDA)

namespace {

struct Nvrtc {
  std::string path;
  std::string error;  // why loading failed; empty when loaded
  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) GetNumSupportedArchs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) GetSupportedArchs = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcGetPTXSize) GetPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) GetPTX = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
  decltype(&::nvrtcAddNameExpression) AddNameExpression = nullptr;
  decltype(&::nvrtcGetLoweredName) GetLoweredName = nullptr;
  NvrtcVersion version;
  std::vector<int> archs;
};

Nvrtc load_nvrtc() {
  Nvrtc api;
  std::vector<std::string> candidates;
  if (const char* lib = std::getenv("MT_NVRTC_LIBRARY"); lib && *lib) {
    candidates.push_back(lib);  // this one, or none
  } else {
    candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    std::vector<std::string> dirs;
    if (const char* home = std::getenv("CUDA_HOME"); home && *home)
      dirs.push_back(std::string(home) + "/lib64");
    dirs.push_back("/usr/local/cuda/lib64");
    for (const auto& d : dirs)
      for (const char* so : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
        candidates.push_back(d + "/" + so);
  }

  void* handle = nullptr;
  std::string tried;
  for (const auto& c : candidates) {
    handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (!handle) {
    api.error = fmt::format(
        "libnvrtc not found (tried {}); install the CUDA toolkit's NVRTC or "
        "set CUDA_HOME (or MT_NVRTC_LIBRARY to the library's path)",
        tried);
    return api;
  }
  if (link_map* lm = nullptr; ::dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
    api.path = lm->l_name;

  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    if (!fn && ok) {
      ok = false;
      api.error = fmt::format("{} lacks {} (NVRTC older than 11.2?)", api.path, name);
    }
  };
  sym(api.GetErrorString, "nvrtcGetErrorString");
  sym(api.Version, "nvrtcVersion");
  sym(api.GetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
  sym(api.GetSupportedArchs, "nvrtcGetSupportedArchs");
  sym(api.CreateProgram, "nvrtcCreateProgram");
  sym(api.DestroyProgram, "nvrtcDestroyProgram");
  sym(api.CompileProgram, "nvrtcCompileProgram");
  sym(api.GetProgramLogSize, "nvrtcGetProgramLogSize");
  sym(api.GetProgramLog, "nvrtcGetProgramLog");
  sym(api.GetPTXSize, "nvrtcGetPTXSize");
  sym(api.GetPTX, "nvrtcGetPTX");
  sym(api.GetCUBINSize, "nvrtcGetCUBINSize");
  sym(api.GetCUBIN, "nvrtcGetCUBIN");
  sym(api.AddNameExpression, "nvrtcAddNameExpression");
  sym(api.GetLoweredName, "nvrtcGetLoweredName");
  if (!ok) return api;

  int n = 0;
  if (api.Version(&api.version.major, &api.version.minor) != NVRTC_SUCCESS ||
      api.GetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) {
    api.error =
        fmt::format("{} loaded but nvrtcVersion/nvrtcGetNumSupportedArchs failed", api.path);
    return api;
  }
  api.archs.resize(size_t(n));
  if (api.GetSupportedArchs(api.archs.data()) != NVRTC_SUCCESS) {
    api.error = fmt::format("{} loaded but nvrtcGetSupportedArchs failed", api.path);
    return api;
  }
  std::sort(api.archs.begin(), api.archs.end());
  return api;  // the handle stays open for the life of the process
}

const Nvrtc& nvrtc() {
  static const Nvrtc api = load_nvrtc();
  return api;
}

const Nvrtc& loaded_nvrtc() {
  const Nvrtc& api = nvrtc();
  MT_CHECK(api.error.empty(), "[jit] NVRTC is not available: {}", api.error);
  return api;
}

void check(const Nvrtc& api, nvrtcResult r, const char* call, std::string_view name) {
  MT_CHECK(r == NVRTC_SUCCESS, "[jit] {} failed for '{}': {}", call, name, api.GetErrorString(r));
}

// Destroys the program on every path out of compile().
struct ProgramGuard {
  const Nvrtc& api;
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog) api.DestroyProgram(&prog);
  }
};

}  // namespace

bool nvrtc_available() { return nvrtc().error.empty(); }
std::string nvrtc_unavailable_reason() { return nvrtc().error; }
std::string nvrtc_library_path() { return loaded_nvrtc().path; }
NvrtcVersion nvrtc_version() { return loaded_nvrtc().version; }
std::vector<int> nvrtc_supported_archs() { return loaded_nvrtc().archs; }

// Note [Arch-specific targets]
// Some PTX exists on one architecture only: Hopper's wgmma.mma_async, wgmma.fence and
// setmaxnreg, Blackwell's tcgen05. ptxas accepts it only for the arch-specific target
// sm_90a (sm_100a, ...), whose CUBIN runs on that exact compute capability and nowhere
// else, not even a later one; plain sm_90 code runs on 9.0 and later. So a kernel asks for
// it (KernelSpec::arch_specific, CompileRequest::arch_specific) and never gets it by
// default. Such targets exist from sm_90 on; no PTX fallback is taken for them (arch-
// specific PTX would not run on a newer device either), so NVRTC must list the device's
// own arch. The target is part of the cache key and of the entry's metadata, which its
// checksum covers, so an sm_90 and an sm_90a CUBIN of one source are two entries, and a
// file whose target is not the request's kind is refused (cache.cpp, parse).
std::string nvrtc_target(int arch, bool arch_specific, std::string_view kernel) {
  const auto& archs = loaded_nvrtc().archs;
  const bool listed = std::find(archs.begin(), archs.end(), arch) != archs.end();
  if (arch_specific) {
    MT_CHECK(arch >= 90,
             "[jit] '{}' asks for the arch-specific target, which exists from sm_90a on; this "
             "device is sm_{}: compile it without arch_specific (and without the Hopper-only "
             "instructions) or run it on a compute capability 9.0 or later GPU",
             kernel, arch);
    MT_CHECK(listed,
             "[jit] '{}' asks for the arch-specific target sm_{}a, but NVRTC {}.{} cannot emit "
             "CUBIN for sm_{} (it supports sm_{} to sm_{}); use an NVRTC that supports this GPU",
             kernel, arch, loaded_nvrtc().version.major, loaded_nvrtc().version.minor, arch,
             archs.front(), archs.back());
    return fmt::format("sm_{}a", arch);
  }
  if (listed) return fmt::format("sm_{}", arch);
  int best = 0;
  for (int a : archs)
    if (a <= arch) best = a;
  MT_CHECK(best > 0,
           "[jit] NVRTC {}.{} cannot target sm_{}: it supports sm_{} to sm_{}; use an NVRTC "
           "that still supports this GPU",
           loaded_nvrtc().version.major, loaded_nvrtc().version.minor, arch, archs.front(),
           archs.back());
  return fmt::format("compute_{}", best);
}

CompileResult compile(std::string_view source, std::string_view name,
                      const std::vector<std::string>& name_expressions,
                      const std::vector<std::string>& options, int arch,
                      const std::vector<Header>& headers, bool arch_specific) {
  const Nvrtc& api = loaded_nvrtc();
  for (const auto& o : options)
    MT_CHECK(!o.starts_with("-arch") && !o.starts_with("--gpu-architecture"),
             "[jit] option '{}' for '{}': pass the architecture as the arch argument (and "
             "arch_specific for sm_90a), not as an option",
             o, name);
  const auto start = std::chrono::steady_clock::now();
  CompileResult res;
  res.name = std::string(name);
  res.target = nvrtc_target(arch, arch_specific, name);

  const std::vector<Header> all = all_headers(headers);
  std::vector<const char*> texts, names;
  for (const auto& h : all) texts.push_back(h.text.c_str()), names.push_back(h.name.c_str());

  const std::string src(source);
  ProgramGuard guard{api};
  check(api,
        api.CreateProgram(&guard.prog, src.c_str(), res.name.c_str(), int(all.size()), texts.data(),
                          names.data()),
        "nvrtcCreateProgram", name);
  for (const auto& e : name_expressions)
    check(api, api.AddNameExpression(guard.prog, e.c_str()), "nvrtcAddNameExpression", name);

  std::vector<std::string> opts = {"--gpu-architecture=" + res.target};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const nvrtcResult rc = api.CompileProgram(guard.prog, int(argv.size()), argv.data());

  size_t log_size = 0;
  check(api, api.GetProgramLogSize(guard.prog, &log_size), "nvrtcGetProgramLogSize", name);
  res.log.resize(log_size);
  if (log_size > 0)
    check(api, api.GetProgramLog(guard.prog, res.log.data()), "nvrtcGetProgramLog", name);
  while (!res.log.empty() &&
         (res.log.back() == '\0' || res.log.back() == '\n' || res.log.back() == ' '))
    res.log.pop_back();
  if (rc == NVRTC_ERROR_COMPILATION)
    throw Error(format_compile_error(name, res.target, res.log, source, all, opts));
  MT_CHECK(rc == NVRTC_SUCCESS, "[jit] nvrtcCompileProgram failed for '{}' ({}): {}\n{}", name,
           res.target, api.GetErrorString(rc), res.log);

  size_t size = 0;
  if (res.is_cubin()) {
    check(api, api.GetCUBINSize(guard.prog, &size), "nvrtcGetCUBINSize", name);
    res.binary.resize(size);
    check(api, api.GetCUBIN(guard.prog, res.binary.data()), "nvrtcGetCUBIN", name);
  } else {
    check(api, api.GetPTXSize(guard.prog, &size), "nvrtcGetPTXSize", name);
    res.binary.resize(size);
    check(api, api.GetPTX(guard.prog, res.binary.data()), "nvrtcGetPTX", name);
  }
  for (const auto& e : name_expressions) {
    const char* lowered = nullptr;
    check(api, api.GetLoweredName(guard.prog, e.c_str(), &lowered), "nvrtcGetLoweredName", name);
    // NVRTC reports success with no name for an expression it never instantiated (a
    // library that misbehaves); a std::string made from it would throw std::logic_error.
    MT_CHECK(lowered != nullptr,
             "[jit] NVRTC gave no lowered name for '{}' in '{}'; add it to the name expressions "
             "before compiling (nvrtcAddNameExpression), or check the NVRTC library",
             e, name);
    res.lowered_names.push_back({e, lowered});
  }
  res.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return res;
}

#else                    // !MT_HAVE_CUDA: a stub that says why.

namespace {
#ifdef MT_CUDA_DISABLED  // meson.build: -Dcuda=disabled
constexpr const char* kNoCuda =
    "minitensor was configured with -Dcuda=disabled, which leaves out NVRTC with the rest of "
    "the CUDA backend; reconfigure with -Dcuda=auto or -Dcuda=enabled";
#else
constexpr const char* kNoCuda =
    "minitensor was built without the CUDA headers (MT_HAVE_CUDA is not defined); rebuild "
    "with the CUDA toolkit installed (meson setup -Dcuda=enabled -Dcudatoolkit=/path/to/cuda)";
#endif
}  // namespace

bool nvrtc_available() { return false; }
std::string nvrtc_unavailable_reason() { return kNoCuda; }
std::string nvrtc_library_path() { MT_ERROR("[jit] NVRTC is not available: {}", kNoCuda); }
NvrtcVersion nvrtc_version() { MT_ERROR("[jit] NVRTC is not available: {}", kNoCuda); }
std::vector<int> nvrtc_supported_archs() { MT_ERROR("[jit] NVRTC is not available: {}", kNoCuda); }
std::string nvrtc_target(int, bool, std::string_view) {
  MT_ERROR("[jit] NVRTC is not available: {}", kNoCuda);
}
CompileResult compile(std::string_view, std::string_view name, const std::vector<std::string>&,
                      const std::vector<std::string>&, int, const std::vector<Header>&, bool) {
  MT_ERROR("[jit] cannot compile '{}': NVRTC is not available: {}", name, kNoCuda);
}

#endif

}  // namespace mt::jit
