// ShmTransport; the contract is in shm_transport.h.

#include "src/engines/shm/shm_transport.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "src/comm/poison.h"
#include "src/engines/abort_notice.h"
#include "src/engines/exchange_errors.h"
#include "src/engines/self_copy.h"

namespace replicator::detail {
namespace {

// test() looks at the peers' flags and processes once every this many calls: a pidfd poll a
// peer each, too dear for every call of a spinning wait.
constexpr unsigned kTestsBetweenLooks = 64;

class ShmTransport final : public PolledTransport {
 public:
  ShmTransport(std::unique_ptr<ShmMesh> mesh, ShmOptions options);
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
  TransportTraits traits() const override;

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
  const ShmOptions options_;
  std::vector<Lane> lanes_;
  Poison poison_;
};

ShmTransport::ShmTransport(std::unique_ptr<ShmMesh> mesh, ShmOptions options)
    : mesh_(std::move(mesh)), options_(std::move(options)) {
  lanes_ = std::vector<Lane>(static_cast<std::size_t>(mesh_->lanes()));
}

std::string ShmTransport::where(int lane) const {
  return options_.engine + " engine: exchange on lane " + std::to_string(lane);
}

void ShmTransport::check_lane(int lane) const {
  if (lane < 0 || lane >= num_lanes()) {
    throw InvalidArgument(where(lane) + ", but the transport has lanes 0.." +
                          std::to_string(num_lanes() - 1));
  }
}

Transport::Ticket ShmTransport::post(int lane, std::span<const SendOp> sends,
                                     std::span<const RecvOp> recvs) {
  check_lane(lane);
  const auto check_peer = [&](int peer, const char* what) {
    if (peer < 0 || peer >= size()) {
      throw InvalidArgument(where(lane) + ": a " + what + " names process " + std::to_string(peer) +
                            ", but ranks are 0.." + std::to_string(size() - 1));
    }
  };
  bool self = false;
  for (const RecvOp& op : recvs) {
    check_peer(op.peer, "receive");
    self = self || op.peer == rank();
  }
  for (const SendOp& op : sends) {
    check_peer(op.peer, "send");
    self = self || op.peer == rank();
  }
  if (poison_.is_set()) drop_poisoned(lane);
  if (self) copy_to_self(options_.engine, rank(), lane, sends, recvs);
  const Ticket ticket = ++lanes_[static_cast<std::size_t>(lane)].posted;
  mesh_->post(lane, ticket, sends, recvs);
  return ticket;
}

void ShmTransport::wait(int lane, Ticket ticket, Clock::time_point deadline) {
  check_lane(lane);
  if (poison_.is_set()) drop_poisoned(lane);
  // One look first: a small message between spinning processes has arrived by now, and then
  // the wait reads no clock.
  ShmMesh::WaitResult result;
  if (mesh_->poll(lane, ticket, &result)) return;
  const Clock::time_point start = Clock::now();
  if (result.outcome == ShmMesh::Outcome::kDone) {
    result = mesh_->wait(lane, ticket, deadline, options_.spin, options_.yield, poison_);
  }
  if (result.outcome != ShmMesh::Outcome::kDone) {
    throw_failure(lane, result, start, deadline, ticket);
  }
}

bool ShmTransport::test(int lane, Ticket ticket) {
  check_lane(lane);
  if (poison_.is_set()) drop_poisoned(lane);
  ShmMesh::WaitResult result;
  if (mesh_->poll(lane, ticket, &result)) return true;
  const Clock::time_point now = Clock::now();
  if (result.outcome != ShmMesh::Outcome::kDone) throw_failure(lane, result, now, now, ticket);
  Lane& l = lanes_[static_cast<std::size_t>(lane)];
  if (++l.tests % kTestsBetweenLooks == 0) {
    const ShmMesh::WaitResult failure = mesh_->peer_failure();
    if (failure.outcome != ShmMesh::Outcome::kDone) {
      // What a gone peer wrote before it died still counts.
      if (failure.outcome == ShmMesh::Outcome::kPeerGone && mesh_->poll(lane, ticket, &result)) {
        return true;
      }
      throw_failure(lane, result.outcome != ShmMesh::Outcome::kDone ? result : failure, now, now,
                    ticket);
    }
  }
  return false;
}

void ShmTransport::throw_failure(int lane, const ShmMesh::WaitResult& result,
                                 Clock::time_point start, Clock::time_point deadline,
                                 Ticket ticket) {
  switch (result.outcome) {
    case ShmMesh::Outcome::kDone:
    case ShmMesh::Outcome::kPoisoned:
      drop_poisoned(lane);
    case ShmMesh::Outcome::kTimedOut: {
      bool receives_done = false;
      std::vector<int> missing = mesh_->missing(lane, ticket, &receives_done);
      const auto limit = std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - start),
                                  std::chrono::milliseconds::zero());
      const std::string why =
          exchange_timeout_text(options_.engine, lane, missing, receives_done, limit);
      if (options_.on_fatal) options_.on_fatal(why);
      fail(lane, why, std::nullopt);
      throw Timeout(why, "exchange", 0, limit, std::move(missing));
    }
    case ShmMesh::Outcome::kPeerFailed:
      throw_peer_failure(lane, result.peer, "it announced a failure in shared memory");
    case ShmMesh::Outcome::kPeerGone:
      throw_peer_failure(lane, result.peer, "its process exited");
    case ShmMesh::Outcome::kTooLong:
      break;
  }
  const std::string why = where(lane) + ": process " + std::to_string(result.peer) +
                          " sent a message of " + std::to_string(result.sent) +
                          " bytes to a receive of " + std::to_string(result.expected) +
                          " bytes; the transport is poisoned, restart the job";
  if (options_.on_fatal) options_.on_fatal(why);
  fail(lane, why, std::nullopt);
  throw Error(why);
}

