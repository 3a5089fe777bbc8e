// ParameterStore: where the learner publishes each new version of the policy's parameters
// and actors pick up the newest one, without either waiting for the other (IMPALA's
// parameter publication). A version is an immutable snapshot (a flat vector of floats in
// the model's parameter order), shared by every reader that holds it; publishing swaps in
// a new one. No LibTorch: the same snapshots can be sent to actors in other processes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace replicator::rl {

struct PolicySnapshot {
  std::int64_t version = 0;
  std::vector<float> parameters;
};

class ParameterStore {
 public:
  // Makes `snapshot` the newest version. Its version must be above the current one. Takes
  // a lock for a pointer swap only (never waits for readers); thread-safe. Throws
  // InvalidArgument for a null snapshot or a version that does not increase.
  void publish(std::shared_ptr<const PolicySnapshot> snapshot);
  // Makes `snapshot` the newest whatever its version: for a copy of a learner's store when
  // that learner restarted from an older checkpoint and counts versions from there. Readers
  // take it as they take any other (Actor looks for a version that differs from its own).
  // Thread-safe. Throws InvalidArgument for a null snapshot or a version below 1.
  void replace(std::shared_ptr<const PolicySnapshot> snapshot);

  // The newest snapshot (null before the first publish). A pointer copy under a lock;
  // thread-safe; never throws.
  std::shared_ptr<const PolicySnapshot> latest() const;

  // The newest version (0 before the first publish), without a lock: for an actor that
  // only wants to know whether to fetch. Thread-safe; never throws.
  std::int64_t version() const { return version_.load(std::memory_order_acquire); }

  // BLOCKS until version() is above `version` or `until` passes; returns whether it is.
  // Wakes at once on publish() and replace(). Thread-safe; never throws.
  bool wait_for_version_above(std::int64_t version,
                              std::chrono::steady_clock::time_point until) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::shared_ptr<const PolicySnapshot> latest_;  // under mu_
  std::atomic<std::int64_t> version_{0};
};

}  // namespace replicator::rl
