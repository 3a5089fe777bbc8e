// The shm transport, in one process: the two ends of a two-process mesh as two transports (each
// maps the other's segment, as two processes would), driven from threads.

#include "src/engines/shm/shm_transport.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;
using std::chrono::milliseconds;

struct Pair {
  std::unique_ptr<PolledTransport> a;
  std::unique_ptr<PolledTransport> b;
  ShmMesh* mesh_a = nullptr;         // a's, owned by a
  std::vector<std::string> fatal_a;  // what a's on_fatal heard
};

// Ranks 0 and 1 of a 2-process job with `lanes` lanes; rank 0 watches `pid_of_b` as rank 1's
// process. With `parks`, the waits park on bells; without, they nap.
std::unique_ptr<Pair> make_pair(int lanes, bool parks = true, int pid_of_b = getpid()) {
  auto pair = std::make_unique<Pair>();
  auto a = std::make_unique<ShmMesh>(0, 2, lanes, parks);
  auto b = std::make_unique<ShmMesh>(1, 2, lanes, parks);
  const std::vector<std::string> names = {a->name(), b->name()};
  a->attach(names, {getpid(), pid_of_b});
  b->attach(names, {getpid(), getpid()});
  a->unlink();
  b->unlink();
  ShmOptions options{.engine = "gloo", .eager_bytes = 4000};
  ShmOptions options_a = options;
  options_a.on_fatal = [fatal = &pair->fatal_a](const std::string& why) { fatal->push_back(why); };
  pair->mesh_a = a.get();
  pair->a = make_shm_transport(std::move(a), options_a);
  pair->b = make_shm_transport(std::move(b), options);
  return pair;
}

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(20); }

// Each side sends `bytes` to the other and to itself, and receives both, `rounds` times.
void exchange(Transport& t, int lane, std::size_t bytes, int rounds) {
  const int peer = 1 - t.rank();
  std::vector<std::uint8_t> out(bytes), in(bytes), self(bytes);
  for (int round = 0; round < rounds; ++round) {
    std::iota(out.begin(), out.end(), static_cast<std::uint8_t>(round * 3 + t.rank()));
    const SendOp sends[] = {{peer, out.data(), bytes}, {t.rank(), out.data(), bytes}};
    const RecvOp recvs[] = {{peer, in.data(), bytes}, {t.rank(), self.data(), bytes}};
    t.exchange(lane, sends, recvs, soon());
    for (std::size_t i = 0; i < bytes; ++i) {
      ASSERT_EQ(in[i], static_cast<std::uint8_t>(round * 3 + peer + i)) << "byte " << i;
      ASSERT_EQ(self[i], out[i]) << "byte " << i;
    }
  }
}

TEST(ShmTransport, MessagesToThePeerAndToItselfArriveWithParkingAndNappingWaits) {
  for (const bool parks : {true, false}) {
    auto pair = make_pair(2, parks);
    for (const std::size_t bytes :
         {std::size_t{0}, std::size_t{5}, std::size_t{4096}, pair->mesh_a->ring_bytes() * 3}) {
      std::thread peer([&] { exchange(*pair->b, 1, bytes, 3); });
      exchange(*pair->a, 1, bytes, 3);
      peer.join();
    }
  }
}

TEST(ShmTransport, TestSaysWhetherThePostsCompletedWithoutBlocking) {
  auto pair = make_pair(1);
  std::uint64_t word = 0;
  const std::uint64_t value = 42;
  const RecvOp recv{1, &word, sizeof word};
  const Transport::Ticket ticket = pair->a->post(0, {}, {&recv, 1});
  EXPECT_FALSE(pair->a->test(0, ticket));
  const SendOp send{0, &value, sizeof value};
  pair->b->exchange(0, {&send, 1}, {}, soon());
  const auto until = soon();
  while (!pair->a->test(0, ticket)) ASSERT_LT(Clock::now(), until);
  EXPECT_EQ(word, 42u);
}

