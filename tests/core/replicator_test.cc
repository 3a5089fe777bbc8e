// Tests of the Replicator: what run and per_replica return, replica ids, persistent replica
// threads, reduce over a PerReplica, independence of two Replicators, more replicas than
// cores, many runs in a row, and the hooks that run before the first replica threads.
#include "replicator/replicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "src/engines/local/local_transport.h"
#include "src/runtime/testing.h"

namespace replicator {
namespace {

Config with_replicas(int n) {
  Config config;
  config.local_replicas = n;
  return config;
}

TEST(ReplicatorTest, ReportsReplicaCounts) {
  for (const int n : {1, 2, 5}) {
    const Replicator repl(with_replicas(n));
    EXPECT_EQ(repl.num_replicas(), n);
    EXPECT_EQ(repl.num_local_replicas(), n);
    EXPECT_EQ(repl.config().local_replicas, n);
  }
}

// A one-process job holds the local transport, as any other job holds its engine's: one made
// by the caller runs the same, and none at all is refused.
TEST(ReplicatorTest, RunsOverTheLocalTransportAndNeedsOne) {
  auto repl = detail::make_replicator(with_replicas(3), detail::make_local_transport({.lanes = 3}));
  EXPECT_EQ(repl->num_replicas(), 3);
  const PerReplica<int> sums = repl->run([](ReplicaContext& ctx) {
    int value = ctx.replica_id() + 1;
    ctx.all_reduce(std::span<int>(&value, 1), {.op = ReduceOp::kSum});
    return value;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(sums[r], 6);
  EXPECT_THROW(detail::make_replicator(with_replicas(2), nullptr), InvalidArgument);
}

TEST(ReplicatorTest, RunReturnsOneValuePerReplicaInLocalIdOrder) {
  Replicator repl(with_replicas(4));
  const PerReplica<int> ids = repl.run([](ReplicaContext& ctx) { return 10 * ctx.replica_id(); });
  ASSERT_EQ(ids.size(), 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(ids[r], 10 * r);
  int expected = 0;
  for (const int v : ids) {
    EXPECT_EQ(v, expected);
    expected += 10;
  }
}

TEST(ReplicatorTest, RunReturnsNonTrivialTypes) {
  Replicator repl(with_replicas(3));
  PerReplica<std::string> names =
      repl.run([](ReplicaContext& ctx) { return "replica " + std::to_string(ctx.replica_id()); });
  ASSERT_EQ(names.size(), 3);
  EXPECT_EQ(names[2], "replica 2");
  // A move-only result type is moved, never copied.
  PerReplica<std::unique_ptr<int>> owned =
      repl.run([](ReplicaContext& ctx) { return std::make_unique<int>(ctx.replica_id() + 7); });
  ASSERT_EQ(owned.size(), 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(*owned[r], r + 7);
}

TEST(ReplicatorTest, VoidStepReturnsPerReplicaVoidOfTheRightSize) {
  Replicator repl(with_replicas(3));
  std::atomic<int> calls{0};
  const PerReplica<void> done = repl.run([&](ReplicaContext&) { calls.fetch_add(1); });
  EXPECT_EQ(done.size(), 3);
  EXPECT_EQ(calls.load(), 3);
}

TEST(ReplicatorTest, CurrentIsTheRunningReplicasContextAndNullOutside) {
  Replicator replicator(Config{.local_replicas = 3});
  EXPECT_EQ(ReplicaContext::current(), nullptr);
  const auto same =
      replicator.run([](ReplicaContext& ctx) { return ReplicaContext::current() == &ctx; });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(same[r]) << "replica " << r;
  EXPECT_EQ(ReplicaContext::current(), nullptr);
}

TEST(ReplicatorTest, ContextReportsIdsOfEveryReplica) {
  Replicator repl(with_replicas(5));
  struct Ids {
    int replica_id, num_replicas, local_id, num_local;
    std::uint64_t sequence;
  };
  const PerReplica<Ids> ids = repl.run([](ReplicaContext& ctx) {
    return Ids{ctx.replica_id(), ctx.num_replicas(), ctx.local_replica_id(),
               ctx.num_local_replicas(), ctx.sequence()};
  });
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(ids[r].replica_id, r);
    EXPECT_EQ(ids[r].num_replicas, 5);
    EXPECT_EQ(ids[r].local_id, r);  // one process: local id == global id
    EXPECT_EQ(ids[r].num_local, 5);
    EXPECT_EQ(ids[r].sequence, 0u);
  }
}

TEST(ReplicatorTest, SequenceCountsCollectivesAndRestartsEachRun) {
  Replicator repl(with_replicas(3));
  for (int run = 0; run < 2; ++run) {
    const PerReplica<std::uint64_t> seq = repl.run([](ReplicaContext& ctx) {
      ctx.barrier();
      std::vector<int> v(4, 1);
      ctx.all_reduce(v);
      ctx.barrier();
      return ctx.sequence();
    });
    for (const std::uint64_t s : seq) EXPECT_EQ(s, 3u) << "run " << run;
  }
}

TEST(ReplicatorTest, PerReplicaIndexesByContext) {
  Replicator repl(with_replicas(4));
  PerReplica<int> state = repl.per_replica([](ReplicaContext& ctx) { return ctx.replica_id(); });
  repl.run([&](ReplicaContext& ctx) { state[ctx] += 100; });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(state[r], 100 + r);
  const PerReplica<int>& view = state;
  const PerReplica<int> read = repl.run([&](ReplicaContext& ctx) { return view[ctx]; });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(read[r], 100 + r);
}

// Factories run on the replica's own thread, so per-replica memory is first touched there;
// the threads are persistent, so later runs see the same thread per replica.
TEST(ReplicatorTest, FactoriesAndStepsRunOnPersistentReplicaThreads) {
  constexpr int kReplicas = 4;
  Replicator repl(with_replicas(kReplicas));
  const PerReplica<std::thread::id> from_ctx_factory =
      repl.per_replica([](ReplicaContext&) { return std::this_thread::get_id(); });
  const PerReplica<std::thread::id> from_plain_factory =
      repl.per_replica([] { return std::this_thread::get_id(); });

  std::set<std::thread::id> distinct(from_ctx_factory.begin(), from_ctx_factory.end());
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kReplicas));
  EXPECT_EQ(distinct.count(std::this_thread::get_id()), 0u) << "the driving thread is no replica";
  for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(from_plain_factory[r], from_ctx_factory[r]);

  for (int run = 0; run < 20; ++run) {
    const PerReplica<std::thread::id> ids =
        repl.run([](ReplicaContext&) { return std::this_thread::get_id(); });
    for (int r = 0; r < kReplicas; ++r) ASSERT_EQ(ids[r], from_ctx_factory[r]) << "run " << run;
  }
}

TEST(ReplicatorTest, PlainFactoryIsCalledOncePerReplica) {
  Replicator repl(with_replicas(3));
  std::atomic<int> calls{0};
  const PerReplica<std::vector<float>> buffers = repl.per_replica([&] {
    calls.fetch_add(1);
    return std::vector<float>(16, 2.0f);
  });
  EXPECT_EQ(calls.load(), 3);
  ASSERT_EQ(buffers.size(), 3);
  for (const auto& b : buffers) EXPECT_EQ(b, std::vector<float>(16, 2.0f));
}

// ---- reduce -----------------------------------------------------------------------------

// Values v_r = r + 1 for r in 0..4: sum 15, mean 3, min 1, max 5, prod 120, all exact in
// every element type.
template <typename T>
void expect_reduce_all_ops(Replicator& repl) {
  const PerReplica<T> values =
      repl.run([](ReplicaContext& ctx) { return T(static_cast<float>(ctx.replica_id() + 1)); });
  const auto as_double = [](T x) { return static_cast<double>(static_cast<float>(x)); };
  EXPECT_EQ(as_double(repl.reduce(ReduceOp::kSum, values)), 15.0);
  EXPECT_EQ(as_double(repl.reduce(ReduceOp::kMean, values)), 3.0);
  EXPECT_EQ(as_double(repl.reduce(ReduceOp::kMin, values)), 1.0);
  EXPECT_EQ(as_double(repl.reduce(ReduceOp::kMax, values)), 5.0);
  EXPECT_EQ(as_double(repl.reduce(ReduceOp::kProd, values)), 120.0);
}

TEST(ReplicatorReduceTest, EveryOpOnEveryElementType) {
  Replicator repl(with_replicas(5));
  expect_reduce_all_ops<float>(repl);
  expect_reduce_all_ops<double>(repl);
  expect_reduce_all_ops<bfloat16>(repl);
  expect_reduce_all_ops<float16>(repl);
  expect_reduce_all_ops<std::int32_t>(repl);
  expect_reduce_all_ops<std::int64_t>(repl);
  expect_reduce_all_ops<std::uint8_t>(repl);
}

TEST(ReplicatorReduceTest, IntegerMeanTruncatesAndMinMaxHandleNegatives) {
  Replicator repl(with_replicas(4));
  // v_r = 2r - 3: -3, -1, 1, 3; sum 0; with +1 added to r = 3: sum 1, mean 1/4 -> 0.
  const PerReplica<std::int32_t> v = repl.run([](ReplicaContext& ctx) {
    return 2 * ctx.replica_id() - 3 + (ctx.replica_id() == 3 ? 1 : 0);
  });
  EXPECT_EQ(repl.reduce(ReduceOp::kSum, v), 1);
  EXPECT_EQ(repl.reduce(ReduceOp::kMean, v), 0);
  EXPECT_EQ(repl.reduce(ReduceOp::kMin, v), -3);
  EXPECT_EQ(repl.reduce(ReduceOp::kMax, v), 4);
  EXPECT_EQ(repl.reduce(ReduceOp::kProd, v), -3 * -1 * 1 * 4);
  // 7 + 8 + 9 + 10 = 34; 34 / 4 = 8.5 truncates to 8.
  const PerReplica<std::int64_t> w =
      repl.run([](ReplicaContext& ctx) { return std::int64_t{7} + ctx.replica_id(); });
  EXPECT_EQ(repl.reduce(ReduceOp::kMean, w), 8);
}

TEST(ReplicatorReduceTest, FloatMeanIsExactWhenRepresentable) {
  Replicator repl(with_replicas(4));
  // 1 + 2 + 3 + 4 = 10; 10 / 4 = 2.5 exactly in every float type.
  const PerReplica<float> f =
      repl.run([](ReplicaContext& ctx) { return static_cast<float>(ctx.replica_id() + 1); });
  EXPECT_EQ(repl.reduce(ReduceOp::kMean, f), 2.5f);
  const PerReplica<bfloat16> b = repl.run(
      [](ReplicaContext& ctx) { return bfloat16(static_cast<float>(ctx.replica_id() + 1)); });
  EXPECT_EQ(static_cast<float>(repl.reduce(ReduceOp::kMean, b)), 2.5f);
}

TEST(ReplicatorReduceTest, IntegerSumAndProductWrap) {
  Replicator repl(with_replicas(3));
  // u8: 200 * 3 = 600 = 88 mod 256; 200^3 = 8000000 = 0 mod 256 (200 = 8 * 25, 8^3 = 512).
  const PerReplica<std::uint8_t> u = repl.run([](ReplicaContext&) { return std::uint8_t{200}; });
  EXPECT_EQ(repl.reduce(ReduceOp::kSum, u), 88);
  EXPECT_EQ(repl.reduce(ReduceOp::kProd, u), 0);
  // i32: 2^30 * 3 = 3 * 2^30 mod 2^32 = -2^30 as int32.
  const PerReplica<std::int32_t> i =
      repl.run([](ReplicaContext&) { return std::int32_t{1} << 30; });
  EXPECT_EQ(repl.reduce(ReduceOp::kSum, i), -(std::int32_t{1} << 30));
}

TEST(ReplicatorReduceTest, SingleReplicaReduceIsTheIdentity) {
  Replicator repl(with_replicas(1));
  const PerReplica<double> v = repl.run([](ReplicaContext&) { return 0.1; });
  for (const ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd}) {
    EXPECT_EQ(repl.reduce(op, v), 0.1) << to_string(op);
  }
}

TEST(ReplicatorReduceTest, WrongNumberOfValuesIsInvalidArgument) {
  Replicator repl(with_replicas(3));
  const PerReplica<float> too_few(std::deque<float>{1.0f, 2.0f});
  try {
    repl.reduce(ReduceOp::kSum, too_few);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find('3'), std::string::npos) << message;
    EXPECT_NE(message.find('2'), std::string::npos) << message;
  }
  EXPECT_THROW(repl.reduce(ReduceOp::kSum, PerReplica<float>{}), InvalidArgument);
}

// ---- independence, scale, endurance -----------------------------------------------------

// all_reduce(sum) of v_r = r + 1 + offset over n replicas: n(n+1)/2 + n*offset.
std::int64_t run_sum(Replicator& repl, std::int64_t offset) {
  const PerReplica<std::int64_t> sums = repl.run([offset](ReplicaContext& ctx) {
    std::int64_t v[1] = {ctx.replica_id() + 1 + offset};
    ctx.all_reduce(v);
    return v[0];
  });
  for (const std::int64_t s : sums) EXPECT_EQ(s, sums[0]);
  return sums[0];
}

TEST(ReplicatorTest, TwoReplicatorsInterleaveRuns) {
  Replicator a(with_replicas(3));
  Replicator b(with_replicas(4));
  for (std::int64_t k = 0; k < 50; ++k) {
    ASSERT_EQ(run_sum(a, k), 6 + 3 * k);
    ASSERT_EQ(run_sum(b, k), 10 + 4 * k);
  }
}

TEST(ReplicatorTest, TwoReplicatorsRunConcurrentlyFromTwoThreads) {
  Replicator a(with_replicas(3));
  Replicator b(with_replicas(2));
  std::atomic<int> failures{0};
  const auto drive = [&failures](Replicator& repl, std::int64_t n) {
    for (std::int64_t k = 0; k < 100; ++k) {
      const PerReplica<std::int64_t> sums = repl.run([k](ReplicaContext& ctx) {
        std::int64_t v[2] = {ctx.replica_id() + 1 + k, 1};
        ctx.all_reduce(v);
        ctx.barrier();
        return v[0] * 1000 + v[1];
      });
      const std::int64_t want = (n * (n + 1) / 2 + n * k) * 1000 + n;
      for (const std::int64_t s : sums) {
        if (s != want) failures.fetch_add(1);
      }
    }
  };
  std::thread ta([&] { drive(a, 3); });
  std::thread tb([&] { drive(b, 2); });
  ta.join();
  tb.join();
  EXPECT_EQ(failures.load(), 0);
}

// 16 replicas on a machine with fewer cores: waiting replicas must yield, not spin forever.
TEST(ReplicatorTest, SixteenReplicasOnFewerCores) {
  Replicator repl(with_replicas(16));
  for (int k = 0; k < 20; ++k) {
    const PerReplica<std::vector<float>> out = repl.run([k](ReplicaContext& ctx) {
      // 1000 elements: v_r[i] = r + i % 5 + k; sum over r = 120 + 16 * (i % 5 + k), exact.
      std::vector<float> v(1000);
      for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<float>(ctx.replica_id() + static_cast<int>(i % 5) + k);
      }
      ctx.all_reduce(v);
      ctx.barrier();
      return v;
    });
    for (int r = 0; r < 16; ++r) {
      for (std::size_t i = 0; i < 1000; ++i) {
        ASSERT_EQ(out[r][i], static_cast<float>(120 + 16 * (static_cast<int>(i % 5) + k)))
            << "run " << k << " replica " << r << " element " << i;
      }
    }
  }
}

