// ShmMesh, in one process: the two ends of a two-process mesh as two objects (each maps the
// other's segment, as two processes would), driven from threads.

#include "src/engines/shm/shm_mesh.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

using Clock = ShmMesh::Clock;
using Outcome = ShmMesh::Outcome;
using std::chrono::microseconds;
using std::chrono::milliseconds;

struct Pair {
  std::unique_ptr<ShmMesh> a;
  std::unique_ptr<ShmMesh> b;
  Poison poison_a;
  Poison poison_b;
};

// Ranks 0 and 1 of a 2-process mesh with `lanes` lanes; `pid_of_b` is the process rank 0
// watches as rank 1 (this one unless a test says otherwise).
std::unique_ptr<Pair> make_pair(int lanes, int pid_of_b = getpid()) {
  auto pair = std::make_unique<Pair>();
  pair->a = std::make_unique<ShmMesh>(0, 2, lanes);
  pair->b = std::make_unique<ShmMesh>(1, 2, lanes);
  const std::vector<std::string> names = {pair->a->name(), pair->b->name()};
  pair->a->attach(names, {getpid(), pid_of_b});
  pair->b->attach(names, {getpid(), getpid()});
  pair->a->unlink();
  pair->b->unlink();
  return pair;
}

std::uint8_t pattern(int src, int lane, int round, std::size_t i) {
  return static_cast<std::uint8_t>(src * 37 + lane * 101 + round * 7 + i * 13 + (i >> 9));
}

// Rank `rank` of a pair: sends `bytes` to the other and receives as many, `rounds` times,
// waiting in wait(), or with `poll_only` by poll() alone (as the mpi engine does).
std::string exchange_rounds(ShmMesh& mesh, int rank, const Poison& poison, int lane,
                            std::size_t bytes, int rounds, bool poll_only = false) {
  const int peer = 1 - rank;
  ShmMesh::Ticket ticket = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::uint8_t> out(bytes);
    std::vector<std::uint8_t> in(bytes, 0xee);
    for (std::size_t i = 0; i < bytes; ++i) out[i] = pattern(rank, lane, round, i);
    const SendOp send{peer, out.data(), bytes};
    const RecvOp recv{peer, in.data(), bytes};
    mesh.post(lane, ++ticket, {&send, 1}, {&recv, 1});
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
    ShmMesh::WaitResult result;
    if (poll_only) {
      while (!mesh.poll(lane, ticket, &result) && result.outcome == Outcome::kDone) {
        if (Clock::now() > deadline) return "round " + std::to_string(round) + " never completed";
        std::this_thread::yield();
      }
    } else {
      result = mesh.wait(lane, ticket, deadline, microseconds(20), microseconds(1000), poison);
    }
    if (result.outcome != Outcome::kDone) {
      return "lane " + std::to_string(lane) + " round " + std::to_string(round) + ": outcome " +
             std::to_string(static_cast<int>(result.outcome));
    }
    for (std::size_t i = 0; i < bytes; ++i) {
      if (in[i] != pattern(peer, lane, round, i)) {
        return std::to_string(bytes) + "-byte message on lane " + std::to_string(lane) + " round " +
               std::to_string(round) + " differs at byte " + std::to_string(i);
      }
    }
  }
  return {};
}

TEST(ShmMesh, MessagesOfEverySizeArriveIntactOnTwoLanesAtOnce) {
  auto pair = make_pair(2);
  // The biggest is three rings long: it moves only while both sides wait.
  const std::size_t big = 3 * pair->a->ring_bytes() + 5;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4099}, big}) {
    std::string errors[4];
    std::vector<std::thread> threads;
    for (int lane = 0; lane < 2; ++lane) {
      threads.emplace_back([&, lane] {
        errors[static_cast<std::size_t>(lane) * 2] =
            exchange_rounds(*pair->a, 0, pair->poison_a, lane, bytes, 3);
      });
      threads.emplace_back([&, lane] {
        errors[static_cast<std::size_t>(lane) * 2 + 1] =
            exchange_rounds(*pair->b, 1, pair->poison_b, lane, bytes, 3);
      });
    }
    for (auto& t : threads) t.join();
    for (const std::string& e : errors) EXPECT_EQ(e, "") << bytes << " bytes";
  }
}

