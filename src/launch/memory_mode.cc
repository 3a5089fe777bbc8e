#include "replicator/launch/memory_mode.h"

#include <dlfcn.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "replicator/errors.h"
#include "replicator/launch/subprocess.h"

namespace replicator::launch {
namespace {

constexpr const char* kJemalloc = "libjemalloc.so.2";
constexpr const char* kJemallocConf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
// Set for the re-executed process only: it must not try again.
constexpr const char* kMarker = "REPLICATOR_MEMORY_REEXEC";

bool jemalloc_active() { return ::dlsym(RTLD_DEFAULT, "mallctl") != nullptr; }

// Both run first in main(), before any thread starts: the environment and malloc's settings
// are this process's alone then.
// NOLINTBEGIN(concurrency-mt-unsafe)
void keep_with_glibc() {
  // glibc caps the mmap threshold at 32 MiB; trimming off; one arena, because glibc
  // unmaps a thread arena's heaps whenever they empty, whatever the trim threshold.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  ::mallopt(M_ARENA_MAX, 1);
}

}  // namespace

void apply_memory_mode(MemoryMode mode, char** argv) {
  const bool reexecuted = std::getenv(kMarker) != nullptr;
  if (reexecuted) {
    // Leave the environment as the user gave it to whatever this process starts.
    const std::string previous = std::getenv(kMarker);
    ::unsetenv(kMarker);
    if (previous == "-") {
      ::unsetenv("LD_PRELOAD");
    } else {
      ::setenv("LD_PRELOAD", previous.c_str(), 1);
    }
  }
  if (mode == MemoryMode::kSystem || jemalloc_active()) return;
  if (!reexecuted) {
    const char* preload = std::getenv("LD_PRELOAD");
    ::setenv(kMarker, preload != nullptr ? preload : "-", 1);
    const std::string with =
        std::string(kJemalloc) + (preload != nullptr ? std::string(" ") + preload : "");
    ::setenv("LD_PRELOAD", with.c_str(), 1);
    if (std::getenv("MALLOC_CONF") == nullptr) ::setenv("MALLOC_CONF", kJemallocConf, 1);
    launch::exec_self(argv);
    ::unsetenv(kMarker);  // exec failed: carry on below
  }
  std::fprintf(stderr,
               "replicator: %s could not be loaded (Debian package libjemalloc2); keeping "
               "freed memory with glibc settings instead\n",
               kJemalloc);
  keep_with_glibc();
}
// NOLINTEND(concurrency-mt-unsafe)

MemoryMode parse_memory_mode(const std::string& text) {
  if (text == "keep") return MemoryMode::kKeep;
  if (text == "system") return MemoryMode::kSystem;
  throw ConfigError("--memory must be keep or system, got '" + text + "'");
}

const char* to_string(MemoryMode mode) { return mode == MemoryMode::kKeep ? "keep" : "system"; }

std::string memory_mode_environment(MemoryMode mode) {
  if (mode == MemoryMode::kSystem) return "";
  return std::string("LD_PRELOAD=") + kJemalloc + " MALLOC_CONF=" + kJemallocConf;
}

std::string active_allocator() { return jemalloc_active() ? "jemalloc" : "glibc"; }

}  // namespace replicator::launch