void ShmTransport::throw_peer_failure(int lane, int peer, const std::string& how) {
  // A notice is written before the flag that announces it, and before the process exits.
  const std::string notice = mesh_->notice_of(peer);
  if (!notice.empty()) {
    const AbortNotice announced = decode_abort_notice(notice);
    const std::string why = "process " + std::to_string(peer) + " failed: " + announced.why;
    fail(lane, why, announced.replica);
    throw Aborted(why, announced.replica);
  }
  const std::string why = where(lane) + ": lost process " + std::to_string(peer) + " (" + how +
                          "); the transport is poisoned, restart the job";
  if (options_.on_fatal) options_.on_fatal(why);
  fail(lane, why, std::nullopt);
  throw PeerLost(why, peer);
}

void ShmTransport::drop_poisoned(int lane) {
  mesh_->drop(lane);
  poison_.throw_aborted(options_.engine + " engine");
}

void ShmTransport::fail(int lane, const std::string& why,
                        std::optional<int> cause_replica) noexcept {
  poison_.set(why, cause_replica);
  try {
    mesh_->announce_failure(encode_abort_notice(cause_replica, why));
  } catch (...) {
    mesh_->announce_failure();  // out of memory for the notice: the flag alone
  }
  mesh_->wake_local();
  mesh_->drop(lane);
}

void ShmTransport::abort(const std::string& why, std::optional<int> cause_replica) noexcept {
  try {
    poison_.set("process " + std::to_string(rank()) + " failed: " + why, cause_replica);
    mesh_->announce_failure(encode_abort_notice(cause_replica, why));
  } catch (...) {
    poison_.set(why, cause_replica);
    mesh_->announce_failure();
  }
  mesh_->wake_local();
}

TransportTraits ShmTransport::traits() const {
  constexpr std::size_t kMinStepBytes = std::size_t{64} << 10;
  return {.receives_ahead = false,
          .receives_shorter = true,
          .streamed_results = false,
          .eager_bytes = options_.eager_bytes,
          .min_step_bytes = kMinStepBytes,
          .max_step_bytes = std::max(kMinStepBytes, mesh_->ring_bytes() / 2),
          .host_cores = mesh_.get(),
          .one_host = true};
}

}  // namespace

std::unique_ptr<PolledTransport> make_shm_transport(std::unique_ptr<ShmMesh> mesh,
                                                    ShmOptions options) {
  if (!mesh) throw InvalidArgument("shared memory: a transport needs a mesh");
  return std::make_unique<ShmTransport>(std::move(mesh), std::move(options));
}

}  // namespace replicator::detail
