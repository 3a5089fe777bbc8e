// A transport made of two: a `shared` one (shared memory between the processes of one host,
// shm/shm_transport.h) that carries every message up to `shared_max_bytes` and every message
// of a process to itself, and a `network` one (MPI, Gloo) that carries the rest and the
// engine's own collectives. The mpi engine splits at half a ring; the gloo engine sends
// everything through shared memory (SIZE_MAX) and keeps Gloo's connections for its store,
// its failure notices and gloo::allreduce.
//
// A send and its receive take the same path as long as both are up to `shared_max_bytes` or
// both are longer (a receive may be longer than its message only where the message is a
// frame, far below any split), so each path keeps the order of its own messages.
//
// post() posts to each part only the messages it carries (everything, with its tickets, where
// the shared part carries every message); wait() waits on the one part a post used, or,
// where it used both, polls both in one loop (spin 20 µs, then yield for 50 ms, then nap
// 50 µs) until one has completed, then waits on the other. A failure of either part poisons
// the whole: the other part is aborted with the same reason (its peers hear of it on that
// path too) and its messages on the lane are dropped.
//
// Threads: as Transport.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/comm/poison.h"
#include "src/engines/native.h"
#include "src/engines/transport.h"

namespace replicator::detail {

class SplitTransport final : public Transport, public NativeCollectives {
 public:
  // The two must have the same rank, size and lanes (else InvalidArgument). Where the split
  // is by size (`shared_max_bytes` < SIZE_MAX), the network must be a PolledTransport
  // (InvalidArgument otherwise): one post may then wait on both. Never blocks.
  SplitTransport(std::unique_ptr<Transport> network, std::unique_ptr<PolledTransport> shared,
                 std::size_t shared_max_bytes);
  // Closes the network part first (the gloo engine says goodbye there), then the shared one.
  ~SplitTransport() override;
  SplitTransport(const SplitTransport&) = delete;
  SplitTransport& operator=(const SplitTransport&) = delete;

  std::string_view name() const override { return network_->name(); }
  int rank() const override { return network_->rank(); }
  int size() const override { return network_->size(); }
  int num_lanes() const override { return network_->num_lanes(); }
  // The network transport's point-to-point messages (they do not go through shared memory);
  // a failure of one poisons the shared-memory side too.
  PointToPoint* point_to_point() override {
    return network_->point_to_point() != nullptr ? &point_to_point_ : nullptr;
  }

  Ticket post(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override;
  void wait(int lane, Ticket ticket, Clock::time_point deadline) override;
  void abort(const std::string& why, std::optional<int> cause_replica) noexcept override;
  // Everything through shared memory: the shared part's traits. Split by size: the network's,
  // with the shared part's eager size (up to the split), the split as shared_step_bytes, and
  // the shared part's host cores.
  TransportTraits traits() const override;

  // The network part's own collectives (InvalidArgument where it has none); a failure there
  // aborts the shared part too.
  void native_all_reduce_f32(float* data, std::size_t count) override;
  void native_all_reduce(int lane, void* data, std::size_t count, DType dtype, ReduceOp op,
                         Clock::time_point deadline) override;

 private:
  // A part's ticket for each of the split's posts that used it, oldest first.
  struct Marks {
    std::vector<std::pair<Ticket, Ticket>> posts;  // (the split's ticket, the part's)
    std::size_t head = 0;
    // The part's last ticket among the posts up to `ticket` not yet waited for; 0: none.
    Ticket upto(Ticket ticket) const;
    // Forgets the posts up to `ticket`.
    void done(Ticket ticket);
  };
  struct alignas(64) Lane {
    Ticket posted = 0;
    Marks shared;
    Marks network;
    // The messages of one post, by part; kept to reuse their memory.
    std::vector<SendOp> shared_sends, network_sends;
    std::vector<RecvOp> shared_recvs, network_recvs;
  };

  void check_lane(int lane) const;
  // Poll both parts until one has completed the lane's posts up to its ticket, or the
  // deadline passes; clears the ticket of each part that completed.
  void poll_both(int lane, Ticket& shared, Ticket& network, Clock::time_point deadline);
  // After one part threw `failure`: poisons the split and aborts the `other` part with the
  // same reason. Never throws.
  void poison_with(Transport& other, const std::exception_ptr& failure) noexcept;
  // poison_with(), then has the `other` part drop the lane's messages. Never throws.
  void release(Transport& other, int lane, const std::exception_ptr& failure) noexcept;
  NativeCollectives& native();

  // The network part's point-to-point messages; a failure (not a bad argument) poisons the
  // split and aborts the shared part with the same reason, so that the lanes fail too.
  class SplitPointToPoint final : public PointToPoint {
   public:
    explicit SplitPointToPoint(SplitTransport& split) : split_(split) {}
    void send(int peer, std::uint64_t tag, const Call& call, const void* data,
              Clock::time_point deadline) override;
    void recv(int peer, std::uint64_t tag, const Call& call, void* data,
              Clock::time_point deadline) override;

   private:
    template <typename Message>
    void guarded(Message&& message);
    SplitTransport& split_;
  };

  std::unique_ptr<Transport> network_;
  std::unique_ptr<PolledTransport> shared_;
  PolledTransport* polled_network_;  // network_ where it is one, else null
  const std::size_t shared_max_bytes_;
  std::vector<Lane> lanes_;
  Poison poison_;
  SplitPointToPoint point_to_point_{*this};
};

}  // namespace replicator::detail
