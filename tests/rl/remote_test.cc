// The learner service and the remote actor's side of it (include/replicator/rl/remote.h),
// in one process over loopback: the hello, parameters fed to the actor's store, unrolls
// pumped whole and counted on both sides, the learner's end, an unreachable learner.
#include "replicator/rl/remote.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "replicator/errors.h"

namespace replicator::rl {
namespace {

using std::chrono::milliseconds;

ActorAssignment play() {
  return {.env = "cartpole",
          .envs = 4,
          .unroll = 3,
          .hidden = 8,
          .seed = 7,
          .learner_rank = 0,
          .observation_size = 4,
          .num_actions = 2};
}

Unroll make_unroll(int actor, std::int64_t sequence, int observation_size = 4) {
  Unroll u;
  u.length = 3;
  u.observation_size = observation_size;
  u.num_actions = 2;
  u.observations.assign(4 * static_cast<std::size_t>(observation_size), 0.5f);
  u.observations[0] = static_cast<float>(sequence);
  u.actions = {0, 1, 0};
  u.rewards = {1, 1, 1};
  u.done = {0, 0, 1};
  u.behaviour_logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  u.policy_version = 1;
  u.actor = actor;
  u.sequence = sequence;
  return u;
}

struct Learner {
  ParameterStore store;
  TrajectoryQueue<Unroll> queue{{.max_size = 1000, .timeout = milliseconds(10'000)}};
  std::atomic<std::int64_t> frames{0};
  std::atomic<int> episodes{0};
  LearnerServer server{{.address = "127.0.0.1:0",
                        .play = play(),
                        .next_actor = 100,
                        .on_episode = [this](double, std::int32_t) { ++episodes; },
                        .on_frames = [this](std::int64_t n) { frames += n; }},
                       store,
                       queue};
};

// RemoteLearner::pump on a thread of its own: the error it ends with is kept; whatever way
// the test leaves, the destructor stops the pump and joins it (a failed assertion does not
// leave a joinable thread behind).
class PumpThread {
 public:
  PumpThread(RemoteLearner& actor, ParameterStore& store, TrajectoryQueue<Unroll>& queue,
             std::function<RemoteLearner::Report()> report)
      : thread_([this, &actor, &store, &queue, report = std::move(report)] {
          try {
            actor.pump(store, queue, report, stop_);
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~PumpThread() { join(); }
  // Sets stop (unless the pump already returned) and waits for the pump.
  void join() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Waits for the pump to return by itself (the learner's end), then joins.
  void wait_for_end() {
    if (thread_.joinable()) thread_.join();
  }
  std::exception_ptr error() const { return error_; }

 private:
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::thread thread_;
};

// Inserts `count` unrolls of actor `actor` into `queue` from a thread of its own; the
// destructor closes the queue (releasing an insert that waits) and joins.
class Producer {
 public:
  Producer(TrajectoryQueue<Unroll>& queue, int actor, int count)
      : queue_(queue), thread_([&queue, actor, count] {
          try {
            for (int i = 0; i < count; ++i) queue.insert(make_unroll(actor, i));
          } catch (const Aborted&) {
          }
        }) {}
  ~Producer() {
    queue_.close();
    thread_.join();
  }

 private:
  TrajectoryQueue<Unroll>& queue_;
  std::thread thread_;
};

TEST(RemoteLearner, HelloAssignsWhatTheLearnerPlaysAndAnId) {
  Learner learner;
  RemoteLearner a({.address = learner.server.address()});
  RemoteLearner b({.address = learner.server.address(), .actor = 5});
  EXPECT_EQ(a.assignment().actor, 100);
  EXPECT_EQ(b.assignment().actor, 5);
  EXPECT_EQ(a.assignment().env, "cartpole");
  EXPECT_EQ(a.assignment().envs, 4);
  EXPECT_EQ(a.assignment().unroll, 3);
  EXPECT_EQ(a.assignment().seed, 7u);
  EXPECT_EQ(a.assignment().observation_size, 4);
  EXPECT_EQ(learner.server.wait_for_actors(2, milliseconds(1000)), 2);
}

// The actor pumps N unrolls; the learner takes each whole and in order, learns of the
// episodes and frames, and counts the same unrolls the actor says it took.
TEST(RemoteLearner, UnrollsArriveWholeInOrderAndCountedOnBothSides) {
  Learner learner;
  learner.store.publish(std::make_shared<PolicySnapshot>(
      PolicySnapshot{.version = 3, .parameters = {1.0f, 2.0f, 3.0f}}));
  RemoteLearner actor({.address = learner.server.address(), .actor = 1});
  ParameterStore local_store;
  TrajectoryQueue<Unroll> local_queue({.max_size = 8});
  constexpr int kUnrolls = 50;
  // What the actor reported with its messages (a message carries one or more unrolls).
  std::atomic<std::int64_t> frames_reported{0};
  std::atomic<int> episodes_reported{0};
  int calls = 0;
  PumpThread pump(actor, local_store, local_queue, [&] {
    RemoteLearner::Report r;
    r.frames = 3;
    frames_reported += 3;
    if (++calls % 3 == 0) {
      r.episodes.emplace_back(10.0, 10);
      ++episodes_reported;
    }
    return r;
  });
  Producer producer(local_queue, 1, kUnrolls);
  std::vector<Unroll> got = learner.queue.sample_batch(kUnrolls);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kUnrolls));
  for (int i = 0; i < kUnrolls; ++i) {
    EXPECT_EQ(got[static_cast<std::size_t>(i)].sequence, i);
    EXPECT_EQ(got[static_cast<std::size_t>(i)].observations[0], static_cast<float>(i));
    EXPECT_TRUE(got[static_cast<std::size_t>(i)].consistent());
    EXPECT_EQ(got[static_cast<std::size_t>(i)].behaviour_logits,
              make_unroll(1, i).behaviour_logits);
  }
  // The parameters reached the actor's store.
  for (int i = 0; i < 500 && local_store.version() != 3; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(local_store.version(), 3);
  EXPECT_EQ(local_store.latest()->parameters, (std::vector<float>{1.0f, 2.0f, 3.0f}));

  // The learner finishes: the pump learns it from its next poll and returns.
  learner.server.finish(milliseconds(5'000));
  pump.wait_for_end();
  EXPECT_FALSE(pump.error());
  const RemoteActorCounts counts = actor.counts();
  const LearnerServerStats stats = learner.server.stats();
  EXPECT_EQ(counts.sent, kUnrolls);
  EXPECT_EQ(counts.acknowledged, kUnrolls);
  EXPECT_EQ(counts.lost, 0);
  EXPECT_EQ(stats.unrolls, kUnrolls);
  ASSERT_EQ(stats.actors.size(), 1u);
  EXPECT_EQ(stats.actors[0].unrolls, kUnrolls);
  EXPECT_EQ(stats.actors[0].broken_streams, 0);
  EXPECT_EQ(learner.frames.load(), frames_reported.load());
  EXPECT_EQ(learner.episodes.load(), episodes_reported.load());
  EXPECT_GT(frames_reported.load(), 0);
  EXPECT_EQ(stats.rejected, 0);
}

// An unroll the learner cannot learn from (another environment's shape, another length, an
// action out of range) ends its stream, counted as rejected; nothing of it reaches the queue.
TEST(RemoteLearner, UnrollsTheLearnerCannotLearnFromAreRejected) {
  Unroll wrong_shape = make_unroll(2, 0, /*observation_size=*/6);
  Unroll wrong_length = make_unroll(2, 0);
  wrong_length.length = 2;
  wrong_length.observations.resize(3 * 4);
  wrong_length.actions.resize(2);
  wrong_length.rewards.resize(2);
  wrong_length.done.resize(2);
  wrong_length.behaviour_logits.resize(4);
  Unroll wrong_action = make_unroll(2, 0);
  wrong_action.actions[1] = 2;
  for (const Unroll* bad : {&wrong_shape, &wrong_length, &wrong_action}) {
    ASSERT_TRUE(bad->consistent());
    Learner learner;
    learner.store.publish(
        std::make_shared<PolicySnapshot>(PolicySnapshot{.version = 1, .parameters = {0.0f}}));
    RemoteLearner actor(
        {.address = learner.server.address(), .actor = 2, .timeout = milliseconds(500)});
    TrajectoryQueue<Unroll> local_queue({.max_size = 8});
    local_queue.insert(Unroll(*bad));
    ParameterStore local_store;
    {
      PumpThread pump(actor, local_store, local_queue, [] { return RemoteLearner::Report{}; });
      for (int i = 0; i < 500 && learner.server.stats().rejected == 0; ++i) {
        std::this_thread::sleep_for(milliseconds(10));
      }
    }
    EXPECT_EQ(learner.server.stats().rejected, 1);
    EXPECT_EQ(learner.queue.stats().inserted, 0);
    EXPECT_EQ(actor.counts().acknowledged, 0);
    EXPECT_EQ(actor.counts().lost, 1);
  }
}

TEST(RemoteLearner, AnUnreachableLearnerIsPeerLostNamingIt) {
  int port = 0;
  {
    Learner gone;  // a port that was free a moment ago, and nobody listens on now
    port = gone.server.port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const auto start = std::chrono::steady_clock::now();
  try {
    RemoteLearner actor(
        {.address = address, .timeout = milliseconds(300), .call_timeout = milliseconds(200)});
    FAIL() << "a hello to nobody succeeded";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("the learner at " + address + " did not answer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(RemoteLearner, BadAddressesAndAssignmentsAreInvalidArgument) {
  EXPECT_THROW(RemoteLearner({.address = "no-port"}), InvalidArgument);
  ParameterStore store;
  TrajectoryQueue<Unroll> queue;
  EXPECT_THROW(LearnerServer({.address = "127.0.0.1:0", .play = {}}, store, queue),
               InvalidArgument);
}

TEST(ListenAddress, EachLearnerProcessListensOnThePortPlusItsRank) {
  EXPECT_EQ(listen_address("127.0.0.1:7000", 0), "127.0.0.1:7000");
  EXPECT_EQ(listen_address("127.0.0.1:7000", 3), "127.0.0.1:7003");
  EXPECT_EQ(listen_address("[::1]:7000", 1), "[::1]:7001");
  EXPECT_EQ(listen_address("0.0.0.0:0", 5), "0.0.0.0:0");  // each takes a free port
  EXPECT_EQ(listen_address("h:65534", 1), "h:65535");
}

TEST(ListenAddress, AnAddressWithoutAUsablePortIsInvalidArgument) {
  for (const char* bad : {"localhost", "h:", "h:abc", "h:70000", "h:-1", "h:7000x", "h:+7000",
                          "h: 7000", "h:0000070000"}) {
    EXPECT_THROW(listen_address(bad, 0), InvalidArgument) << bad;
  }
  EXPECT_THROW(listen_address("h:7000", -1), InvalidArgument);
  try {
    listen_address("h:65535", 1);
    ADD_FAILURE() << "port 65536 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("65536"), std::string::npos) << e.what();
  }
}

TEST(EnvFactory, GymNamesLiveInTheEnvServersTakenInTurnByActor) {
  EXPECT_FALSE(env_factory("cartpole", {}));
  EXPECT_FALSE(env_factory("breakout", {"h:1"}));
  try {
    env_factory("gym:CartPole-v1", {});
    ADD_FAILURE() << "a gym environment without env servers was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("env_server.py"), std::string::npos) << e.what();
  }
  EXPECT_THROW(env_factory("gym:", {"h:1"}), InvalidArgument);
  // Addresses without a port fail in make_remote_env before any connection, naming the
  // server the actor was given.
  const EnvFactory factory = env_factory("gym:CartPole-v1", {"first", "second"});
  ASSERT_TRUE(factory);
  const auto server_of = [&](int actor) {
    try {
      factory(actor, 1, 0);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(server_of(0).find("'first'"), std::string::npos) << server_of(0);
  EXPECT_NE(server_of(1).find("'second'"), std::string::npos) << server_of(1);
  EXPECT_NE(server_of(2).find("'first'"), std::string::npos) << server_of(2);
}

}  // namespace
}  // namespace replicator::rl
