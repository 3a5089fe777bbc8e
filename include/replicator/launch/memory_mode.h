// How a training process keeps freed memory (the `replicator` jobs' --memory flag). On
// machines where faulting in a fresh 4 KiB page is slow (~12-15 µs), glibc's default malloc
// hands LibTorch's freed activations back to the kernel (blocks above the mmap threshold are
// unmapped, and a thread's arena heaps are unmapped whenever they empty), so every step
// faults them in again: a small CNN trains ~3x slower.
//
// `kKeep` (the default of the train jobs) runs the process on jemalloc (Debian's
// libjemalloc2) with page purging off (dirty_decay_ms:-1, muzzy_decay_ms:-1): freed memory
// stays mapped and is reused, with a cache per thread. A MALLOC_CONF already in the
// environment is kept as it is (e.g. with thp:always for transparent huge pages). jemalloc
// must replace malloc before anything allocates, so the process re-executes itself once with
// jemalloc preloaded; where jemalloc cannot be loaded it falls back to glibc settings with
// the same aim (mmap threshold at its 32 MiB maximum, no trimming, one arena), which scale
// worse over threads. `kSystem` leaves glibc's defaults.
#pragma once

#include <string>

namespace replicator::launch {

enum class MemoryMode { kKeep, kSystem };

// Applies `mode` to this process; `argv` is main's, for the re-execution. Call before
// LibTorch allocates. May not return (exec). Never blocks otherwise; never throws.
void apply_memory_mode(MemoryMode mode, char** argv);

// "keep" or "system"; throws ConfigError for anything else.
MemoryMode parse_memory_mode(const std::string& text);
const char* to_string(MemoryMode mode);

// The environment that gives another program the same setting (the DDP peer run by the
// benchmark), e.g. "LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=..."; "" for kSystem.
std::string memory_mode_environment(MemoryMode mode);

// The help of a command's --memory flag.
inline constexpr const char* kMemoryFlagHelp =
    "keep (default): run on jemalloc with purging off, so freed memory stays mapped for "
    "reuse; system: glibc's defaults";

// Which allocator this process runs on: "jemalloc" or "glibc".
std::string active_allocator();

}  // namespace replicator::launch
