// An in-memory Transport for tests: P endpoints in one process, one FIFO of messages per
// (lane, source, destination). Lets the algorithms across processes run under the unit
// tests and the sanitizers without MPI or sockets.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "replicator/errors.h"
#include "src/engines/native.h"
#include "src/engines/transport.h"

namespace replicator::testing {

class FakeNetwork : public std::enable_shared_from_this<FakeNetwork> {
 public:
  // `receives_ahead`, `receives_shorter`: what the endpoints' traits() say (every way of the
  // algorithms runs over it). A message longer than its receive, or shorter where receives_shorter
  // is false, fails the wait. Where receives may be shorter, the network is like OpenMPI's
  // shared memory: 4000 bytes go out eagerly (so frames carry up to that), and the endpoints
  // have an all-reduce of their own (sums, in rank order) that the chooser may pick.
  // `one_host`: the endpoints say that every process runs on this host, so device memory
  // moves between them without the host (the fake device's shared memory).
  explicit FakeNetwork(int processes, bool receives_ahead = true, bool receives_shorter = false,
                       bool one_host = false)
      : processes_(processes),
        receives_ahead_(receives_ahead),
        receives_shorter_(receives_shorter),
        one_host_(one_host) {}

  // The endpoint of process `rank`, with `lanes` lanes.
  std::unique_ptr<detail::Transport> endpoint(int rank, int lanes);

  int processes() const { return processes_; }
  // How many all-reduces of the endpoints' own ran (one per lane and process).
  std::atomic<int> native_calls{0};

 private:
  friend class FakeTransport;
  using Key = std::tuple<int, int, int>;  // lane, source, destination
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<std::vector<std::byte>>> queues_;
  std::vector<std::string> aborted_by_;  // messages of processes that aborted
  std::optional<int> first_cause_;       // the first abort's cause replica
  int processes_;
  bool receives_ahead_;
  bool receives_shorter_;
  bool one_host_;
};

class FakeTransport : public detail::Transport, public detail::NativeCollectives {
 public:
  FakeTransport(std::shared_ptr<FakeNetwork> network, int rank, int lanes)
      : network_(std::move(network)), rank_(rank), lanes_(lanes) {}

  std::string_view name() const override { return "fake"; }
  int rank() const override { return rank_; }
  int size() const override { return network_->processes(); }
  int num_lanes() const override { return lanes_; }

  // Sends are queued at once; receives wait in their lane's list until a wait() covers them.
  Ticket post(int lane, std::span<const detail::SendOp> sends,
              std::span<const detail::RecvOp> recvs) override {
    FakeNetwork& net = *network_;
    Lane& l = lanes_state_.at(static_cast<std::size_t>(lane));
    const Ticket ticket = ++l.posted;
    for (const auto& r : recvs) l.recvs.push_back({r, ticket});
    std::lock_guard lock(net.mu_);
    for (const auto& s : sends) {
      const auto* p = static_cast<const std::byte*>(s.data);
      net.queues_[{lane, rank_, s.peer}].emplace_back(p, p + s.bytes);
    }
    net.cv_.notify_all();
    return ticket;
  }

  void wait(int lane, Ticket ticket, Clock::time_point deadline) override {
    FakeNetwork& net = *network_;
    Lane& l = lanes_state_.at(static_cast<std::size_t>(lane));
    std::unique_lock lock(net.mu_);
    while (!l.recvs.empty() && l.recvs.front().ticket <= ticket) {
      const detail::RecvOp r = l.recvs.front().op;
      auto& queue = net.queues_[{lane, r.peer, rank_}];
      while (queue.empty()) {
        if (!net.aborted_by_.empty()) {
          l.recvs.clear();
          throw Aborted(net.aborted_by_.front(), net.first_cause_);
        }
        if (net.cv_.wait_until(lock, deadline) == std::cv_status::timeout && queue.empty()) {
          l.recvs.clear();
          throw Timeout("fake exchange timed out", "exchange", 0, std::chrono::milliseconds(0),
                        {r.peer});
        }
      }
      std::vector<std::byte>& message = queue.front();
      if (message.size() > r.bytes || (message.size() < r.bytes && !net.receives_shorter_)) {
        l.recvs.clear();
        throw InvalidArgument("fake transport: message of " + std::to_string(message.size()) +
                              " bytes where " + std::to_string(r.bytes) + " were expected");
      }
      if (!message.empty()) std::memcpy(r.data, message.data(), message.size());
      queue.pop_front();
      l.recvs.pop_front();
    }
  }