TEST(ShmMesh, ManyMessagesPostedAheadArriveInOrder) {
  auto pair = make_pair(1);
  // 64 messages of 40 KiB from one post: more than a ring holds, so post() copies some and
  // the waits the rest.
  constexpr int kCount = 64;
  constexpr std::size_t kBytes = 40 << 10;
  std::vector<std::vector<std::uint8_t>> out(kCount, std::vector<std::uint8_t>(kBytes));
  std::vector<std::vector<std::uint8_t>> in(kCount, std::vector<std::uint8_t>(kBytes, 0));
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (int k = 0; k < kCount; ++k) {
    for (std::size_t i = 0; i < kBytes; ++i) out[k][i] = pattern(0, 0, k, i);
    sends.push_back({1, out[k].data(), kBytes});
    recvs.push_back({0, in[k].data(), kBytes});
  }
  std::thread receiver([&] {
    pair->b->post(0, 1, {}, recvs);
    EXPECT_EQ(pair->b
                  ->wait(0, 1, Clock::now() + std::chrono::seconds(30), microseconds(0),
                         microseconds(0), pair->poison_b)
                  .outcome,
              Outcome::kDone);
  });
  pair->a->post(0, 1, sends, {});
  EXPECT_EQ(pair->a
                ->wait(0, 1, Clock::now() + std::chrono::seconds(30), microseconds(0),
                       microseconds(0), pair->poison_a)
                .outcome,
            Outcome::kDone);
  receiver.join();
  for (int k = 0; k < kCount; ++k) {
    ASSERT_EQ(in[k], out[k]) << "message " << k;
  }
}

TEST(ShmMesh, AReceiveTakesAShorterMessageButNotALongerOne) {
  auto pair = make_pair(1);
  const std::uint32_t three[3] = {7, 8, 9};
  std::uint32_t four[4] = {0, 0, 0, 42};
  const SendOp send{1, three, sizeof three};
  const RecvOp recv{0, four, sizeof four};
  pair->a->post(0, 1, {&send, 1}, {});
  pair->b->post(0, 1, {}, {&recv, 1});
  EXPECT_EQ(pair->b
                ->wait(0, 1, Clock::now() + std::chrono::seconds(5), microseconds(0),
                       microseconds(0), pair->poison_b)
                .outcome,
            Outcome::kDone);
  EXPECT_EQ(four[0], 7u);
  EXPECT_EQ(four[2], 9u);
  EXPECT_EQ(four[3], 42u);  // left as it was

  const SendOp long_send{1, four, sizeof four};
  std::uint32_t two[2] = {};
  const RecvOp short_recv{0, two, sizeof two};
  pair->a->post(0, 2, {&long_send, 1}, {});
  pair->b->post(0, 2, {}, {&short_recv, 1});
  const auto result = pair->b->wait(0, 2, Clock::now() + std::chrono::seconds(5), microseconds(0),
                                    microseconds(0), pair->poison_b);
  EXPECT_EQ(result.outcome, Outcome::kTooLong);
  EXPECT_EQ(result.peer, 0);
  EXPECT_EQ(result.sent, sizeof four);
  EXPECT_EQ(result.expected, sizeof two);
}

TEST(ShmMesh, AReceiveThatNeverComesTimesOutNamingThePeer) {
  auto pair = make_pair(1);
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  pair->a->post(0, 1, {}, {&recv, 1});
  const auto start = Clock::now();
  const auto result = pair->a->wait(0, 1, start + milliseconds(120), microseconds(50),
                                    microseconds(0), pair->poison_a);
  EXPECT_EQ(result.outcome, Outcome::kTimedOut);
  EXPECT_GE(Clock::now() - start, milliseconds(120));
  bool receives_done = true;
  EXPECT_EQ(pair->a->missing(0, 1, &receives_done), std::vector<int>{1});
  EXPECT_FALSE(receives_done);
  pair->a->drop(0);
  EXPECT_EQ(pair->a->missing(0, 1, &receives_done), std::vector<int>{});
}

