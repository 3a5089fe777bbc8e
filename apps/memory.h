// How the `replicator` process keeps freed memory. On machines where faulting in a fresh
// 4 KiB page is slow (~12-15 µs), glibc's default malloc hands large freed blocks back to
// the kernel (munmap, heap trimming) and LibTorch faults them in again on every step: a
// small CNN trains ~3x slower. `kKeep` (the default of the train job) raises glibc's
// mmap threshold to its 32 MiB maximum, disables trimming and keeps every thread on the
// main arena (glibc unmaps emptied thread-arena heaps whatever the trimming settings), so
// freed tensor memory stays mapped and is reused; `kSystem` leaves glibc's defaults.
#pragma once

#include <string>

namespace replicator::apps {

enum class MemoryMode { kKeep, kSystem };

// Applies `mode` to this process's allocator; call first thing in main (before LibTorch
// allocates). Never blocks. Throws ConfigError if glibc refuses a setting.
void apply_memory_mode(MemoryMode mode);

// "keep" or "system"; throws ConfigError for anything else.
MemoryMode parse_memory_mode(const std::string& text);

// The environment that gives a glibc program the same setting (for the DDP peer run by
// the benchmark): "MALLOC_MMAP_THRESHOLD_=... MALLOC_TRIM_THRESHOLD_=..." or "".
std::string memory_mode_environment(MemoryMode mode);

}  // namespace replicator::apps
