#include "src/comm/site_files.h"

#include <array>
#include <mutex>
#include <unordered_map>

namespace replicator::detail {
namespace {

// FNV-1a over the file's last path component (processes built in other folders agree).
std::uint32_t hash_of(const char* file) {
  std::uint32_t h = 2166136261u;
  for (const char* c = base_name(file); *c != '\0'; ++c) {
    h ^= static_cast<unsigned char>(*c);
    h *= 16777619u;
  }
  return h == 0 ? 1 : h;
}

struct Registry {
  std::mutex mu;
  std::unordered_map<std::uint32_t, const char*> files;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: collectives may run during exit
  return *r;
}

}  // namespace

std::uint32_t file_id(const char* file) noexcept {
  if (file == nullptr) return 0;
  // The last few files this thread named: a replica calls from a handful of files.
  struct Seen {
    const char* file = nullptr;
    std::uint32_t id = 0;
  };
  thread_local std::array<Seen, 4> seen{};
  thread_local std::size_t next = 0;
  for (const Seen& s : seen) {
    if (s.file == file) return s.id;
  }
  const std::uint32_t id = hash_of(file);
  try {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    r.files.emplace(id, file);
  } catch (...) {
    // Out of memory: the name still travels; only this process cannot turn it back.
  }
  seen[next] = {file, id};
  next = (next + 1) % seen.size();
  return id;
}

const char* file_of(std::uint32_t id) noexcept {
  if (id == 0) return nullptr;
  try {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    const auto it = r.files.find(id);
    return it == r.files.end() ? nullptr : it->second;
  } catch (...) {
    return nullptr;
  }
}

std::string site_suffix(std::uint32_t file, std::uint32_t line) {
  if (file == 0 || line == 0) return {};
  const char* name = file_of(file);
  if (name == nullptr) {
    return " at line " + std::to_string(line) + " of a file this process never called from";
  }
  return " at " + to_string(CallSite{name, line});
}

std::string site_suffix(CallSite site) {
  return site.known() ? " at " + to_string(site) : std::string();
}

}  // namespace replicator::detail
