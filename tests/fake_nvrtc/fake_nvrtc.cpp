// SPDX-License-Identifier: MIT
// An NVRTC that misbehaves: every call succeeds, compiles nothing, and nvrtcGetLoweredName
// leaves the name null. test_jit_hardening.cpp runs mt_tests again with MT_NVRTC_LIBRARY
// naming this library, so minitensor loads it instead of NVRTC.
#include <nvrtc.h>

#include <cstring>

namespace {
int g_program;  // the one "program" handed out
}  // namespace

extern "C" {
const char* nvrtcGetErrorString(nvrtcResult) { return "fake NVRTC error"; }
nvrtcResult nvrtcVersion(int* major, int* minor) {
  *major = 13;
  *minor = 0;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetNumSupportedArchs(int* n) {
  *n = 1;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetSupportedArchs(int* archs) {
  archs[0] = 90;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char*, const char*, int,
                               const char* const*, const char* const*) {
  *prog = reinterpret_cast<nvrtcProgram>(&g_program);
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  *prog = nullptr;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return NVRTC_SUCCESS; }
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t* size) {
  *size = 1;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char* log) {
  log[0] = 0;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetPTXSize(nvrtcProgram, size_t* size) {
  *size = 8;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetPTX(nvrtcProgram, char* ptx) {
  std::memcpy(ptx, "// fake", 8);
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t* size) {
  *size = 8;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char* cubin) {
  std::memcpy(cubin,
              "\x7f"
              "ELFfake",
              8);
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcAddNameExpression(nvrtcProgram, const char*) { return NVRTC_SUCCESS; }
nvrtcResult nvrtcGetLoweredName(nvrtcProgram, const char*, const char** lowered) {
  *lowered = nullptr;  // success, and no name: what the library must not turn into a crash
  return NVRTC_SUCCESS;
}
}