TEST(ShmTransport, AbortReachesThePeerWithItsReasonAndReplica) {
  auto pair = make_pair(2);
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  pair->a->post(1, {}, {&recv, 1});
  std::thread failer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    pair->b->abort("replica 3 threw", 3);
  });
  try {
    pair->a->wait(1, 1, soon());
    FAIL() << "the peer's abort did not end the wait";
  } catch (const Aborted& e) {
    EXPECT_EQ(std::string(e.what()), "process 1 failed: replica 3 threw");
    EXPECT_EQ(e.cause_replica(), 3);
  }
  failer.join();
  EXPECT_TRUE(pair->fatal_a.empty());  // a peer's announced failure is the peer's
  // Both are poisoned now: every later call is Aborted.
  EXPECT_THROW(pair->a->post(0, {}, {&recv, 1}), Aborted);
  EXPECT_THROW(pair->b->wait(0, 0, soon()), Aborted);
}

TEST(ShmTransport, ATimeoutNamesThePeerPoisonsAndIsAnnounced) {
  auto pair = make_pair(1);
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  pair->a->post(0, {}, {&recv, 1});
  try {
    pair->a->wait(0, 1, Clock::now() + milliseconds(30));
    FAIL() << "the wait did not time out";
  } catch (const Timeout& e) {
    EXPECT_EQ(e.missing(), std::vector<int>{1});
    EXPECT_NE(std::string(e.what()).find("gloo engine: exchange on lane 0 timed out: process 1 "
                                         "did not deliver"),
              std::string::npos)
        << e.what();
  }
  ASSERT_EQ(pair->fatal_a.size(), 1u);
  EXPECT_NE(pair->fatal_a[0].find("timed out"), std::string::npos);
  // The peer hears of it: its next wait is Aborted with rank 0's reason.
  const RecvOp from_a{0, &word, sizeof word};
  pair->b->post(0, {}, {&from_a, 1});
  try {
    pair->b->wait(0, 1, soon());
    FAIL() << "the peer did not hear of the timeout";
  } catch (const Aborted& e) {
    EXPECT_NE(std::string(e.what()).find("process 0 failed: gloo engine: exchange on lane 0 timed "
                                         "out"),
              std::string::npos)
        << e.what();
  }
}

TEST(ShmTransport, APeerWhoseProcessExitsWithoutANoticeIsLost) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  auto pair = make_pair(1, true, child);
  pair->mesh_a->set_max_park(milliseconds(5));
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  pair->a->post(0, {}, {&recv, 1});
  try {
    pair->a->wait(0, 1, soon());
    FAIL() << "the wait on a gone peer did not end";
  } catch (const PeerLost& e) {
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find("lost process 1 (its process exited)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(pair->fatal_a.size(), 1u);
}

TEST(ShmTransport, TestLooksForAGonePeerEverySoManyCalls) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  auto pair = make_pair(1, false, child);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  std::uint64_t word = 0;
  const RecvOp recv{1, &word, sizeof word};
  const Transport::Ticket ticket = pair->a->post(0, {}, {&recv, 1});
  int calls = 0;
  try {
    while (calls < 1000 && !pair->a->test(0, ticket)) ++calls;
    FAIL() << "test() never saw the peer's process exit";
  } catch (const PeerLost& e) {
    EXPECT_EQ(e.peer(), 1);
  }
  EXPECT_LT(calls, 1000);
}

TEST(ShmTransport, BadArgumentsAreRefusedAndTraitsDescribeTheRings) {
  auto pair = make_pair(1);
  std::uint64_t word = 0;
  const RecvOp to_nobody{2, &word, sizeof word};
  EXPECT_THROW(pair->a->post(0, {}, {&to_nobody, 1}), InvalidArgument);
  EXPECT_THROW(pair->a->post(1, {}, {}), InvalidArgument);
  const RecvOp from_self{0, &word, sizeof word};
  EXPECT_THROW(pair->a->post(0, {}, {&from_self, 1}), InvalidArgument);  // no send to match
  EXPECT_THROW(make_shm_transport(nullptr, {}), InvalidArgument);
  const TransportTraits traits = pair->a->traits();
  EXPECT_EQ(traits.eager_bytes, 4000u);
  EXPECT_TRUE(traits.receives_shorter);
  EXPECT_EQ(traits.max_step_bytes, pair->mesh_a->ring_bytes() / 2);
  EXPECT_EQ(traits.host_cores, pair->mesh_a);
  EXPECT_EQ(pair->a->name(), "shm");
  EXPECT_EQ(pair->a->num_lanes(), 1);
}

}  // namespace
}  // namespace replicator::detail
