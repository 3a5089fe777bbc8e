// Re-executing this program with a changed environment (the allocator and BLAS settings
// that must be in place before anything loads).
#pragma once

#include <unistd.h>

namespace replicator::apps {

// Replaces this process with this program again, with `argv` and the current environment,
// through the program's real path, so that it keeps its name in ps and top (not "exe").
// Does not return when the exec succeeds; returns when it fails. Never blocks; never
// throws.
inline void exec_self(char** argv) noexcept {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    ::execv(self, argv);
  }
  ::execv("/proc/self/exe", argv);
}

}  // namespace replicator::apps
