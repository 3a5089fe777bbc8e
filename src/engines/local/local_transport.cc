// The local transport; the contract is in local_transport.h and transport.h.

#include "src/engines/local/local_transport.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "replicator/errors.h"
#include "src/comm/poison.h"
#include "src/engines/self_copy.h"

namespace replicator::detail {
namespace {

class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(int lanes) : posted_(static_cast<std::size_t>(lanes)) {}

  std::string_view name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int num_lanes() const override { return static_cast<int>(posted_.size()); }

  Ticket post(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override {
    check_lane(lane);
    for (const RecvOp& op : recvs) check_peer(lane, op.peer, "receive");
    for (const SendOp& op : sends) check_peer(lane, op.peer, "send");
    if (poison_.is_set()) poison_.throw_aborted("local engine");
    copy_to_self("local", 0, lane, sends, recvs);
    return ++posted_[static_cast<std::size_t>(lane)].last;
  }

  // Every message completed in its post.
  void wait(int lane, Ticket /*ticket*/, Clock::time_point /*deadline*/) override {
    check_lane(lane);
    if (poison_.is_set()) poison_.throw_aborted("local engine");
  }

  // No peer to tell.
  void abort(const std::string& why, std::optional<int> cause_replica) noexcept override {
    poison_.set("process 0 failed: " + why, cause_replica);
  }

  // A message is a copy in post(): any length goes at once.
  TransportTraits traits() const override {
    return {.receives_ahead = false,
            .receives_shorter = false,
            .streamed_results = false,
            .eager_bytes = SIZE_MAX};
  }

 private:
  // The last ticket of a lane, apart from the others' (one thread per lane).
  struct alignas(64) Lane {
    Ticket last = 0;
  };

  void check_lane(int lane) const {
    if (lane < 0 || lane >= num_lanes()) {
      throw InvalidArgument("local engine: exchange on lane " + std::to_string(lane) +
                            ", but the transport has lanes 0.." + std::to_string(num_lanes() - 1));
    }
  }
  static void check_peer(int lane, int peer, const char* what) {
    if (peer != 0) {
      throw InvalidArgument("local engine: exchange on lane " + std::to_string(lane) + ": a " +
                            what + " names process " + std::to_string(peer) +
                            ", but a job of one process has only process 0");
    }
  }

  std::vector<Lane> posted_;
  Poison poison_;
};

}  // namespace

std::unique_ptr<Transport> make_local_transport(const LocalOptions& options) {
  if (options.lanes < 1) {
    throw InvalidArgument("local engine: a transport needs at least 1 lane, got " +
                          std::to_string(options.lanes));
  }
  return std::make_unique<LocalTransport>(options.lanes);
}

}  // namespace replicator::detail
