// ShmTransport: the processes of one host talking through shared memory (a ShmMesh), as a
// Transport of its own. The mpi and gloo engines meet their peers their own way (MPI's
// control communicator, Gloo's store), make and attach the mesh there, and compose this
// transport with theirs (split_transport.h): the gloo engine sends every message through it,
// the mpi engine those that half a ring holds.
//
// post() copies messages to this process itself at once (as the gloo transport does) and hands
// the rest to the mesh; wait() spins, yields, then parks on the lane's bell (or naps, where
// the mesh has no bells); test() moves what it can and returns.
//
// Failures: abort() writes this process's notice into its segment and flags it in every peer's
// (ShmMesh::announce_failure), so a peer's wait throws Aborted("process q failed: why", with
// the replica) at once. A peer whose process exited is PeerLost, or Aborted where it left a
// notice. A wait that fails (timeout, lost peer, a message longer than its receive) poisons
// the transport and announces it as abort() does; `on_fatal` hears first of those a peer may
// not survive (every failure but a peer's announced one).
//
// Threads: as Transport (one thread per lane at a time, different lanes at once; abort() from
// any thread at any time).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/comm/poison.h"
#include "src/engines/shm/shm_mesh.h"
#include "src/engines/transport.h"

namespace replicator::detail {

struct ShmTransportOptions {
  // The engine the transport serves, which its errors name ("gloo" -> "gloo engine: ...").
  std::string engine = "shm";
  // Messages up to this size may be posted before their receive (traits().eager_bytes).
  std::size_t eager_bytes = 4000;
  // A wait spins this long, then yields its core this long, then parks (or naps).
  std::chrono::microseconds spin{20};
  std::chrono::microseconds yield{0};
  // Told the reason of a failure a peer may not survive (timeout, lost peer, broken message)
  // before the exception is thrown. Must not throw.
  std::function<void(const std::string&)> on_fatal;
};

class ShmTransport final : public PolledTransport {
 public:
  // Takes a mesh every peer has attached to (ShmMesh::attach_offers or attach). Never blocks;
  // throws InvalidArgument for a null mesh.
  ShmTransport(std::unique_ptr<ShmMesh> mesh, ShmTransportOptions options);
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  std::string_view name() const override { return "shm"; }
  int rank() const override { return mesh_->rank(); }
  int size() const override { return mesh_->size(); }
  int num_lanes() const override { return mesh_->lanes(); }

  Ticket post(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override;
  void wait(int lane, Ticket ticket, Clock::time_point deadline) override;
  bool test(int lane, Ticket ticket) override;
  void abort(const std::string& why, std::optional<int> cause_replica) noexcept override;
  // Two copies and no handshake a message: receives may be longer than their message, none
  // is gained by posting early, and steps from 64 KiB to half a ring keep two in flight
  // without waiting for room. The mesh tells the host's processes each other's cores.
  TransportTraits traits() const override;

  // The mesh, for tests (ShmMesh::set_max_park).
  ShmMesh& mesh() { return *mesh_; }

 private:
  struct alignas(64) Lane {
    Ticket posted = 0;
    unsigned tests = 0;  // test() calls, to look for failed peers every so many
  };

  void check_lane(int lane) const;
  std::string where(int lane) const;
  // Poisons with `why` (the first reason is kept), announces it to the peers, wakes this
  // process's waits and forgets the lane's messages. Never throws.
  void fail(int lane, const std::string& why, std::optional<int> cause_replica) noexcept;
  [[noreturn]] void drop_poisoned(int lane);
  [[noreturn]] void throw_failure(int lane, const ShmMesh::WaitResult& result,
                                  Clock::time_point start, Clock::time_point deadline,
                                  Ticket ticket);
  [[noreturn]] void throw_peer_failure(int lane, int peer, const std::string& how);

  std::unique_ptr<ShmMesh> mesh_;
  const ShmTransportOptions options_;
  std::vector<Lane> lanes_;
  Poison poison_;
};

}  // namespace replicator::detail
