// How the replica threads of this process wait, decided in one place from the shape of the
// host: spinning pays only while every replica thread on the host has a core of its own.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <span>

namespace replicator::detail {

struct HostPolicy {
  // More replica threads on this host (local replicas × processes of the job on the host)
  // than cores: every wait should give its core away.
  bool oversubscribed = false;
  // How long a replica waiting in a collective busy-waits before it parks.
  std::chrono::microseconds collective_spin{0};
  // How long an idle replica thread busy-waits for the next step: only if the driving
  // thread of every process of the host has a core too (else the spinning replica holds
  // the core its own driver needs to start that step).
  std::chrono::microseconds step_spin{0};
};

// `cores`: the host's hardware threads (0: unknown, taken as 1). Pure; never throws.
HostPolicy host_policy(int local_replicas, int host_processes, unsigned cores,
                       std::chrono::microseconds spin);

// Where a replica thread that starts a step on core `cpu` should move: the cores in
// `allowed` that none of `lower` (the cores the lower-numbered replicas of its host started
// on; negative: unknown) holds, into `*elsewhere`. False, leaving `*elsewhere` unspecified,
// when `cpu` is not among `lower` (nothing to do) or every allowed core is taken. Pure;
// never throws.
bool cores_elsewhere(int cpu, std::span<const int> lower, const cpu_set_t& allowed,
                     cpu_set_t* elsewhere);

// The caches of the core this process starts on, as the kernel describes them.
struct CacheFacts {
  std::size_t level2_bytes = 0;      // the level-2 (unified or data) cache; 0: unknown
  std::size_t last_level_bytes = 0;  // the last level's size; 0: unknown
  int last_level_sharers = 0;        // hardware threads that share the last level
  // The part of the last-level cache one hardware thread can count on when every thread
  // sharing it is busy: its size over its sharers (0: unknown).
  std::size_t last_level_share() const;
};

// Reads `dir` (a CPU's cache folder in sysfs: index*/level, type, size and
// shared_cpu_list). Missing or unreadable entries leave their fields 0. Never throws.
CacheFacts read_cache_facts(
    const std::filesystem::path& dir = "/sys/devices/system/cpu/cpu0/cache");

}  // namespace replicator::detail