TEST(ShmMesh, ASendThatFindsNoRoomTimesOutAsNotTakenDelivery) {
  auto pair = make_pair(1);
  std::vector<std::uint8_t> big(2 * pair->a->ring_bytes());
  const SendOp send{1, big.data(), big.size()};
  pair->a->post(0, 1, {&send, 1}, {});
  EXPECT_EQ(pair->a
                ->wait(0, 1, Clock::now() + milliseconds(60), microseconds(0), microseconds(0),
                       pair->poison_a)
                .outcome,
            Outcome::kTimedOut);
  bool receives_done = false;
  EXPECT_EQ(pair->a->missing(0, 1, &receives_done), std::vector<int>{1});
  EXPECT_TRUE(receives_done);
}

// A waiter that parks (no spin, no yielding past the first few) for up to a minute at a
// time: only the bell of announce_failure() ends its park before that, so the wait returning
// within 10 s of a failure announced after 30 ms is the bell's doing.
TEST(ShmMesh, AnAnnouncedFailureWakesTheParkedPeer) {
  auto pair = make_pair(2);
  pair->a->set_max_park(std::chrono::seconds(60));
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  pair->a->post(1, 1, {}, {&recv, 1});
  std::thread failer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    pair->b->announce_failure();
  });
  const auto start = Clock::now();
  const auto result = pair->a->wait(1, 1, start + std::chrono::seconds(120), microseconds(0),
                                    microseconds(0), pair->poison_a);
  failer.join();
  EXPECT_EQ(result.outcome, Outcome::kPeerFailed);
  EXPECT_EQ(result.peer, 1);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

// As above: with parks of a minute, only wake_local()'s bell releases the wait in time.
TEST(ShmMesh, PoisonAndWakeLocalReleaseAWaitOnAnotherThread) {
  auto pair = make_pair(1);
  pair->a->set_max_park(std::chrono::seconds(60));
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  pair->a->post(0, 1, {}, {&recv, 1});
  std::thread poisoner([&] {
    std::this_thread::sleep_for(milliseconds(30));
    pair->poison_a.set("test");
    pair->a->wake_local();
  });
  const auto start = Clock::now();
  const auto result = pair->a->wait(0, 1, start + std::chrono::seconds(120), microseconds(0),
                                    microseconds(0), pair->poison_a);
  poisoner.join();
  EXPECT_EQ(result.outcome, Outcome::kPoisoned);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST(ShmMesh, APeerWhoseProcessExitsIsGone) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    usleep(100'000);
    _exit(0);
  }
  auto pair = make_pair(1, child);
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  pair->a->post(0, 1, {}, {&recv, 1});
  const auto result = pair->a->wait(0, 1, Clock::now() + std::chrono::seconds(20), microseconds(0),
                                    microseconds(0), pair->poison_a);
  EXPECT_EQ(result.outcome, Outcome::kPeerGone);
  EXPECT_EQ(result.peer, 1);
  int status = 0;
  waitpid(child, &status, 0);
}

TEST(ShmMesh, WhatAPeerSentBeforeItExitedStillArrives) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  usleep(20'000);
  // Rank 1 "is" the exited child (a zombie until reaped below): its message is already in
  // the ring when rank 0 waits.
  auto pair = make_pair(1, child);
  const std::uint64_t sent = 0x1234;
  const SendOp send{0, &sent, sizeof sent};
  pair->b->post(0, 1, {&send, 1}, {});
  std::uint64_t got = 0;
  const RecvOp recv{1, &got, sizeof got};
  pair->a->post(0, 1, {}, {&recv, 1});
  EXPECT_EQ(pair->a
                ->wait(0, 1, Clock::now() + std::chrono::seconds(5), microseconds(0),
                       microseconds(0), pair->poison_a)
                .outcome,
            Outcome::kDone);
  EXPECT_EQ(got, sent);
  int status = 0;
  waitpid(child, &status, 0);
}

