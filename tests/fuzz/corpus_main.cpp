// SPDX-License-Identifier: MIT
// Runs the fuzz target over files without libFuzzer, so any compiler builds it: each
// argument is a file or a directory of files, each file is one input. A finding aborts
// (as under libFuzzer), which fails the test that runs this.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// -random=SECONDS[:SEED]: after the files, random inputs (up to 64 bytes) for that long,
// from a fixed seed: a bounded run for CI where there is no libFuzzer (not coverage-guided).
int random_inputs(double seconds, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<uint8_t> data;
  long runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int k = 0; k < 64; ++k, ++runs) {
      data.resize(rng() % 65);
      for (auto& b : data) b = uint8_t(rng());
      LLVMFuzzerTestOneInput(data.data(), data.size());
    }
  }
  std::printf("%ld random inputs (seed %llu), no findings\n", runs, (unsigned long long)seed);
  return 0;
}

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  double random_seconds = 0;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-random=", 8) == 0) {
      char* rest = nullptr;
      random_seconds = std::strtod(argv[i] + 8, &rest);
      if (*rest == ':') seed = std::strtoull(rest + 1, nullptr, 10);
      continue;
    }
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.emplace_back(argv[i]);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...: no input files found\n", argv[0]);
    return 2;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 1;
    }
    const std::string data(std::istreambuf_iterator<char>(in), {});
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::printf("%zu inputs, no findings\n", files.size());
  return random_seconds > 0 ? random_inputs(random_seconds, seed) : 0;
}
