// SplitTransport; the contract is in split_transport.h.

#include "src/engines/split_transport.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <utility>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

// Polling schedule of a wait on both parts (as the mpi transport's own waits): spin, yield,
// then nap.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr auto kYield = std::chrono::milliseconds(50);
constexpr auto kNap = std::chrono::microseconds(50);
constexpr std::uint32_t kClockEvery = 16;  // polls between clock reads while spinning

}  // namespace

Transport::Ticket SplitTransport::Marks::upto(Ticket ticket) const {
  Ticket last = 0;
  for (std::size_t i = head; i < posts.size() && posts[i].first <= ticket; ++i) {
    last = posts[i].second;
  }
  return last;
}

void SplitTransport::Marks::done(Ticket ticket) {
  while (head < posts.size() && posts[head].first <= ticket) ++head;
  if (head == posts.size()) {
    posts.clear();
    head = 0;
  }
}

SplitTransport::SplitTransport(std::unique_ptr<Transport> network,
                               std::unique_ptr<PolledTransport> shared,
                               std::size_t shared_max_bytes)
    : network_(std::move(network)),
      shared_(std::move(shared)),
      polled_network_(dynamic_cast<PolledTransport*>(network_.get())),
      shared_max_bytes_(shared_max_bytes) {
  if (!network_ || !shared_) throw InvalidArgument("split transport: both parts are needed");
  if (network_->rank() != shared_->rank() || network_->size() != shared_->size() ||
      network_->num_lanes() != shared_->num_lanes()) {
    throw InvalidArgument(
        std::string(network_->name()) + " engine: its parts disagree (rank " +
        std::to_string(network_->rank()) + " of " + std::to_string(network_->size()) + ", " +
        std::to_string(network_->num_lanes()) + " lanes, against rank " +
        std::to_string(shared_->rank()) + " of " + std::to_string(shared_->size()) + ", " +
        std::to_string(shared_->num_lanes()) + " lanes through " + std::string(shared_->name()) +
        ")");
  }
  if (shared_max_bytes_ != SIZE_MAX && polled_network_ == nullptr) {
    throw InvalidArgument(std::string(network_->name()) +
                          " engine: its waits cannot be polled, so it cannot share a post with " +
                          std::string(shared_->name()) + "; send every message through " +
                          std::string(shared_->name()) + " instead");
  }
  lanes_ = std::vector<Lane>(static_cast<std::size_t>(network_->num_lanes()));
}

SplitTransport::~SplitTransport() {
  network_.reset();
  shared_.reset();
}

void SplitTransport::check_lane(int lane) const {
  if (lane < 0 || lane >= num_lanes()) {
    throw InvalidArgument(std::string(name()) + " engine: exchange on lane " +
                          std::to_string(lane) + ", but the transport has lanes 0.." +
                          std::to_string(num_lanes() - 1));
  }
}

