#include "src/engines/local/local_engine.h"

#include <algorithm>
#include <cstring>

#include "replicator/errors.h"
#include "src/comm/site_files.h"

namespace replicator::detail {
namespace {

std::string replica_list(const std::vector<int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

struct LocalEngine::Slot {
  explicit Slot(std::size_t staging_bytes) {
    for (auto& area : staging) {
      // Whole cache lines of its own: no false sharing with a peer's area.
      area.reset(new (std::align_val_t{64}) std::byte[staging_bytes]);
      std::memset(area.get(), 0, staging_bytes);  // fault the pages in once, now
    }
  }

  // Published to peers (read by them between the barrier and the next phase), by parity of
  // the sequence number.
  Descriptor desc[2];
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], AlignedDelete> staging[2];
  alignas(64) std::atomic<std::uint64_t> arrived_phase{0};

  // Owned by the replica's thread.
  alignas(64) std::uint64_t phase = 0;
  std::uint64_t departures = 0;
  std::vector<const Descriptor*> calls[2];  // calls[p][j] = &slot j's desc[p]
  std::vector<std::byte*> staging_of[2];    // staging_of[p][j] = slot j's staging[p]
};

LocalEngine::LocalEngine(int num_replicas, int first, int total, std::chrono::milliseconds timeout,
                         std::chrono::microseconds spin)
    : n_(num_replicas), first_(first), total_(total), timeout_(timeout), spin_(spin) {
  slots_.reserve(static_cast<std::size_t>(n_));
  for (int j = 0; j < n_; ++j) slots_.push_back(std::make_unique<Slot>(kStagingBytes));
  for (auto& slot : slots_) {
    for (int p = 0; p < 2; ++p) {
      for (auto& peer : slots_) {
        slot->calls[p].push_back(&peer->desc[p]);
        slot->staging_of[p].push_back(peer->staging[p].get());
      }
    }
  }
}

LocalEngine::~LocalEngine() = default;

Descriptor& LocalEngine::descriptor(int me, int parity) {
  return slots_[static_cast<std::size_t>(me)]->desc[parity];
}

std::byte* LocalEngine::staging(int me, int parity) {
  return slots_[static_cast<std::size_t>(me)]->staging[parity].get();
}

std::span<const Descriptor* const> LocalEngine::calls(int me, int parity) const {
  return slots_[static_cast<std::size_t>(me)]->calls[parity];
}

std::span<std::byte* const> LocalEngine::staging_of(int me, int parity) const {
  return slots_[static_cast<std::size_t>(me)]->staging_of[parity];
}

void LocalEngine::check_poison(int me) {
  const std::uint64_t seen = arrivals_.load(std::memory_order_acquire);
  if (seen & kPoison) throw_poisoned(me);
}

void LocalEngine::arrive_and_wait(int me, const Descriptor& d, Waiter::Clock::time_point deadline,
                                  std::chrono::milliseconds timeout) {
  Slot& slot = *slots_[static_cast<std::size_t>(me)];
  const std::uint64_t phase = ++slot.phase;
  slot.arrived_phase.store(phase, std::memory_order_relaxed);
  const std::uint64_t target = phase * static_cast<std::uint64_t>(n_);
  const std::uint64_t now = arrivals_.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (phase_complete(me, now, target)) {
    if (now == target) waiter_.notify();
    return;
  }
  for (;;) {
    waiter_.wait(
        [&] {
          const std::uint64_t a = arrivals_.load(std::memory_order_acquire);
          return (a & kPoison) != 0 || a >= target;
        },
        deadline, spin_);
    const std::uint64_t seen = arrivals_.load(std::memory_order_acquire);
    if (phase_complete(me, seen, target)) return;
    if (Waiter::Clock::now() < deadline) continue;  // woken early; wait again

    // Deadline passed with the phase incomplete: poison at exactly this count, so the
    // phase can never complete behind our back (a late arrival sees the poison bit).
    std::unique_lock lock(mu_);
    if (!poison(seen)) continue;  // someone arrived or poisoned meanwhile: look again
    std::vector<int> missing;
    for (int j = 0; j < n_; ++j) {
      if (slots_[static_cast<std::size_t>(j)]->arrived_phase.load(std::memory_order_relaxed) <
          phase) {
        missing.push_back(first_ + j);
      }
    }
    const std::string what =
        std::string(d.name()) + " #" + std::to_string(d.sequence) + " (" + d.describe() + ")" +
        site_suffix(d.call.where) + " timed out after " + std::to_string(timeout.count()) +
        " ms: replica" + (missing.size() == 1 ? " " : "s ") + replica_list(missing) +
        " never arrived. Check that every replica issues the same collectives, or raise the "
        "timeout (Config::timeout or the call's timeout option).";
    cause_ = Cause{.timed_out = true,
                   .replica = first_ + me,
                   .what = what,
                   .op = std::string(d.name()),
                   .sequence = d.sequence,
                   .deadline = timeout,
                   .missing = missing};
    lock.unlock();
    waiter_.notify();
    throw Timeout(what, std::string(d.name()), d.sequence, timeout, std::move(missing));
  }
}

bool LocalEngine::phase_complete(int me, std::uint64_t seen, std::uint64_t target) {
  if ((seen & kPoison) == 0) return seen >= target;
  if (poisoned_at_.load(std::memory_order_relaxed) >= target) return true;
  throw_poisoned(me);
}

bool LocalEngine::poison(std::optional<std::uint64_t> expected) {
  std::uint64_t seen = expected.value_or(arrivals_.load(std::memory_order_acquire));
  for (;;) {
    if (seen & kPoison) return !expected;  // already poisoned
    poisoned_at_.store(seen, std::memory_order_relaxed);
    if (arrivals_.compare_exchange_strong(seen, seen | kPoison, std::memory_order_acq_rel)) {
      return true;
    }
    if (expected) return false;
  }
}

void LocalEngine::throw_poisoned(int local_me) {
  const int me = first_ + local_me;
  std::unique_lock lock(mu_);
  const Cause cause = cause_.value_or(Cause{.what = "the group was stopped"});
  lock.unlock();
  if (cause.timed_out) {
    if (std::find(cause.missing.begin(), cause.missing.end(), me) == cause.missing.end()) {
      throw Timeout(cause.what, cause.op, cause.sequence, cause.deadline, cause.missing);
    }
    throw Aborted("replica " + std::to_string(me) +
                      " was released: its peers timed out waiting "
                      "for it at " +
                      cause.op + " #" + std::to_string(cause.sequence) + " (" + cause.what + ")",
                  cause.replica);
  }
  throw Aborted("replica " + std::to_string(me) +
                    " was released from its collective because "
                    "replica " +
                    std::to_string(cause.replica) + " failed: " + cause.what,
                cause.replica);
}

void LocalEngine::depart(int me) {
  Slot& slot = *slots_[static_cast<std::size_t>(me)];
  const std::uint64_t target = ++slot.departures * static_cast<std::uint64_t>(n_);
  if (departures_.fetch_add(1, std::memory_order_acq_rel) + 1 == target) {
    waiter_.notify();
    return;
  }
  const auto done = [&] { return departures_.load(std::memory_order_acquire) >= target; };
  while (!waiter_.wait(done, Waiter::Clock::now() + std::chrono::seconds(1), spin_)) {
  }
}

void LocalEngine::fail(int replica, const std::string& what) {
  {
    std::lock_guard lock(mu_);
    if (!cause_) cause_ = Cause{.replica = replica, .what = what};
    poison(std::nullopt);
  }
  waiter_.notify();
}

void LocalEngine::reset() {
  arrivals_.store(0, std::memory_order_relaxed);
  poisoned_at_.store(0, std::memory_order_relaxed);
  departures_.store(0, std::memory_order_relaxed);
  cause_.reset();
  for (auto& slot : slots_) {
    slot->phase = 0;
    slot->departures = 0;
    slot->arrived_phase.store(0, std::memory_order_relaxed);
  }
}

}  // namespace replicator::detail