TEST(ReplicatorTest, ThousandsOfShortRunsComplete) {
  Replicator repl(with_replicas(4));
  std::int64_t mismatches = 0;
  for (int k = 0; k < 2000; ++k) {
    const PerReplica<std::int32_t> out = repl.run([k](ReplicaContext& ctx) {
      std::int32_t v[1] = {k + ctx.replica_id()};
      ctx.all_reduce(v, {.op = ReduceOp::kMax});
      return v[0];
    });
    for (const std::int32_t v : out) mismatches += v != k + 3;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ReplicatorTest, ThousandsOfEmptyRunsComplete) {
  Replicator repl(with_replicas(3));
  std::int64_t total = 0;
  for (int k = 0; k < 2000; ++k) {
    const PerReplica<int> out = repl.run([](ReplicaContext& ctx) { return ctx.replica_id(); });
    for (const int v : out) total += v;
  }
  EXPECT_EQ(total, 2000 * 3);
}

TEST(ReplicatorTest, ConstructAndDestroyRepeatedly) {
  for (int k = 0; k < 50; ++k) {
    Replicator repl(with_replicas(1 + k % 5));
    if (k % 2 == 0) {
      const PerReplica<int> out = repl.run([](ReplicaContext& ctx) { return ctx.replica_id(); });
      ASSERT_EQ(out.size(), 1 + k % 5);
    }
  }
}

}  // namespace
}  // namespace replicator

