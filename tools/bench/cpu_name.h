// The CPU a benchmark ran on, for its header line and JSON (benchmarks print the CPU and the
// builds they ran). Header-only: included by the C++ benchmarks.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>

namespace ampscope::bench {

/// The CPU's model name from /proc/cpuinfo ("unknown CPU" where there is none).
inline std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "unknown CPU";
  char line[512];
  std::string model = "unknown CPU";
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    const char* colon = std::strchr(line, ':');
    if (std::strncmp(line, "model name", 10) != 0 || colon == nullptr) continue;
    model = colon + 2;
    if (!model.empty() && model.back() == '\n') model.pop_back();
    break;
  }
  std::fclose(f);
  return model;
}

}  // namespace ampscope::bench
