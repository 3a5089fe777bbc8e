// SplitTransport over two recording parts: which part carries which message, how the split's
// tickets map to each part's, a wait on both, and a failure of one part reaching the other.

#include "src/engines/split_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;
using std::chrono::milliseconds;

// A part that records what it is given. Its posts complete when the test says (complete_upto),
// or at once with `instant`; a wait past the deadline throws Timeout; `fail_with` makes the
// next wait throw it. Once aborted, every call throws Aborted and the lane's posts are dropped.
class RecordingPart : public PolledTransport {
 public:
  RecordingPart(std::string name, int rank, int size, int lanes)
      : name_(std::move(name)), rank_(rank), size_(size), lanes_(lanes) {}

  struct Post {
    int lane;
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
  };

  std::string_view name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int num_lanes() const override { return lanes_; }

  Ticket post(int lane, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override {
    std::lock_guard lock(mu_);
    if (aborted_) throw Aborted(name_ + " aborted", std::nullopt);
    posts.push_back({lane, {sends.begin(), sends.end()}, {recvs.begin(), recvs.end()}});
    return ++posted_;
  }
  void wait(int lane, Ticket ticket, Clock::time_point deadline) override {
    waits.push_back(ticket);
    for (;;) {
      if (test(lane, ticket)) return;
      if (Clock::now() >= deadline) {
        throw Timeout(name_ + " timed out", "exchange", 0, milliseconds(1), {1});
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  bool test(int lane, Ticket ticket) override {
    std::lock_guard lock(mu_);
    if (aborted_) {
      dropped_lanes.push_back(lane);
      throw Aborted(name_ + " aborted", std::nullopt);
    }
    if (fail_with) {
      auto failure = std::move(fail_with);
      fail_with = nullptr;
      std::rethrow_exception(failure);
    }
    return instant || completed_ >= ticket;
  }
  void abort(const std::string& why, std::optional<int> cause_replica) noexcept override {
    std::lock_guard lock(mu_);
    aborted_ = true;
    abort_why = why;
    abort_cause = cause_replica;
  }
  TransportTraits traits() const override { return traits_value; }

  void complete_upto(Ticket ticket) {
    std::lock_guard lock(mu_);
    completed_ = ticket;
  }
  bool aborted() {
    std::lock_guard lock(mu_);
    return aborted_;
  }

  std::vector<Post> posts;
  std::vector<Ticket> waits;
  std::vector<int> dropped_lanes;
  std::string abort_why;
  std::optional<int> abort_cause;
  std::exception_ptr fail_with;
  bool instant = false;
  TransportTraits traits_value;

 private:
  std::mutex mu_;
  std::string name_;
  int rank_, size_, lanes_;
  Ticket posted_ = 0;
  Ticket completed_ = 0;
  bool aborted_ = false;
};

// A network part that can only block (as Gloo's waits).
class BlockingPart : public Transport {
 public:
  std::string_view name() const override { return "gloo"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int num_lanes() const override { return 1; }
  Ticket post(int, std::span<const SendOp>, std::span<const RecvOp>) override { return ++posted; }
  void wait(int, Ticket, Clock::time_point) override {}
  void abort(const std::string&, std::optional<int>) noexcept override {}
  TransportTraits traits() const override { return {}; }
  Ticket posted = 0;
};

constexpr std::size_t kSplit = 1024;

struct Split {
  RecordingPart* network;
  RecordingPart* shared;
  std::unique_ptr<SplitTransport> transport;
};

// Rank 0 of 3 processes, 2 lanes, messages up to kSplit bytes through `shared`.
Split make_split(std::size_t split = kSplit) {
  auto network = std::make_unique<RecordingPart>("mpi", 0, 3, 2);
  auto shared = std::make_unique<RecordingPart>("shm", 0, 3, 2);
  Split s{network.get(), shared.get(), nullptr};
  s.transport = std::make_unique<SplitTransport>(std::move(network), std::move(shared), split);
  return s;
}

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(10); }

TEST(SplitTransport, SmallMessagesAndMessagesToItselfGoThroughSharedTheRestThroughTheNetwork) {
  Split s = make_split();
  std::vector<std::byte> small(kSplit), large(kSplit + 1);
  const SendOp sends[] = {
      {1, small.data(), kSplit}, {2, large.data(), kSplit + 1}, {0, large.data(), kSplit + 1}};
  const RecvOp recvs[] = {
      {2, small.data(), 16}, {1, large.data(), kSplit + 1}, {0, large.data(), kSplit + 1}};
  EXPECT_EQ(s.transport->name(), "mpi");
  EXPECT_EQ(s.transport->post(1, sends, recvs), 1u);
  ASSERT_EQ(s.shared->posts.size(), 1u);
  ASSERT_EQ(s.network->posts.size(), 1u);
  const auto& shared = s.shared->posts[0];
  const auto& network = s.network->posts[0];
  EXPECT_EQ(shared.lane, 1);
  ASSERT_EQ(shared.sends.size(), 2u);  // the small one, and the one to this process
  EXPECT_EQ(shared.sends[0].peer, 1);
  EXPECT_EQ(shared.sends[1].peer, 0);
  ASSERT_EQ(shared.recvs.size(), 2u);
  EXPECT_EQ(shared.recvs[0].peer, 2);
  EXPECT_EQ(shared.recvs[1].peer, 0);
  ASSERT_EQ(network.sends.size(), 1u);
  EXPECT_EQ(network.sends[0].peer, 2);
  ASSERT_EQ(network.recvs.size(), 1u);
  EXPECT_EQ(network.recvs[0].peer, 1);
}

TEST(SplitTransport, APostTouchesOnlyThePartsItUsesAndWaitsMapToEachPartsTickets) {
  Split s = make_split();
  std::vector<std::byte> small(8), large(kSplit * 2);
  const SendOp to_shared{1, small.data(), small.size()};
  const SendOp to_network{1, large.data(), large.size()};
  const SendOp both[] = {to_shared, to_network};
  EXPECT_EQ(s.transport->post(0, {&to_shared, 1}, {}), 1u);   // shared 1
  EXPECT_EQ(s.transport->post(0, {&to_network, 1}, {}), 2u);  // network 1
  EXPECT_EQ(s.transport->post(0, {&to_shared, 1}, {}), 3u);   // shared 2
  EXPECT_EQ(s.transport->post(0, both, {}), 4u);              // shared 3, network 2
  EXPECT_EQ(s.shared->posts.size(), 3u);
  EXPECT_EQ(s.network->posts.size(), 2u);

  s.shared->complete_upto(1);
  s.transport->wait(0, 1, soon());  // the network part has no post up to 1
  EXPECT_EQ(s.shared->waits, std::vector<Transport::Ticket>{1});
  EXPECT_TRUE(s.network->waits.empty());

  s.network->complete_upto(1);
  s.transport->wait(0, 2, soon());  // the network's first post; the shared part's done
  EXPECT_EQ(s.network->waits, std::vector<Transport::Ticket>{1});
  EXPECT_EQ(s.shared->waits.size(), 1u);

  s.shared->complete_upto(2);
  s.transport->wait(0, 3, soon());
  EXPECT_EQ(s.shared->waits, (std::vector<Transport::Ticket>{1, 2}));
  EXPECT_EQ(s.network->waits.size(), 1u);

  // Ticket 4 used both parts: the wait polls both until both have completed.
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(20));
    s.network->complete_upto(2);
    std::this_thread::sleep_for(milliseconds(20));
    s.shared->complete_upto(3);
  });
  s.transport->wait(0, 4, soon());
  later.join();
}

TEST(SplitTransport, AWaitOnBothPartsTimesOutThroughThePartsOwnWait) {
  Split s = make_split();
  std::vector<std::byte> small(8), large(kSplit * 2);
  const SendOp both[] = {{1, small.data(), small.size()}, {2, large.data(), large.size()}};
  s.transport->post(0, both, {});
  EXPECT_THROW(s.transport->wait(0, 1, Clock::now() + milliseconds(30)), Timeout);
  // The shared part timed out first; the network part was told, and dropped the lane.
  EXPECT_TRUE(s.network->aborted());
  EXPECT_EQ(s.network->abort_why, "shm timed out");
  EXPECT_EQ(s.network->dropped_lanes, std::vector<int>{0});
  EXPECT_THROW(s.transport->post(1, {&both[0], 1}, {}), Aborted);
}

TEST(SplitTransport, AFailureOfOnePartAbortsTheOtherWithTheSameReasonAndPoisonsTheWhole) {
  Split s = make_split();
  std::vector<std::byte> large(kSplit * 2), small(8);
  const SendOp to_network{2, large.data(), large.size()};
  const SendOp to_shared{1, small.data(), small.size()};
  s.transport->post(1, {&to_shared, 1}, {});
  s.transport->post(1, {&to_network, 1}, {});
  s.shared->instant = true;
  s.network->fail_with = std::make_exception_ptr(Aborted("process 2 failed: boom", 5));
  try {
    s.transport->wait(1, 2, soon());
    FAIL() << "the network part's failure was not raised";
  } catch (const Aborted& e) {
    EXPECT_STREQ(e.what(), "process 2 failed: boom");
    EXPECT_EQ(e.cause_replica(), 5);
  }
  EXPECT_TRUE(s.shared->aborted());
  EXPECT_EQ(s.shared->abort_why, "process 2 failed: boom");
  EXPECT_EQ(s.shared->abort_cause, 5);
  // Every later call, on any lane, is Aborted naming the first failure.
  try {
    s.transport->wait(0, 1, soon());
    FAIL() << "a poisoned transport waited";
  } catch (const Aborted& e) {
    EXPECT_NE(std::string(e.what()).find("process 2 failed: boom"), std::string::npos) << e.what();
    EXPECT_EQ(e.cause_replica(), 5);
  }
  EXPECT_THROW(s.transport->post(0, {&to_shared, 1}, {}), Aborted);
}

TEST(SplitTransport, AbortTellsBothParts) {
  Split s = make_split();
  s.transport->abort("replica 3 threw", 3);
  EXPECT_EQ(s.shared->abort_why, "replica 3 threw");
  EXPECT_EQ(s.network->abort_why, "replica 3 threw");
  EXPECT_EQ(s.network->abort_cause, 3);
  try {
    s.transport->wait(0, 0, soon());
    FAIL() << "an aborted transport waited";
  } catch (const Aborted& e) {
    EXPECT_NE(std::string(e.what()).find("process 0 failed: replica 3 threw"), std::string::npos)
        << e.what();
  }
}

TEST(SplitTransport, BadLanesAndPeersAreRefusedBeforeEitherPartPosts) {
  Split s = make_split();
  std::vector<std::byte> small(8);
  const SendOp good{1, small.data(), small.size()};
  const SendOp bad[] = {good, {3, small.data(), small.size()}};
  EXPECT_THROW(s.transport->post(2, {&good, 1}, {}), InvalidArgument);
  EXPECT_THROW(s.transport->post(0, bad, {}), InvalidArgument);
  EXPECT_TRUE(s.shared->posts.empty());
  EXPECT_TRUE(s.network->posts.empty());
  EXPECT_FALSE(s.network->aborted());
}

TEST(SplitTransport, TraitsAreTheSharedPartsWhereItCarriesEverythingElseTheNetworksWithTheSplit) {
  struct NoCores : HostCores {
    int rank() const noexcept override { return 0; }
    int size() const noexcept override { return 1; }
    int lanes() const noexcept override { return 1; }
    void publish_core(int, int) noexcept override {}
    int core_of(int, int) const noexcept override { return -1; }
  } no_cores;
  HostCores* const cores = &no_cores;
  {
    Split s = make_split(SIZE_MAX);
    s.shared->traits_value = {.receives_shorter = true, .eager_bytes = 4000, .host_cores = cores};
    s.network->traits_value = {.receives_ahead = true, .eager_bytes = 0, .native_sum_dtypes = 6};
    const TransportTraits t = s.transport->traits();
    EXPECT_FALSE(t.receives_ahead);
    EXPECT_TRUE(t.receives_shorter);
    EXPECT_EQ(t.eager_bytes, 4000u);
    EXPECT_EQ(t.native_sum_dtypes, 6u);
    EXPECT_EQ(t.host_cores, cores);
  }
  {
    Split s = make_split(kSplit);
    s.shared->traits_value = {.eager_bytes = 16384, .host_cores = cores};
    s.network->traits_value = {
        .streamed_results = true, .eager_bytes = 100, .min_step_bytes = 7, .native_sum_dtypes = 6};
    const TransportTraits t = s.transport->traits();
    EXPECT_TRUE(t.streamed_results);
    EXPECT_EQ(t.eager_bytes, kSplit);  // frames up to the split ride in shared memory
    EXPECT_EQ(t.min_step_bytes, 7u);
    EXPECT_EQ(t.shared_step_bytes, kSplit);
    EXPECT_EQ(t.native_sum_dtypes, 6u);
    EXPECT_EQ(t.host_cores, cores);
  }
}

TEST(SplitTransport, ANetworkThatCannotBePolledCarriesNothingAndPartsMustAgree) {
  auto shared = [] { return std::make_unique<RecordingPart>("shm", 0, 2, 1); };
  EXPECT_THROW(SplitTransport(std::make_unique<BlockingPart>(), shared(), kSplit), InvalidArgument);
  SplitTransport everything(std::make_unique<BlockingPart>(), shared(), SIZE_MAX);
  EXPECT_EQ(everything.name(), "gloo");
  EXPECT_THROW(everything.native_all_reduce_f32(nullptr, 0), InvalidArgument);
  EXPECT_THROW(SplitTransport(std::make_unique<BlockingPart>(),
                              std::make_unique<RecordingPart>("shm", 1, 2, 1), SIZE_MAX),
               InvalidArgument);
}

}  // namespace
}  // namespace replicator::detail
