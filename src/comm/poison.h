// Poison: whether a transport has failed, and why. Set once by the first failure (the
// first reason is kept); read by every later call of the transport, on any thread.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "replicator/errors.h"

namespace replicator::detail {

class Poison {
 public:
  // Cheap: one atomic load.
  bool is_set() const { return set_.load(std::memory_order_acquire); }

  // Poisons; keeps `reason` (and `cause_replica`, the global id of the replica whose
  // failure it was, when known) if none was given before. Never throws (if the reason cannot
  // be stored, the flag is set all the same).
  void set(const std::string& reason, std::optional<int> cause_replica = std::nullopt) noexcept {
    try {
      std::lock_guard lock(mu_);
      if (reason_.empty()) {
        reason_ = reason;
        cause_replica_ = cause_replica;
      }
    } catch (...) {
    }
    set_.store(true, std::memory_order_release);
  }

  std::string reason() const {
    std::lock_guard lock(mu_);
    return reason_;
  }

  std::optional<int> cause_replica() const {
    std::lock_guard lock(mu_);
    return cause_replica_;
  }

  // Throws Aborted saying that `engine`'s transport was poisoned earlier, and why.
  [[noreturn]] void throw_aborted(std::string_view engine) const {
    throw Aborted(std::string(engine) + ": the transport was poisoned by an earlier failure (" +
                      reason() + "); restart the job",
                  cause_replica());
  }

 private:
  alignas(64) std::atomic<bool> set_{false};
  mutable std::mutex mu_;
  std::string reason_;
  std::optional<int> cause_replica_;
};

}  // namespace replicator::detail