TEST(ShmMesh, AttachNamesThePeerItCannotMapAndUnlinkRemovesTheName) {
  ShmMesh a(0, 2, 1);
  EXPECT_THROW(a.attach({a.name(), "/replicator-no-such-segment"}, {getpid(), getpid()}), Error);
  EXPECT_THROW(a.attach({a.name()}, {getpid()}), InvalidArgument);
  const int fd = shm_open(a.name().c_str(), O_RDONLY, 0);
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  a.unlink();
  EXPECT_LT(shm_open(a.name().c_str(), O_RDONLY, 0), 0);
  EXPECT_THROW(ShmMesh(2, 2, 1), InvalidArgument);
  EXPECT_THROW(ShmMesh(0, 2, 0), InvalidArgument);
}

TEST(ShmMesh, OffersFromThisHostAttachAndOthersDoNot) {
  auto a = ShmMesh::try_make(0, 2, 1);
  auto b = ShmMesh::try_make(1, 2, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::string theirs = b->offer();
  EXPECT_EQ(theirs.rfind(ShmMesh::host_identity() + "\n", 0), 0u) << theirs;
  // Another host, a malformed offer, a bad pid, a missing segment: not attached.
  EXPECT_FALSE(a->attach_offers({"", "elsewhere|x\n" + b->name() + "\n1"}));
  EXPECT_FALSE(a->attach_offers({"", "-"}));
  EXPECT_FALSE(a->attach_offers({"", ShmMesh::host_identity() + "\n" + b->name() + "\nx"}));
  EXPECT_FALSE(a->attach_offers({"", ShmMesh::host_identity() + "\n/replicator-none\n1"}));
  EXPECT_FALSE(a->attach_offers({theirs}));
  // The real one attaches; a message then goes through.
  ASSERT_TRUE(a->attach_offers({"", theirs}));
  ASSERT_TRUE(b->attach_offers({a->offer(), ""}));
  const std::uint32_t sent = 77;
  std::uint32_t got = 0;
  const SendOp send{1, &sent, sizeof sent};
  const RecvOp recv{0, &got, sizeof got};
  a->post(0, 1, {&send, 1}, {});
  b->post(0, 1, {}, {&recv, 1});
  const Poison poison;
  EXPECT_EQ(b->wait(0, 1, Clock::now() + std::chrono::seconds(5), microseconds(0), microseconds(0),
                    poison)
                .outcome,
            Outcome::kDone);
  EXPECT_EQ(got, sent);
}

TEST(ShmMesh, AMeshWhoseThreadsNeverParkDeliversEverySizeByPollingAlone) {
  auto a = std::make_unique<ShmMesh>(0, 2, 1, /*parks=*/false);
  auto b = std::make_unique<ShmMesh>(1, 2, 1, /*parks=*/false);
  const std::vector<std::string> names = {a->name(), b->name()};
  a->attach(names, {getpid(), getpid()});
  b->attach(names, {getpid(), getpid()});
  a->unlink();
  b->unlink();
  // Small messages, and ones longer than a ring (sent in parts as the reader frees room).
  const Poison unused;
  for (const std::size_t bytes :
       {std::size_t{4}, std::size_t{56}, std::size_t{3000}, a->ring_bytes() + 4096}) {
    std::string error_a;
    std::thread other([&] { error_a = exchange_rounds(*a, 0, unused, 0, bytes, 20, true); });
    const std::string error_b = exchange_rounds(*b, 1, unused, 0, bytes, 20, true);
    other.join();
    EXPECT_EQ(error_a, "") << bytes;
    EXPECT_EQ(error_b, "") << bytes;
  }
}

TEST(ShmMesh, EachProcessSeesTheCoresTheOthersPublishedPerLane) {
  auto pair = make_pair(2);
  EXPECT_EQ(pair->b->core_of(0, 0), -1);  // nothing published yet
  pair->a->publish_core(0, 3);
  pair->a->publish_core(1, 0);
  pair->b->publish_core(1, 7);
  EXPECT_EQ(pair->b->core_of(0, 0), 3);
  EXPECT_EQ(pair->b->core_of(0, 1), 0);
  EXPECT_EQ(pair->a->core_of(1, 0), -1);
  EXPECT_EQ(pair->a->core_of(1, 1), 7);
  EXPECT_EQ(pair->a->core_of(0, 0), 3);  // its own too
  pair->a->publish_core(0, 1);           // the latest wins
  EXPECT_EQ(pair->b->core_of(0, 0), 1);
  // Out of range: nothing is written, and nothing is read.
  pair->a->publish_core(2, 5);
  pair->a->publish_core(0, -1);
  EXPECT_EQ(pair->b->core_of(0, 0), 1);
  EXPECT_EQ(pair->b->core_of(2, 0), -1);
  EXPECT_EQ(pair->b->core_of(0, 2), -1);
  EXPECT_EQ(pair->b->core_of(-1, 0), -1);
  // The cores do not disturb messages on the same lanes.
  std::string error_a;
  std::thread other([&] { error_a = exchange_rounds(*pair->a, 0, pair->poison_a, 1, 100, 50); });
  const std::string error_b = exchange_rounds(*pair->b, 1, pair->poison_b, 1, 100, 50);
  other.join();
  EXPECT_EQ(error_a, "");
  EXPECT_EQ(error_b, "");
  EXPECT_EQ(pair->a->core_of(1, 1), 7);
}

TEST(ShmMesh, HostIdentityIsStableAndRingsShrinkWithTheJobAndTheCache) {
  const std::string id = ShmMesh::host_identity();
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(id, ShmMesh::host_identity());
  constexpr std::size_t kNoBound = 0;
  EXPECT_EQ(ShmMesh::ring_bytes_for(2, 1, kNoBound), std::size_t{1} << 20);
  EXPECT_EQ(ShmMesh::ring_bytes_for(8, 4, kNoBound), std::size_t{512} << 10);
  EXPECT_EQ(ShmMesh::ring_bytes_for(64, 8, kNoBound), std::size_t{64} << 10);
  // An eighth of the L2, a power of two, between 64 KiB and 1 MiB.
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  EXPECT_EQ(ShmMesh::ring_bytes_for(2, 1, 2 * kMiB), std::size_t{256} << 10);
  EXPECT_EQ(ShmMesh::ring_bytes_for(2, 1, 3 * kMiB), std::size_t{256} << 10);
  EXPECT_EQ(ShmMesh::ring_bytes_for(2, 1, 16 * kMiB), kMiB);
  EXPECT_EQ(ShmMesh::ring_bytes_for(2, 1, 256 << 10), std::size_t{64} << 10);
  EXPECT_EQ(ShmMesh::ring_bytes_for(8, 4, 2 * kMiB), std::size_t{256} << 10);
  EXPECT_EQ(ShmMesh::ring_bytes_for(64, 8, 2 * kMiB), std::size_t{64} << 10);
  // A ring size of the caller's.
  EXPECT_EQ(ShmMesh(0, 2, 1, true, std::size_t{128} << 10).ring_bytes(), std::size_t{128} << 10);
  EXPECT_THROW(ShmMesh(0, 2, 1, true, 3000), InvalidArgument);
  EXPECT_THROW(ShmMesh(0, 2, 1, true, 96 << 10), InvalidArgument);
  EXPECT_THROW(ShmMesh(0, 2, 1, true, 2 * kMiB), InvalidArgument);
}

}  // namespace
}  // namespace replicator::detail