  void abort(const std::string& why, std::optional<int> cause_replica) noexcept override {
    std::lock_guard lock(network_->mu_);
    if (network_->aborted_by_.empty()) network_->first_cause_ = cause_replica;
    network_->aborted_by_.push_back("process " + std::to_string(rank_) + " failed: " + why);
    network_->cv_.notify_all();
  }

  // Small steps, so that the tests' sizes run pipelines of several steps.
  detail::TransportTraits traits() const override {
    return {.receives_ahead = network_->receives_ahead_,
            .receives_shorter = network_->receives_shorter_,
            .eager_bytes = network_->receives_shorter_ ? std::size_t{4000} : 0,
            .min_step_bytes = 64 * 1024,
            .max_step_bytes = 64 * 1024,
            .native_sum_dtypes = network_->receives_shorter_ ? kNativeSums : 0,
            .one_host = network_->one_host_};
  }

  // The "engine's own" all-reduce: every process sends its whole buffer to every other on
  // the lane and sums all of them in rank order.
  void native_all_reduce_f32(float* data, std::size_t count) override {
    native_all_reduce(0, data, count, DType::kF32, ReduceOp::kSum,
                      Clock::now() + std::chrono::seconds(30));
  }
  void native_all_reduce(int lane, void* data, std::size_t count, DType dtype, ReduceOp op,
                         Clock::time_point deadline) override {
    if (op != ReduceOp::kSum || !traits().native_sums(dtype)) {
      throw InvalidArgument("fake transport: no all-reduce of its own for this dtype and op");
    }
    ++network_->native_calls;
    const int P = size();
    const std::size_t bytes = count * dtype_size(dtype);
    std::vector<std::vector<std::byte>> all(static_cast<std::size_t>(P));
    std::vector<detail::SendOp> sends;
    std::vector<detail::RecvOp> recvs;
    for (int q = 0; q < P; ++q) {
      auto& mine = all[static_cast<std::size_t>(q)];
      mine.resize(bytes);
      if (q == rank_) {
        std::memcpy(mine.data(), data, bytes);
        continue;
      }
      sends.push_back({q, data, bytes});
      recvs.push_back({q, mine.data(), bytes});
    }
    wait(lane, post(lane, sends, recvs), deadline);
    const auto sum = [&](auto* out) {
      using T = std::remove_pointer_t<decltype(out)>;
      for (std::size_t i = 0; i < count; ++i) {
        T acc = reinterpret_cast<const T*>(all[0].data())[i];
        for (int q = 1; q < P; ++q) acc += reinterpret_cast<const T*>(all[q].data())[i];
        out[i] = acc;
      }
    };
    switch (dtype) {
      case DType::kF32:
        return sum(static_cast<float*>(data));
      case DType::kF64:
        return sum(static_cast<double*>(data));
      case DType::kI32:
        return sum(static_cast<std::int32_t*>(data));
      default:
        return sum(static_cast<std::int64_t*>(data));
    }
  }

 private:
  static constexpr std::uint32_t kNativeSums =
      detail::dtype_bit(DType::kF32) | detail::dtype_bit(DType::kF64) |
      detail::dtype_bit(DType::kI32) | detail::dtype_bit(DType::kI64);

  struct Pending {
    detail::RecvOp op;
    Ticket ticket;
  };
  // Used by the lane's own thread only.
  struct Lane {
    std::deque<Pending> recvs;
    Ticket posted = 0;
  };

  std::shared_ptr<FakeNetwork> network_;
  int rank_;
  int lanes_;
  std::vector<Lane> lanes_state_ = std::vector<Lane>(static_cast<std::size_t>(lanes_));
};

inline std::unique_ptr<detail::Transport> FakeNetwork::endpoint(int rank, int lanes) {
  return std::make_unique<FakeTransport>(shared_from_this(), rank, lanes);
}

}  // namespace replicator::testing
