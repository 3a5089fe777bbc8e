#include "src/core/local_group.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

// Staging area per replica and parity.
constexpr std::size_t kStagingBytes = 16 * 1024;

// The staged (one-barrier) path is taken up to this many bytes. With a core per replica
// the direct path wins from about 1 KiB (measured: its second barrier costs less than
// pulling R copies across cores); with more replicas than cores every barrier costs
// futex wake-ups, so the one-barrier path pays for longer.
std::size_t staged_threshold(int n) {
  const bool oversubscribed =
      static_cast<unsigned>(n) > std::max(1u, std::thread::hardware_concurrency());
  return oversubscribed ? kStagingBytes : 1024;
}

std::string replica_list(const std::vector<int>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

struct LocalGroup::Slot {
  Slot(int n, std::size_t staging_bytes) : scratch(n), in_ptrs(n), out_ptrs(n) {
    for (auto& area : staging) {
      // Whole cache lines of its own: no false sharing with a peer's area.
      area.reset(new (std::align_val_t{64}) std::byte[staging_bytes]);
      std::memset(area.get(), 0, staging_bytes);  // fault the pages in once, now
    }
  }

  // Published to peers (read by them between the barrier and the next phase).
  // By parity of the sequence number, which every replica advances in step: a replica
  // cannot start collective k+2 (and overwrite k's slot) before all have arrived at k+1,
  // that is, before all have finished reading slot k.
  Descriptor desc[2];
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], AlignedDelete> staging[2];
  alignas(64) std::atomic<std::uint64_t> arrived_phase{0};

  // Owned by the replica's thread.
  alignas(64) std::uint64_t phase = 0;
  std::uint64_t departures = 0;
  ReduceScratch scratch;
  LaneScratch lane;                         // collectives across processes
  std::vector<const Descriptor*> calls[2];  // calls[p][j] = &slot j's desc[p]
  std::vector<std::byte*> staging_of[2];    // staging_of[p][j] = slot j's staging[p]
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
};

LocalGroup::LocalGroup(int num_replicas, std::chrono::milliseconds timeout,
                       std::chrono::microseconds spin, const ProcessLayout* layout)
    : n_(num_replicas),
      layout_(layout),
      first_(layout ? layout->rank * num_replicas : 0),
      total_(layout ? layout->replicas() : num_replicas),
      timeout_(timeout),
      spin_(spin),  // the Replicator turns spinning off when the host is oversubscribed
      staging_capacity_(staged_threshold(num_replicas)) {
  slots_.reserve(static_cast<std::size_t>(n_));
  for (int j = 0; j < n_; ++j) slots_.push_back(std::make_unique<Slot>(n_, kStagingBytes));
  for (auto& slot : slots_) {
    for (int p = 0; p < 2; ++p) {
      for (auto& peer : slots_) {
        slot->calls[p].push_back(&peer->desc[p]);
        slot->staging_of[p].push_back(peer->staging[p].get());
      }
    }
  }
}

LocalGroup::~LocalGroup() = default;

void LocalGroup::collective(int me, std::uint64_t& sequence, const Call& call) {
  Slot& slot = *slots_[static_cast<std::size_t>(me)];
  const std::chrono::milliseconds timeout = call.timeout.value_or(timeout_);
  if (timeout.count() <= 0) {
    throw InvalidArgument(std::string(op_name(call.kind)) + ": timeout must be positive, got " +
                          std::to_string(timeout.count()) + "ms");
  }
  const int parity = static_cast<int>(sequence & 1);
  Descriptor& d = slot.desc[parity];
  d = describe_call(call, first_ + me, total_);
  d.sequence = sequence++;
  if (total_ == 1) return run_single(d, slot.scratch);

  const auto deadline = Waiter::Clock::now() + timeout;
  // Across processes the local part always works on the replicas' own buffers.
  const Path path = layout_ ? Path::kDirect : choose_path(d, me, staging_capacity_);
  if (path == Path::kStaged) stage(d, me, slot.staging[parity].get());

  arrive_and_wait(me, d, deadline, timeout);
  const std::span<const Descriptor* const> calls(slot.calls[parity]);
  check_match(me, d, calls);

  const Peers peers{.me = me,
                    .n = n_,
                    .path = path,
                    .calls = calls,
                    .staging = slot.staging_of[parity],
                    .scratch = &slot.scratch,
                    .in_ptrs = slot.in_ptrs,
                    .out_ptrs = slot.out_ptrs};
  if (layout_) {
    try {
      cross_process(peers, *layout_, slot.lane, deadline);
    } catch (const CollectiveMismatch& e) {
      // Every lane of every process reads the same frames and raises the same mismatch:
      // nobody is left waiting, so the transport stays as it is.
      fail(first_ + me, e.what());
      depart(me);
      throw;
    } catch (const Error& e) {
      // Release this process's other replicas, including those in an exchange (their
      // lanes), and leave only once none of them touches this replica's buffers.
      fail(first_ + me, e.what());
      layout_->transport->abort(e.what());
      depart(me);
      throw;
    }
    depart(me);
    const std::uint64_t seen = arrivals_.load(std::memory_order_acquire);
    if (seen & kPoison) throw_poisoned(me);
    return;
  }
  switch (d.kind) {
    case OpKind::kAllReduce: all_reduce(peers); break;
    case OpKind::kBroadcast: broadcast(peers); break;
    case OpKind::kAllGather: all_gather(peers); break;
    case OpKind::kReduceScatter: reduce_scatter(peers); break;
    case OpKind::kAllToAll: all_to_all(peers); break;
    case OpKind::kPermute: permute(peers); break;
    case OpKind::kBarrier:
    case OpKind::kEndStep: break;
  }
  if (path == Path::kDirect) arrive_and_wait(me, d, deadline, timeout);
}

