#include "apps/subprocess.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "replicator/errors.h"

namespace replicator::apps {

std::string self_path() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::string quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string run_capture(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw Error("cannot start: " + command);
  std::string out;
  std::array<char, 4096> chunk;
  while (std::fgets(chunk.data(), chunk.size(), pipe) != nullptr) out += chunk.data();
  const int status = ::pclose(pipe);
  if (status != 0) {
    throw Error("benchmark run failed (exit status " + std::to_string(WEXITSTATUS(status)) +
                "): " + command);
  }
  return out;
}

nlohmann::ordered_json result_with(const std::string& output, const std::string& field,
                                   const std::string& command) {
  nlohmann::ordered_json found;
  std::size_t start = 0;
  while (start < output.size()) {
    const std::size_t end = output.find('\n', start);
    const std::string line =
        output.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::size_t brace = line.find('{');
    if (brace != std::string::npos && line.find(field) != std::string::npos) {
      auto j = nlohmann::ordered_json::parse(line.substr(brace), nullptr,
                                             /*allow_exceptions=*/false);
      if (j.is_object() && j.contains(field)) found = std::move(j);
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (found.is_null())
    throw Error("no result line with \"" + field + "\" in the output of: " + command);
  return found;
}

}  // namespace replicator::apps
