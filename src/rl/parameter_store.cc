#include "replicator/rl/parameter_store.h"

#include <string>
#include <utility>

#include "replicator/errors.h"

namespace replicator::rl {

void ParameterStore::publish(std::shared_ptr<const PolicySnapshot> snapshot) {
  if (!snapshot) throw InvalidArgument("ParameterStore::publish: the snapshot is null");
  {
    std::lock_guard lock(mu_);
    const std::int64_t current = version_.load(std::memory_order_relaxed);
    if (snapshot->version <= current) {
      throw InvalidArgument("ParameterStore::publish: version " +
                            std::to_string(snapshot->version) + " does not follow version " +
                            std::to_string(current));
    }
    latest_ = std::move(snapshot);
    version_.store(latest_->version, std::memory_order_release);
  }
  changed_.notify_all();
}

void ParameterStore::replace(std::shared_ptr<const PolicySnapshot> snapshot) {
  if (!snapshot) throw InvalidArgument("ParameterStore::replace: the snapshot is null");
  if (snapshot->version < 1) {
    throw InvalidArgument("ParameterStore::replace: version " + std::to_string(snapshot->version) +
                          " is below 1");
  }
  {
    std::lock_guard lock(mu_);
    latest_ = std::move(snapshot);
    version_.store(latest_->version, std::memory_order_release);
  }
  changed_.notify_all();
}

bool ParameterStore::wait_for_version_above(std::int64_t version,
                                            std::chrono::steady_clock::time_point until) const {
  std::unique_lock lock(mu_);
  return changed_.wait_until(lock, until,
                             [&] { return version_.load(std::memory_order_relaxed) > version; });
}

std::shared_ptr<const PolicySnapshot> ParameterStore::latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

}  // namespace replicator::rl