namespace replicator {
namespace {

// The hooks of on_first_replica_threads are process-wide: other tests of this binary may
// have started replica threads already, and then a hook runs when registered. Either way it
// has run once, on this thread, before a Replicator with replica threads is constructed.
std::atomic<int> hook_runs{0};
std::thread::id hook_thread;
void count_hook() {
  hook_thread = std::this_thread::get_id();
  hook_runs.fetch_add(1);
}

TEST(FirstReplicaThreadsTest, AHookRunsOnceOnTheConstructingThread) {
  detail::on_first_replica_threads(count_hook);
  { const Replicator one(with_replicas(1)); }
  EXPECT_LE(hook_runs.load(), 1);
  for (int k = 0; k < 3; ++k) {
    Replicator repl(with_replicas(2));
    EXPECT_EQ(hook_runs.load(), 1);
    EXPECT_EQ(hook_thread, std::this_thread::get_id());
    repl.run([](ReplicaContext&) { EXPECT_EQ(hook_runs.load(), 1); });
  }
}

std::atomic<int> failing_runs{0};
void fail_once() {
  if (failing_runs.fetch_add(1) == 0) throw std::runtime_error("not ready");
}

// A hook that throws leaves the constructor (or the registration, once threads were
// started) with its error and runs again at the next Replicator, which then starts.
TEST(FirstReplicaThreadsTest, AHookThatThrowsRunsAgain) {
  bool thrown = false;
  try {
    detail::on_first_replica_threads(fail_once);
  } catch (const std::runtime_error&) {
    thrown = true;
  }
  if (!thrown) {
    EXPECT_THROW(Replicator{with_replicas(2)}, std::runtime_error);
  }
  const Replicator repl(with_replicas(2));
  EXPECT_EQ(failing_runs.load(), 2);
}

TEST(IntegerMeanTest, NarrowIntegersDoNotWrapBeforeDividing) {
  // u8: 200 + 250 would wrap to 194 in u8; the mean sums in i64 and gives 225.
  // i32: 2e9 + 2e9 overflows i32; the mean is 2e9.
  Config config;
  config.local_replicas = 2;
  Replicator repl(config);
  repl.run([](ReplicaContext& ctx) {
    std::vector<std::uint8_t> u(3, ctx.replica_id() == 0 ? 200 : 250);
    std::vector<std::int32_t> i(3, 2'000'000'000);
    ctx.all_reduce(u, {.op = ReduceOp::kMean});
    ctx.all_reduce(i, {.op = ReduceOp::kMean});
    EXPECT_EQ(u, std::vector<std::uint8_t>(3, 225));
    EXPECT_EQ(i, std::vector<std::int32_t>(3, 2'000'000'000));
    std::vector<std::uint8_t> s(3, ctx.replica_id() == 0 ? 200 : 250);
    ctx.all_reduce(s);  // the sum itself wraps: (200 + 250) mod 256
    EXPECT_EQ(s, std::vector<std::uint8_t>(3, 194));
  });
}

}  // namespace
}  // namespace replicator
