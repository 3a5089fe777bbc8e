#include "apps/memory.h"

#include <malloc.h>

#include "replicator/errors.h"

namespace replicator::apps {
namespace {

// glibc caps the mmap threshold at HEAP_MAX_SIZE / 2: 32 MiB on 64-bit.
constexpr int kMmapThreshold = 32 << 20;
// Larger than any heap top worth returning: trimming never happens.
constexpr int kTrimThreshold = 1 << 30;

}  // namespace

void apply_memory_mode(MemoryMode mode) {
  if (mode == MemoryMode::kSystem) return;
  // One arena: glibc unmaps a thread arena's heaps whenever they empty (trimming settings
  // do not apply there), and replica threads are threads.
  if (::mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1 ||
      ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1 || ::mallopt(M_ARENA_MAX, 1) != 1) {
    throw ConfigError("the allocator refused the 'keep' memory setting (mallopt failed)");
  }
}

MemoryMode parse_memory_mode(const std::string& text) {
  if (text == "keep") return MemoryMode::kKeep;
  if (text == "system") return MemoryMode::kSystem;
  throw ConfigError("--memory must be keep or system, got '" + text + "'");
}

std::string memory_mode_environment(MemoryMode mode) {
  if (mode == MemoryMode::kSystem) return "";
  return "MALLOC_MMAP_THRESHOLD_=" + std::to_string(kMmapThreshold) +
         " MALLOC_TRIM_THRESHOLD_=" + std::to_string(kTrimThreshold) + " MALLOC_ARENA_MAX=1";
}

}  // namespace replicator::apps
