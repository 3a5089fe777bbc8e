// A fresh folder for one test, removed with everything in it when the test ends.
// Header-only; needs neither GoogleTest nor LibTorch.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace replicator::harness {

class TempDir {
 public:
  // Makes <system temporary folder>/<prefix>.XXXXXX; path() is empty if that failed (the
  // test's own file operations then fail and say where).
  explicit TempDir(const std::string& prefix = "replicator-test") {
    std::string name = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (::mkdtemp(name.data()) != nullptr) path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace replicator::harness
