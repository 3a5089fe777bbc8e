// What the GPU checks (gpu_check, gpu_torch_check) collect: how many checks passed, the
// failures, and rows of figures as JSON objects; printed as they come, written as one JSON.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace replicator::gpu {

struct Results {
  int passed = 0;
  std::vector<std::string> failed;
  std::vector<std::string> rows;  // JSON objects

  // Counts `what` as passed when `failure` is empty, else records and prints the failure.
  void check(const std::string& what, const std::string& failure) {
    if (failure.empty()) {
      ++passed;
      return;
    }
    failed.push_back(what + ": " + failure);
    std::printf("FAIL %s: %s\n", what.c_str(), failure.c_str());
    std::fflush(stdout);
  }
};

// {"passed": N, "failed": [...], "<rows_key>": [rows]} into `path`.
inline void write_json(const std::string& path, const Results& results,
                       const std::string& rows_key) {
  std::ofstream out(path);
  out << "{\"passed\": " << results.passed << ", \"failed\": [";
  for (std::size_t i = 0; i < results.failed.size(); ++i) {
    std::string escaped;
    for (const char c : results.failed[i]) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;  // control characters
    }
    out << (i ? ", " : "") << '"' << escaped << '"';
  }
  out << "], \"" << rows_key << "\": [";
  for (std::size_t i = 0; i < results.rows.size(); ++i) out << (i ? ", " : "") << results.rows[i];
  out << "]}\n";
}

}  // namespace replicator::gpu
