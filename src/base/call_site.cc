#include "replicator/call_site.h"

#include <cstring>

namespace replicator {

const char* base_name(const char* file) noexcept {
  if (file == nullptr) return "";
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

std::string to_string(CallSite site) {
  if (!site.known()) return {};
  return std::string(base_name(site.file)) + ":" + std::to_string(site.line);
}

}  // namespace replicator