Transport::Ticket SplitTransport::post(int lane, std::span<const SendOp> sends,
                                       std::span<const RecvOp> recvs) {
  check_lane(lane);
  // Every peer is checked before either part posts anything.
  const auto check_peer = [&](int peer, const char* what) {
    if (peer < 0 || peer >= size()) {
      throw InvalidArgument(std::string(name()) + " engine: exchange on lane " +
                            std::to_string(lane) + ": a " + what + " names process " +
                            std::to_string(peer) + ", but ranks are 0.." +
                            std::to_string(size() - 1));
    }
  };
  for (const RecvOp& op : recvs) check_peer(op.peer, "receive");
  for (const SendOp& op : sends) check_peer(op.peer, "send");
  if (poison_.is_set()) {
    wait(lane, lanes_[static_cast<std::size_t>(lane)].posted, Clock::now());  // throws
  }
  Lane& l = lanes_[static_cast<std::size_t>(lane)];
  if (shared_max_bytes_ == SIZE_MAX) {
    // Every message through shared memory: its tickets are the split's.
    try {
      l.posted = shared_->post(lane, sends, recvs);
    } catch (const InvalidArgument&) {
      throw;
    } catch (...) {
      release(*network_, lane, std::current_exception());
      throw;
    }
    return l.posted;
  }
  const auto shared_path = [&](int peer, std::size_t bytes) {
    return peer == rank() || bytes <= shared_max_bytes_;
  };
  l.shared_sends.clear();
  l.network_sends.clear();
  l.shared_recvs.clear();
  l.network_recvs.clear();
  for (const SendOp& op : sends) {
    (shared_path(op.peer, op.bytes) ? l.shared_sends : l.network_sends).push_back(op);
  }
  for (const RecvOp& op : recvs) {
    (shared_path(op.peer, op.bytes) ? l.shared_recvs : l.network_recvs).push_back(op);
  }
  const Ticket ticket = ++l.posted;
  if (!l.shared_sends.empty() || !l.shared_recvs.empty()) {
    try {
      l.shared.posts.emplace_back(ticket, shared_->post(lane, l.shared_sends, l.shared_recvs));
    } catch (const InvalidArgument&) {
      throw;
    } catch (...) {
      release(*network_, lane, std::current_exception());
      throw;
    }
  }
  if (!l.network_sends.empty() || !l.network_recvs.empty()) {
    try {
      l.network.posts.emplace_back(ticket, network_->post(lane, l.network_sends, l.network_recvs));
    } catch (...) {
      release(*shared_, lane, std::current_exception());
      throw;
    }
  }
  return ticket;
}

void SplitTransport::wait(int lane, Ticket ticket, Clock::time_point deadline) {
  check_lane(lane);
  Lane& l = lanes_[static_cast<std::size_t>(lane)];
  if (poison_.is_set()) {
    // Both parts are poisoned: each drops the lane's messages as it throws.
    for (Transport* part : {static_cast<Transport*>(shared_.get()), network_.get()}) {
      try {
        part->wait(lane, ticket, Clock::now());
      } catch (...) {
      }
    }
    l.shared = {};
    l.network = {};
    poison_.throw_aborted(std::string(name()) + " engine");
  }
  if (shared_max_bytes_ == SIZE_MAX) {
    try {
      shared_->wait(lane, ticket, deadline);
    } catch (...) {
      release(*network_, lane, std::current_exception());
      throw;
    }
    return;
  }
  Ticket shared = l.shared.upto(ticket);
  Ticket network = l.network.upto(ticket);
  if (shared != 0 && network != 0) poll_both(lane, shared, network, deadline);
  if (shared != 0) {
    try {
      shared_->wait(lane, shared, deadline);
    } catch (...) {
      release(*network_, lane, std::current_exception());
      throw;
    }
  }
  if (network != 0) {
    try {
      network_->wait(lane, network, deadline);
    } catch (...) {
      release(*shared_, lane, std::current_exception());
      throw;
    }
  }
  l.shared.done(ticket);
  l.network.done(ticket);
}

void SplitTransport::poll_both(int lane, Ticket& shared, Ticket& network,
                               Clock::time_point deadline) {
  Clock::time_point start{};
  bool spinning = true;
  for (std::uint32_t polls = 1;; ++polls) {
    bool shared_done = false;
    bool network_done = false;
    try {
      shared_done = shared_->test(lane, shared);
    } catch (...) {
      release(*network_, lane, std::current_exception());
      throw;
    }
    try {
      network_done = polled_network_->test(lane, network);
    } catch (...) {
      release(*shared_, lane, std::current_exception());
      throw;
    }
    if (shared_done) shared = 0;
    if (network_done) network = 0;
    if (shared_done || network_done) return;
    if (spinning && polls % kClockEvery != 0) continue;

    const Clock::time_point now = Clock::now();
    if (start == Clock::time_point{}) start = now;
    if (now >= deadline) return;  // the parts' own waits say who is missing
    const auto waited = now - start;
    if (waited < kSpin) continue;
    spinning = false;
    if (waited >= kYield) {
      std::this_thread::sleep_for(kNap);
    } else {
      sched_yield();
    }
  }
}