void LocalGroup::arrive_and_wait(int me, const Descriptor& d, Waiter::Clock::time_point deadline,
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
        std::string(op_name(d.kind)) + " #" + std::to_string(d.sequence) + " (" + d.describe() +
        ") timed out after " + std::to_string(timeout.count()) + " ms: replica" +
        (missing.size() == 1 ? " " : "s ") + replica_list(missing) +
        " never arrived. Check that every replica issues the same collectives, or raise the "
        "timeout (Config::timeout or the call's timeout option).";
    cause_ = Cause{.timed_out = true,
                   .replica = first_ + me,
                   .what = what,
                   .op = std::string(op_name(d.kind)),
                   .sequence = d.sequence,
                   .deadline = timeout,
                   .missing = missing};
    lock.unlock();
    waiter_.notify();
    throw Timeout(what, std::string(op_name(d.kind)), d.sequence, timeout, std::move(missing));
  }
}

bool LocalGroup::phase_complete(int me, std::uint64_t seen, std::uint64_t target) {
  if ((seen & kPoison) == 0) return seen >= target;
  if (poisoned_at_.load(std::memory_order_relaxed) >= target) return true;
  throw_poisoned(me);
}

bool LocalGroup::poison(std::optional<std::uint64_t> expected) {
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

void LocalGroup::throw_poisoned(int local_me) {
  const int me = first_ + local_me;
  std::unique_lock lock(mu_);
  const Cause cause = cause_.value_or(Cause{.what = "the group was stopped"});
  lock.unlock();
  if (cause.timed_out) {
    if (std::find(cause.missing.begin(), cause.missing.end(), me) == cause.missing.end()) {
      throw Timeout(cause.what, cause.op, cause.sequence, cause.deadline, cause.missing);
    }
    throw Aborted("replica " + std::to_string(me) + " was released: its peers timed out waiting "
                  "for it at " + cause.op + " #" + std::to_string(cause.sequence) + " (" +
                  cause.what + ")",
                  cause.replica);
  }
  throw Aborted("replica " + std::to_string(me) + " was released from its collective because "
                "replica " + std::to_string(cause.replica) + " failed: " + cause.what,
                cause.replica);
}

void LocalGroup::check_match(int me, const Descriptor& d,
                             std::span<const Descriptor* const> calls) {
  bool same = true;
  for (const Descriptor* other : calls) same = same && other->matches(*calls[0]);
  if (same) return;
  std::vector<std::string> described;
  for (const Descriptor* other : calls) described.push_back(other->describe());
  std::string message = "collective #" + std::to_string(d.sequence) +
                        " does not match across replicas: ";
  for (std::size_t j = 0; j < described.size();) {
    std::size_t k = j;
    while (k + 1 < described.size() && described[k + 1] == described[j]) ++k;
    message += (j ? "; " : "") + std::string(k > j ? "replicas " : "replica ") +
               std::to_string(first_ + static_cast<int>(j)) +
               (k > j ? "-" + std::to_string(first_ + static_cast<int>(k)) : "") + " called " +
               described[j];
    j = k + 1;
  }
  message += ". Every replica must issue the same collectives in the same order, with the "
             "same dtype, size, root and reduce op (seen by replica " + std::to_string(first_ + me) +
             ").";
  throw CollectiveMismatch(message, d.sequence, std::move(described));
}

void LocalGroup::depart(int me) {
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

void LocalGroup::fail(int replica, const std::string& what) {
  {
    std::lock_guard lock(mu_);
    if (!cause_) cause_ = Cause{.replica = replica, .what = what};
    poison(std::nullopt);
  }
  waiter_.notify();
}

void LocalGroup::reset() {
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
