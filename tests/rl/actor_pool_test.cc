// The actor pool: real actors on CartPole fill the queue once parameters are published;
// stop() ends and joins them, as often as it is called; an actor whose environment throws
// releases a learner waiting in the queue and leaves its error in error().
#include "replicator/rl/actor_pool.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "replicator/rl/policy.h"

namespace replicator::rl {
namespace {

using std::chrono::seconds;

// What the pool works with.
struct Fixture {
  ParameterStore store;
  TrajectoryQueue<Unroll> queue{{.max_size = 1000}};
  EpisodeLog log;
  ActorCounters counters;

  // A CartPole policy of width 8, as version 1.
  void publish() {
    ::torch::manual_seed(2);
    PolicyNet model(std::vector<int>{4}, 2, 8);
    store.publish(std::make_shared<PolicySnapshot>(
        PolicySnapshot{.version = 1, .parameters = flatten_parameters(*model)}));
  }
};

const ActorOptions kCartPole{.env = "cartpole", .envs = 2, .unroll = 5, .hidden = 8, .seed = 1};

// CartPole's shapes, a reward of 1 a step and no episode end. Step number `fail_at` (if
// above 0) throws DataError naming the actor; with a gate, the steps after `open_steps` wait
// until it opens.
class ScriptedEnv final : public BatchedEnv {
 public:
  ScriptedEnv(int actor, int num_envs, int fail_at, std::latch* gate = nullptr, int open_steps = 0)
      : BatchedEnv("scripted", num_envs, 2, {4}),
        actor_(actor),
        fail_at_(fail_at),
        gate_(gate),
        open_steps_(open_steps) {}

 private:
  void do_reset() override {}
  void do_step(std::span<const std::int32_t>) override {
    ++steps_;
    if (steps_ == fail_at_) {
      throw DataError("the environment of actor " + std::to_string(actor_) + " broke", "scripted");
    }
    if (gate_ && steps_ > open_steps_) gate_->wait();
    for (float& r : rewards_) r = 1.0f;
  }
  int actor_;
  int fail_at_;
  std::latch* gate_;
  int open_steps_;
  int steps_ = 0;
};

// Opens a gate when it goes out of scope, if nothing did before.
struct OpenOnExit {
  std::latch& gate;
  ~OpenOnExit() {
    if (!gate.try_wait()) gate.count_down();
  }
};

TEST(ActorPoolTest, EveryActorFillsTheQueueOncePolicyParametersArePublished) {
  Fixture f;
  ActorPool pool(10, 3, kCartPole, f.store, f.queue, f.log, f.counters);
  EXPECT_EQ(pool.size(), 3);
  // Without parameters no actor can act.
  EXPECT_EQ(f.queue.stats().inserted, 0);
  f.publish();
  std::set<std::int32_t> actors;
  while (actors.size() < 3) {
    const Unroll u = f.queue.sample(seconds(60));
    ASSERT_TRUE(u.consistent());
    EXPECT_EQ(u.length, 5);
    EXPECT_EQ(u.policy_version, 1);
    ASSERT_GE(u.actor, 10);
    ASSERT_LE(u.actor, 12);
    actors.insert(u.actor);
  }
  pool.stop();
  EXPECT_TRUE(f.queue.stats().closed);
  EXPECT_EQ(pool.error(), nullptr);
  // Joined: nothing plays on after stop(), and a second stop() is a no-op.
  const std::int64_t unrolls = f.counters.unrolls.load();
  const std::int64_t frames = f.counters.frames.load();
  EXPECT_GE(unrolls, 3);
  pool.stop();
  EXPECT_EQ(f.counters.unrolls.load(), unrolls);
  EXPECT_EQ(f.counters.frames.load(), frames);
  EXPECT_EQ(pool.error(), nullptr);
}

// Actors still waiting for their first parameters end on stop(), which two threads may call
// at once.
TEST(ActorPoolTest, StopEndsActorsThatNeverGotParametersAndMayBeCalledConcurrently) {
  Fixture f;
  ActorPool pool(0, 2, kCartPole, f.store, f.queue, f.log, f.counters);
  std::thread other([&] { pool.stop(); });
  pool.stop();
  other.join();
  EXPECT_TRUE(f.queue.stats().closed);
  EXPECT_EQ(f.queue.stats().inserted, 0);
  EXPECT_EQ(f.counters.frames.load(), 0);
  EXPECT_EQ(pool.error(), nullptr);
}

// Actor 1's environment breaks at its third step. Actor 0 plays 20 steps (8 unrolls), then
// waits at a gate until the test has looked: the learner, waiting for a batch of 100, is
// released with Aborted (not its 60 s deadline's Timeout) and finds actor 1's error; actor 0,
// let go, meets the closed queue and ends without an error of its own.
TEST(ActorPoolTest, AnActorWhoseEnvironmentThrowsReleasesTheLearnerAndLeavesItsError) {
  Fixture f;
  std::latch gate(1);
  ActorOptions options = kCartPole;
  options.make_env = [&gate](int actor, int num_envs, std::uint64_t) {
    return actor == 1 ? std::make_unique<ScriptedEnv>(actor, num_envs, 3)
                      : std::make_unique<ScriptedEnv>(actor, num_envs, 0, &gate, 20);
  };
  ActorPool pool(0, 2, options, f.store, f.queue, f.log, f.counters);
  const OpenOnExit open{gate};
  f.publish();
  EXPECT_THROW((void)f.queue.sample_batch(100, seconds(60)), Aborted);
  const std::exception_ptr error = pool.error();
  ASSERT_NE(error, nullptr);
  try {
    std::rethrow_exception(error);
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("actor 1 broke"), std::string::npos) << e.what();
  } catch (...) {
    ADD_FAILURE() << "the pool kept another error than the environment's";
  }
  gate.count_down();
  pool.stop();
  EXPECT_EQ(pool.error(), error);
  EXPECT_LE(f.counters.unrolls.load(), 8);
}

// No actor: nothing is made or started; the queue stays open for others until stop().
TEST(ActorPoolTest, ZeroActorsIsValid) {
  Fixture f;
  ActorPool pool(0, 0, kCartPole, f.store, f.queue, f.log, f.counters);
  EXPECT_EQ(pool.size(), 0);
  f.queue.insert(Unroll{});
  EXPECT_EQ(f.queue.stats().size, 1);
  pool.stop();
  EXPECT_TRUE(f.queue.stats().closed);
  EXPECT_EQ(pool.error(), nullptr);
}

TEST(ActorPoolTest, BadCountsAndEnvironmentsThrowInvalidArgumentBeforeAnyActorStarts) {
  Fixture f;
  EXPECT_THROW(ActorPool(0, -1, kCartPole, f.store, f.queue, f.log, f.counters), InvalidArgument);
  ActorOptions options = kCartPole;
  options.env = "no such game";
  EXPECT_THROW(ActorPool(0, 2, options, f.store, f.queue, f.log, f.counters), InvalidArgument);
  EXPECT_FALSE(f.queue.stats().closed);
}

}  // namespace
}  // namespace replicator::rl