void SplitTransport::poison_with(Transport& other, const std::exception_ptr& failure) noexcept {
  std::string why = "a failure of the transport";
  std::optional<int> cause_replica;
  try {
    std::rethrow_exception(failure);
  } catch (const Aborted& e) {
    why = e.what();
    cause_replica = e.cause_replica();
  } catch (const std::exception& e) {
    try {
      why = e.what();
    } catch (...) {
    }
  } catch (...) {
  }
  poison_.set(why, cause_replica);
  other.abort(why, cause_replica);
}

void SplitTransport::release(Transport& other, int lane,
                             const std::exception_ptr& failure) noexcept {
  poison_with(other, failure);
  try {
    other.wait(lane, lanes_[static_cast<std::size_t>(lane)].posted, Clock::now());  // throws
  } catch (...) {
  }
  lanes_[static_cast<std::size_t>(lane)].shared = {};
  lanes_[static_cast<std::size_t>(lane)].network = {};
}

void SplitTransport::abort(const std::string& why, std::optional<int> cause_replica) noexcept {
  try {
    poison_.set("process " + std::to_string(rank()) + " failed: " + why, cause_replica);
  } catch (...) {
    poison_.set(why, cause_replica);
  }
  shared_->abort(why, cause_replica);
  network_->abort(why, cause_replica);
}

TransportTraits SplitTransport::traits() const {
  const TransportTraits shared = shared_->traits();
  TransportTraits network = network_->traits();
  if (shared_max_bytes_ == SIZE_MAX) {
    TransportTraits all = shared;
    all.native_sum_dtypes = network.native_sum_dtypes;
    return all;
  }
  network.eager_bytes =
      std::max(network.eager_bytes, std::min(shared.eager_bytes, shared_max_bytes_));
  network.shared_step_bytes = shared_max_bytes_;
  network.host_cores = shared.host_cores;
  network.one_host = shared.one_host;
  return network;
}

NativeCollectives& SplitTransport::native() { return native_of(*network_); }

void SplitTransport::native_all_reduce_f32(float* data, std::size_t count) {
  NativeCollectives& native_collectives = native();
  try {
    native_collectives.native_all_reduce_f32(data, count);
  } catch (...) {
    release(*shared_, 0, std::current_exception());
    throw;
  }
}

void SplitTransport::native_all_reduce(int lane, void* data, std::size_t count, DType dtype,
                                       ReduceOp op, Clock::time_point deadline) {
  NativeCollectives& native_collectives = native();
  try {
    native_collectives.native_all_reduce(lane, data, count, dtype, op, deadline);
  } catch (const InvalidArgument&) {
    throw;
  } catch (...) {
    release(*shared_, lane, std::current_exception());
    throw;
  }
}

template <typename Message>
void SplitTransport::SplitPointToPoint::guarded(Message&& message) {
  try {
    message(*split_.network_->point_to_point());
  } catch (const InvalidArgument&) {
    throw;
  } catch (...) {
    split_.poison_with(*split_.shared_, std::current_exception());
    throw;
  }
}

void SplitTransport::SplitPointToPoint::send(int peer, std::uint64_t tag, const Call& call,
                                             const void* data, Clock::time_point deadline) {
  guarded([&](PointToPoint& p2p) { p2p.send(peer, tag, call, data, deadline); });
}

void SplitTransport::SplitPointToPoint::recv(int peer, std::uint64_t tag, const Call& call,
                                             void* data, Clock::time_point deadline) {
  guarded([&](PointToPoint& p2p) { p2p.recv(peer, tag, call, data, deadline); });
}

}  // namespace replicator::detail
