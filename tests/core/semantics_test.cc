// Tests of the semantics DESIGN.md promises for every engine, here on the local engine:
//   (a) a collective mismatch is raised as CollectiveMismatch on EVERY replica;
//   (b) a failing step releases the others with Aborted, run rethrows the first error;
//   (c) a blocking call past its deadline raises Timeout naming the missing replicas;
//   (d) bad input gives InvalidArgument with a useful message, never a hang;
//   (e) zero-length and single-replica collectives are valid;
//   (f) PerReplica<bool> holds real bools.
// What each replica caught is recorded inside its step (one slot per replica, written only
// by that replica) and checked on the test thread after run returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "replicator/replicator.h"
#include "tests/harness/harness.h"

// Checks that `haystack` contains `needle` (gtest's own substring predicate, no gmock).
#define EXPECT_HAS_SUBSTR(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

namespace replicator {
namespace {

using std::chrono::milliseconds;
using Step = std::function<void(ReplicaContext&)>;

Config with_replicas(int n, std::optional<milliseconds> timeout = std::nullopt) {
  Config config;
  config.local_replicas = n;
  if (timeout) config.timeout = *timeout;
  return config;
}

using harness::caught_as;
using harness::describe;

// Runs `step` on every replica, catching what each throws; returns one slot per replica.
// As every step returns normally, run itself must complete.
std::vector<std::exception_ptr> run_and_catch(Replicator& repl, const Step& step) {
  std::vector<std::exception_ptr> caught(static_cast<std::size_t>(repl.num_replicas()));
  const std::exception_ptr from_run = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      caught[static_cast<std::size_t>(ctx.replica_id())] = harness::capture([&] { step(ctx); });
    });
  });
  EXPECT_FALSE(from_run) << "run threw although every step returned: " << describe(from_run);
  return caught;
}

// Checks the Replicator still runs a correct all_reduce: sum of r + 1 is n(n+1)/2.
void expect_healthy(Replicator& repl) {
  const int n = repl.num_replicas();
  const PerReplica<std::vector<std::int64_t>> out = repl.run([](ReplicaContext& ctx) {
    std::vector<std::int64_t> v(100, ctx.replica_id() + 1);
    ctx.barrier();
    ctx.all_reduce(v);
    return v;
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(out[r], std::vector<std::int64_t>(100, n * (n + 1) / 2)) << "replica " << r;
  }
}

// =========================================================================================
// (a) CollectiveMismatch on every replica
// =========================================================================================

// Two barriers first, so the mismatching collective is #2 of the step. `call(ctx)` issues
// the mismatching collective; every replica must catch CollectiveMismatch with sequence 2,
// a message naming "#2" and every fragment in `mentions`, and one call description per
// replica. The Replicator must then work normally.
void expect_mismatch_everywhere(int n, const Step& call, const std::vector<std::string>& mentions,
                                const std::vector<std::string>& calls_prefix = {}) {
  Replicator repl(with_replicas(n));
  const std::vector<std::exception_ptr> caught = run_and_catch(repl, [&](ReplicaContext& ctx) {
    ctx.barrier();
    ctx.barrier();
    call(ctx);
  });
  for (int r = 0; r < n; ++r) {
    const auto e = caught_as<CollectiveMismatch>(caught[static_cast<std::size_t>(r)]);
    ASSERT_TRUE(e) << "replica " << r << " caught "
                   << describe(caught[static_cast<std::size_t>(r)]);
    EXPECT_EQ(e->sequence(), 2u);
    const std::string message = e->what();
    EXPECT_HAS_SUBSTR(message, "#2 ");
    for (const std::string& m : mentions) EXPECT_HAS_SUBSTR(message, m);
    ASSERT_EQ(e->calls().size(), static_cast<std::size_t>(n)) << message;
    for (std::size_t j = 0; j < calls_prefix.size() && j < e->calls().size(); ++j) {
      EXPECT_EQ(e->calls()[j].rfind(calls_prefix[j], 0), 0u)
          << "calls()[" << j << "] = " << e->calls()[j] << ", want prefix " << calls_prefix[j];
    }
  }
  expect_healthy(repl);
}

TEST(MismatchTest, DifferentKindRaisedOnEveryReplica) {
  expect_mismatch_everywhere(
      3,
      [](ReplicaContext& ctx) {
        std::vector<float> in(8, 1.0f), out(24);
        if (ctx.replica_id() == 2) {
          ctx.all_gather(in, out);
        } else {
          ctx.all_reduce(in);
        }
      },
      {"all_reduce(f32 x 8, op=sum)", "all_gather(f32 x 8)", "replicas 0-1", "replica 2"},
      {"all_reduce(f32 x 8, op=sum)", "all_reduce(f32 x 8, op=sum)", "all_gather(f32 x 8)"});
}

// A wrapper of the user's passes its caller's line on, as the torch layer does.
void reduce_via(ReplicaContext& ctx, std::vector<float>& v, CallSite where = CallSite::here()) {
  ctx.all_reduce(v, {}, where);
}

TEST(MismatchTest, MessageNamesEachSidesCallSite) {
  std::atomic<std::uint32_t> broadcast_line{0}, wrapped_line{0};
  Replicator repl(with_replicas(4));
  const auto caught = run_and_catch(repl, [&](ReplicaContext& ctx) {
    std::vector<float> v(8, 1.0f);
    if (ctx.replica_id() == 3) {
      wrapped_line = CallSite::here().line + 1;
      reduce_via(ctx, v);
    } else {
      broadcast_line = CallSite::here().line + 1;
      ctx.broadcast(v);
    }
  });
  const std::string b = "semantics_test.cc:" + std::to_string(broadcast_line);
  const std::string w = "semantics_test.cc:" + std::to_string(wrapped_line);
  for (int r = 0; r < 4; ++r) {
    const auto e = caught_as<CollectiveMismatch>(caught[static_cast<std::size_t>(r)]);
    ASSERT_TRUE(e) << describe(caught[static_cast<std::size_t>(r)]);
    const std::string message = e->what();
    EXPECT_HAS_SUBSTR(message, "replicas 0-2 called broadcast(f32 x 8, root=0) at " + b);
    EXPECT_HAS_SUBSTR(message, "replica 3 called all_reduce(f32 x 8, op=sum) at " + w);
    EXPECT_EQ(e->calls()[3], "all_reduce(f32 x 8, op=sum) at " + w);
  }
  expect_healthy(repl);
}

TEST(MismatchTest, BarrierAgainstAllReduceRaisedOnEveryReplica) {
  expect_mismatch_everywhere(4,
                             [](ReplicaContext& ctx) {
                               std::vector<std::int32_t> v(3, 1);
                               if (ctx.replica_id() == 0) {
                                 ctx.barrier();
                               } else {
                                 ctx.all_reduce(v);
                               }
                             },
                             {"barrier()", "all_reduce(i32 x 3, op=sum)"});
}

TEST(MismatchTest, DifferentSignatureRaisedOnEveryReplica) {
  // Same dtype and count, different caller tag (e.g. tensor shapes [2,3] and [3,2]).
  expect_mismatch_everywhere(3,
                             [](ReplicaContext& ctx) {
                               std::vector<float> v(6, 1.0f);
                               ctx.all_reduce(v, {.signature = ctx.replica_id() == 1 ? 7u : 5u});
                             },
                             {"f32 x 6", "signature #"});
}

TEST(MismatchTest, DifferentDTypeRaisedOnEveryReplica) {
  expect_mismatch_everywhere(4,
                             [](ReplicaContext& ctx) {
                               if (ctx.replica_id() == 1) {
                                 std::vector<double> v(8, 1.0);
                                 ctx.all_reduce(v);
                               } else {
                                 std::vector<float> v(8, 1.0f);
                                 ctx.all_reduce(v);
                               }
                             },
                             {"f64 x 8", "f32 x 8"});
}

TEST(MismatchTest, DifferentCountRaisedOnEveryReplica) {
  expect_mismatch_everywhere(2,
                             [](ReplicaContext& ctx) {
                               std::vector<float> v(ctx.replica_id() == 0 ? 8 : 9, 1.0f);
                               ctx.all_reduce(v);
                             },
                             {"f32 x 8", "f32 x 9"});
}

// One replica on the staged path, the other on the direct path: the check must still come
// before any algorithm runs.
TEST(MismatchTest, DifferentCountAcrossPathsRaisedOnEveryReplica) {
  expect_mismatch_everywhere(3,
                             [](ReplicaContext& ctx) {
                               std::vector<float> v(ctx.replica_id() == 1 ? 100000 : 8, 1.0f);
                               ctx.all_reduce(v);
                             },
                             {"f32 x 8", "f32 x 100000"});
}

TEST(MismatchTest, DifferentLargeCountRaisedOnEveryReplica) {
  expect_mismatch_everywhere(3,
                             [](ReplicaContext& ctx) {
                               std::vector<float> in(ctx.replica_id() == 2 ? 70001 : 70000, 1.0f);
                               std::vector<float> out(in.size() * 3);
                               ctx.all_gather(in, out);
                             },
                             {"all_gather(f32 x 70000)", "all_gather(f32 x 70001)"});
}

TEST(MismatchTest, DifferentRootRaisedOnEveryReplica) {
  expect_mismatch_everywhere(3,
                             [](ReplicaContext& ctx) {
                               std::vector<float> v(8, 1.0f);
                               ctx.broadcast(v, {.root = ctx.replica_id() == 0 ? 1 : 0});
                             },
                             {"root=0", "root=1"});
}

TEST(MismatchTest, DifferentGatherRootRaisedOnEveryReplica) {
  expect_mismatch_everywhere(3,
                             [](ReplicaContext& ctx) {
                               const int root = ctx.replica_id() == 0 ? 1 : 0;
                               std::vector<float> in(8, 1.0f);
                               std::vector<float> out(ctx.replica_id() == root ? 24 : 0);
                               ctx.gather(in, out, {.root = root});
                             },
                             {"gather(f32 x 8, root=0)", "gather(f32 x 8, root=1)"});
}

TEST(MismatchTest, GatherAgainstAllGatherRaisedOnEveryReplica) {
  expect_mismatch_everywhere(2,
                             [](ReplicaContext& ctx) {
                               std::vector<float> in(8, 1.0f), out(16);
                               if (ctx.replica_id() == 1) {
                                 ctx.gather(in, out);
                               } else {
                                 ctx.all_gather(in, out);
                               }
                             },
                             {"all_gather(f32 x 8)", "gather(f32 x 8, root=0)"});
}

TEST(MismatchTest, DifferentReduceOpRaisedOnEveryReplica) {
  expect_mismatch_everywhere(
      3,
      [](ReplicaContext& ctx) {
        std::vector<float> v(8, 1.0f);
        ctx.all_reduce(v, {.op = ctx.replica_id() == 2 ? ReduceOp::kMax : ReduceOp::kSum});
      },
      {"op=sum", "op=max"});
}

TEST(MismatchTest, DifferentReduceScatterOpRaisedOnEveryReplica) {
  expect_mismatch_everywhere(
      2,
      [](ReplicaContext& ctx) {
        std::vector<std::int64_t> in(8, 1), out(4);
        ctx.reduce_scatter(in, out,
                           {.op = ctx.replica_id() == 0 ? ReduceOp::kMin : ReduceOp::kProd});
      },
      {"reduce_scatter(i64 x 8, op=min)", "reduce_scatter(i64 x 8, op=prod)"});
}

TEST(MismatchTest, DifferentPermutePairsRaisedOnEveryReplica) {
  expect_mismatch_everywhere(3,
                             [](ReplicaContext& ctx) {
                               const std::vector<PermutePair> ring = {{0, 1}, {1, 2}, {2, 0}};
                               const std::vector<PermutePair> back = {{1, 0}, {2, 1}, {0, 2}};
                               std::vector<float> in(4, 1.0f), out(4);
                               ctx.permute(in, out, ctx.replica_id() == 0 ? back : ring);
                             },
                             {"permute(f32 x 4"});
}

TEST(MismatchTest, DifferentFusedLayoutRaisedOnEveryReplica) {
  expect_mismatch_everywhere(
      2,
      [](ReplicaContext& ctx) {
        // Same total count (12) and same first dtype; only the split differs.
        std::vector<float> a(ctx.replica_id() == 0 ? 4 : 6), b(ctx.replica_id() == 0 ? 8 : 6);
        const Buffer buffers[] = {Buffer::of(std::span(a)), Buffer::of(std::span(b))};
        ctx.all_reduce(buffers);
      },
      {"fused"});
}

TEST(MismatchTest, UncaughtMismatchMakesRunThrowIt) {
  Replicator repl(with_replicas(3));
  try {
    repl.run([](ReplicaContext& ctx) {
      std::vector<float> v(4, 1.0f);
      ctx.all_reduce(v, {.op = ctx.replica_id() == 1 ? ReduceOp::kMin : ReduceOp::kSum});
    });
    FAIL() << "run did not throw";
  } catch (const CollectiveMismatch& e) {
    ASSERT_TRUE(e.replica().has_value());
    EXPECT_GE(*e.replica(), 0);
    EXPECT_LT(*e.replica(), 3);
    EXPECT_EQ(e.sequence(), 0u);
    EXPECT_HAS_SUBSTR(std::string(e.what()), "#0 ");
  }
  expect_healthy(repl);
}

// The usual case: nobody catches the mismatch. Every replica must still raise
// CollectiveMismatch, also those that wake from the barrier only after a faster replica
// has detected the mismatch and failed its step (which releases the group). Repeated, as
// which replicas are late is up to the scheduler.
TEST(MismatchTest, UncaughtMismatchRaisedOnEveryReplica) {
  constexpr int kReplicas = 4;
  Replicator repl(with_replicas(kReplicas));
  int wrong = 0;
  std::string first_wrong;
  for (int k = 0; k < 20; ++k) {
    std::vector<std::exception_ptr> caught(kReplicas);
    EXPECT_THROW(repl.run([&](ReplicaContext& ctx) {
      harness::keep_and_rethrow(caught[static_cast<std::size_t>(ctx.replica_id())], [&] {
        std::vector<float> v(32, 1.0f);
        ctx.all_reduce(v, {.op = ctx.replica_id() == 1 ? ReduceOp::kMax : ReduceOp::kSum});
      });
    }),
                 CollectiveMismatch);
    for (int r = 0; r < kReplicas; ++r) {
      if (!caught_as<CollectiveMismatch>(caught[static_cast<std::size_t>(r)])) ++wrong;
    }
    if (const std::string first = harness::first_not_raising<CollectiveMismatch>(caught);
        !first.empty() && first_wrong.empty()) {
      first_wrong = "run " + std::to_string(k) + ", " + first;
    }
  }
  EXPECT_EQ(wrong, 0) << "replicas (of 20 x " << kReplicas
                      << ") that did not get CollectiveMismatch; first: " << first_wrong;
}

TEST(MismatchTest, CallRefusedLocallyTakesNoSequenceNumber) {
  // A call refused by its local checks never reached the peers, so it takes no sequence
  // number: the next collective is #0 on every replica, matches, and reduces this run's
  // data (never a descriptor or buffer left from the previous run).
  Replicator repl(with_replicas(2));
  repl.run([](ReplicaContext& ctx) {
    std::vector<float> v(8, 100.0f);
    ctx.all_reduce(v);
  });
  std::vector<float> result(2, 0.0f);
  std::vector<std::uint64_t> sequence(2, 99);
  // Replica 1 goes on only once replica 0's call has been refused.
  harness::CountDown refused(1);
  repl.run([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.replica_id());
    std::vector<float> v(8, 1.0f);
    if (r == 0) {
      EXPECT_THROW(ctx.broadcast(v, {.root = 7}), InvalidArgument);
      refused.count_down();
    } else {
      EXPECT_TRUE(refused.wait_for(std::chrono::seconds(30)));
    }
    sequence[r] = ctx.sequence();
    ctx.all_reduce(v);
    result[r] = v[0];
  });
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(sequence[r], 0u) << "replica " << r;
    EXPECT_EQ(result[r], 2.0f) << "replica " << r;  // 1 + 1 from this run
  }
}

// A replica whose step returns while the others wait in a collective: they must get
// CollectiveMismatch (not hang), and run rethrows a CollectiveMismatch.
TEST(MismatchTest, ReplicaReturningEarlyRaisesMismatchNotHang) {
  constexpr int kReplicas = 4;
  Replicator repl(with_replicas(kReplicas));
  std::vector<std::exception_ptr> caught(kReplicas);
  try {
    repl.run([&](ReplicaContext& ctx) {
      ctx.barrier();
      if (ctx.replica_id() == 2) return;  // skips the all_reduce below
      harness::keep_and_rethrow(caught[static_cast<std::size_t>(ctx.replica_id())], [&] {
        std::vector<float> v(16, 1.0f);
        ctx.all_reduce(v);
      });
    });
    FAIL() << "run did not throw";
  } catch (const CollectiveMismatch& e) {
    EXPECT_TRUE(e.replica().has_value()) << e.what();  // whichever replica failed first
    EXPECT_EQ(e.sequence(), 1u);
    EXPECT_HAS_SUBSTR(std::string(e.what()), "#1 ");
    EXPECT_HAS_SUBSTR(std::string(e.what()), "return from the step function");
  }
  for (int r = 0; r < kReplicas; ++r) {
    if (r == 2) continue;
    const auto e = caught_as<CollectiveMismatch>(caught[static_cast<std::size_t>(r)]);
    ASSERT_TRUE(e) << "replica " << r << " caught "
                   << describe(caught[static_cast<std::size_t>(r)]);
    EXPECT_EQ(e->sequence(), 1u);
    EXPECT_HAS_SUBSTR(std::string(e->what()), "all_reduce(f32 x 16, op=sum)");
    EXPECT_HAS_SUBSTR(std::string(e->what()), "return from the step function");
  }
  expect_healthy(repl);
}

// =========================================================================================
// (b) A failing step releases the others with Aborted; run rethrows the first error
// =========================================================================================

// Replica `failing` runs `fail()` after one barrier; the others go on to `wait(ctx)` (a
// collective) and must be released with Aborted naming the failing replica (from that
// collective, or from the barrier if they leave it only after the failure).
std::exception_ptr run_with_failure(Replicator& repl, int failing,
                                    const std::function<void()>& fail, const Step& wait,
                                    std::vector<std::exception_ptr>& caught) {
  caught.assign(static_cast<std::size_t>(repl.num_replicas()), nullptr);
  std::exception_ptr failed_own;  // what the failing replica threw: not a release
  const std::exception_ptr from_run = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      const int r = ctx.replica_id();
      harness::keep_and_rethrow(r == failing ? failed_own : caught[static_cast<std::size_t>(r)],
                                [&] {
                                  ctx.barrier();
                                  if (r == failing) fail();
                                  wait(ctx);
                                });
    });
  });
  EXPECT_TRUE(from_run) << "run did not throw";
  return from_run;
}

void expect_others_aborted(const std::vector<std::exception_ptr>& caught, int failing,
                           const std::string& cause) {
  for (std::size_t r = 0; r < caught.size(); ++r) {
    if (static_cast<int>(r) == failing) continue;
    const auto e = caught_as<Aborted>(caught[r]);
    ASSERT_TRUE(e) << "replica " << r << " caught " << describe(caught[r]);
    EXPECT_EQ(e->cause_replica(), failing);
    EXPECT_HAS_SUBSTR(std::string(e->what()), "replica " + std::to_string(failing));
    EXPECT_HAS_SUBSTR(std::string(e->what()), cause);
  }
}

TEST(FailureTest, StdExceptionReleasesOthersAndComesBackAsReplicaFailed) {
  Replicator repl(with_replicas(4));
  std::vector<std::exception_ptr> caught;
  const std::exception_ptr error = run_with_failure(
      repl, 1, [] { throw std::runtime_error("boom in the step"); },
      [](ReplicaContext& ctx) {
        std::vector<float> v(1000, 1.0f);
        ctx.all_reduce(v);
      },
      caught);
  const auto failed = caught_as<ReplicaFailed>(error);
  ASSERT_TRUE(failed) << describe(error);
  EXPECT_EQ(failed->replica(), 1);
  EXPECT_HAS_SUBSTR(std::string(failed->what()), "replica 1");
  EXPECT_HAS_SUBSTR(std::string(failed->what()), "boom in the step");
  const auto original = caught_as<std::runtime_error>(failed->original());
  ASSERT_TRUE(original) << describe(failed->original());
  EXPECT_STREQ(original->what(), "boom in the step");
  EXPECT_FALSE(caught_as<Error>(failed->original())) << "original() is the user's exception";
  expect_others_aborted(caught, 1, "boom in the step");
  expect_healthy(repl);
}

TEST(FailureTest, ReplicatorErrorKeepsItsTypeWithReplicaSet) {
  Replicator repl(with_replicas(3));
  std::vector<std::exception_ptr> caught;
  const std::exception_ptr error = run_with_failure(
      repl, 2, [] { throw InvalidArgument("user says the batch is empty"); },
      [](ReplicaContext& ctx) { ctx.barrier(); }, caught);
  const auto e = caught_as<InvalidArgument>(error);
  ASSERT_TRUE(e) << describe(error);
  EXPECT_FALSE(caught_as<ReplicaFailed>(error));
  EXPECT_EQ(e->replica(), 2);
  EXPECT_STREQ(e->what(), "user says the batch is empty");
  expect_others_aborted(caught, 2, "user says the batch is empty");
  expect_healthy(repl);
}

TEST(FailureTest, NonStandardExceptionComesBackAsReplicaFailed) {
  Replicator repl(with_replicas(3));
  std::vector<std::exception_ptr> caught;
  const std::exception_ptr error = run_with_failure(
      repl, 0, [] { throw 42; },
      [](ReplicaContext& ctx) {
        std::vector<std::int32_t> in(3), out(9);
        ctx.all_gather(in, out);
      },
      caught);
  const auto failed = caught_as<ReplicaFailed>(error);
  ASSERT_TRUE(failed) << describe(error);
  EXPECT_EQ(failed->replica(), 0);
  const auto original = caught_as<int>(failed->original());
  ASSERT_TRUE(original);
  EXPECT_EQ(*original, 42);
  for (std::size_t r = 1; r < caught.size(); ++r) {
    const auto aborted = caught_as<Aborted>(caught[r]);
    ASSERT_TRUE(aborted) << "replica " << r << " caught " << describe(caught[r]);
    EXPECT_EQ(aborted->cause_replica(), 0);
  }
  expect_healthy(repl);
}

// The others are in the direct (two-barrier) path of a large all_reduce.
TEST(FailureTest, FailureReleasesOthersFromLargeCollective) {
  Replicator repl(with_replicas(3));
  std::vector<std::exception_ptr> caught;
  const std::exception_ptr error = run_with_failure(
      repl, 0, [] { throw std::logic_error("bad shard"); },
      [](ReplicaContext& ctx) {
        std::vector<double> v(100000, 1.0);
        ctx.all_reduce(v);
      },
      caught);
  const auto failed = caught_as<ReplicaFailed>(error);
  ASSERT_TRUE(failed) << describe(error);
  EXPECT_EQ(failed->replica(), 0);
  expect_others_aborted(caught, 0, "bad shard");
  expect_healthy(repl);
}

// The others have already returned (they wait in the end-of-step check); run still
// rethrows the failure.
TEST(FailureTest, FailureAfterOthersReturnedIsRethrown) {
  Replicator repl(with_replicas(3));
  try {
    repl.run([](ReplicaContext& ctx) {
      ctx.barrier();
      if (ctx.replica_id() == 1) throw std::runtime_error("late failure");
    });
    FAIL() << "run did not throw";
  } catch (const ReplicaFailed& e) {
    EXPECT_EQ(e.replica(), 1);
    EXPECT_HAS_SUBSTR(std::string(e.what()), "late failure");
  }
  expect_healthy(repl);
}

TEST(FailureTest, FailureBeforeAnyCollectiveReleasesOthers) {
  Replicator repl(with_replicas(4));
  std::vector<std::exception_ptr> caught(4);
  EXPECT_THROW(repl.run([&](ReplicaContext& ctx) {
    if (ctx.replica_id() == 3) throw std::runtime_error("early");
    harness::keep_and_rethrow(caught[static_cast<std::size_t>(ctx.replica_id())], [&] {
      ctx.barrier();
      ctx.barrier();
    });
  }),
               ReplicaFailed);
  EXPECT_EQ(harness::first_not_raising<Aborted>(caught, {3}), "");
  expect_healthy(repl);
}

TEST(FailureTest, ManyFailingRunsInARowLeaveTheReplicatorUsable) {
  Replicator repl(with_replicas(3));
  for (int k = 0; k < 30; ++k) {
    const int failing = k % 3;
    EXPECT_THROW(repl.run([failing](ReplicaContext& ctx) {
      std::vector<float> v(64, 1.0f);
      ctx.all_reduce(v);
      if (ctx.replica_id() == failing) throw std::runtime_error("again");
      ctx.all_reduce(v);
    }),
                 ReplicaFailed);
    expect_healthy(repl);
  }
}

TEST(FailureTest, EveryReplicaFailingReportsOneOfThem) {
  Replicator repl(with_replicas(4));
  try {
    repl.run([](ReplicaContext& ctx) -> int {
      throw std::runtime_error("all fail " + std::to_string(ctx.replica_id()));
    });
    FAIL() << "run did not throw";
  } catch (const ReplicaFailed& e) {
    ASSERT_TRUE(e.replica().has_value());
    EXPECT_HAS_SUBSTR(std::string(e.what()), "all fail " + std::to_string(*e.replica()));
  }
  expect_healthy(repl);
}

// =========================================================================================
// (c) Timeout
// =========================================================================================

// Every replica runs `before(ctx)` (collective #0), then the others enter `collective(ctx)`
// (#1) while replicas in `sleepers` arrive late: each waits until every other replica has
// recorded what it caught (its Timeout), bounded so that a library that never times out
// fails the test instead of hanging it, and only then calls it.
struct TimeoutOutcome {
  std::exception_ptr from_run;
  std::vector<std::exception_ptr> caught;
};

TimeoutOutcome run_with_sleepers(Replicator& repl, const std::vector<int>& sleepers,
                                 const Step& before, const Step& collective) {
  const int n = repl.num_replicas();
  TimeoutOutcome outcome;
  outcome.caught.assign(static_cast<std::size_t>(n), nullptr);
  harness::CountDown waiters_done(n - static_cast<int>(sleepers.size()));
  outcome.from_run = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      const bool sleeper =
          std::find(sleepers.begin(), sleepers.end(), ctx.replica_id()) != sleepers.end();
      before(ctx);
      if (sleeper) {
        EXPECT_TRUE(waiters_done.wait_for(std::chrono::seconds(30)))
            << "the waiting replicas neither timed out nor returned within 30 s";
      }
      const std::exception_ptr error = harness::capture([&] { collective(ctx); });
      outcome.caught[static_cast<std::size_t>(ctx.replica_id())] = error;
      if (!sleeper) waiters_done.count_down();
      if (error) std::rethrow_exception(error);
    });
  });
  return outcome;
}

// The waiting replicas got Timeout naming exactly the sleepers; each sleeper got Aborted or
// Timeout; run threw (the first failure is a waiter's Timeout: the sleepers fail only after
// the waiters recorded theirs).
void expect_timeout_outcome(const TimeoutOutcome& outcome, const std::vector<int>& sleepers,
                            milliseconds deadline, const std::string& op) {
  ASSERT_TRUE(outcome.from_run) << "run did not throw";
  EXPECT_TRUE(caught_as<Timeout>(outcome.from_run)) << describe(outcome.from_run);
  for (std::size_t r = 0; r < outcome.caught.size(); ++r) {
    const bool sleeper =
        std::find(sleepers.begin(), sleepers.end(), static_cast<int>(r)) != sleepers.end();
    if (sleeper) {
      EXPECT_TRUE(caught_as<Aborted>(outcome.caught[r]) || caught_as<Timeout>(outcome.caught[r]))
          << "sleeper " << r << " caught " << describe(outcome.caught[r]);
      continue;
    }
    const auto e = caught_as<Timeout>(outcome.caught[r]);
    ASSERT_TRUE(e) << "replica " << r << " caught " << describe(outcome.caught[r]);
    EXPECT_EQ(e->missing(), sleepers);
    EXPECT_EQ(e->deadline(), deadline);
    EXPECT_EQ(e->op(), op);
    EXPECT_EQ(e->sequence(), 1u);
    const std::string message = e->what();
    EXPECT_HAS_SUBSTR(message, op + " #1");
    for (const int s : sleepers) EXPECT_HAS_SUBSTR(message, std::to_string(s));
  }
}

void barrier_step(ReplicaContext& ctx) { ctx.barrier(); }

TEST(TimeoutTest, ConfigTimeoutNamesTheSleeper) {
  const milliseconds deadline(200);
  Replicator repl(with_replicas(3, deadline));
  const TimeoutOutcome outcome =
      run_with_sleepers(repl, {2}, barrier_step, [](ReplicaContext& ctx) {
        std::vector<float> v(1000, 1.0f);
        ctx.all_reduce(v);
      });
  expect_timeout_outcome(outcome, {2}, deadline, "all_reduce");
  for (const int r : {0, 1}) {
    if (const auto e = caught_as<Timeout>(outcome.caught[static_cast<std::size_t>(r)])) {
      EXPECT_HAS_SUBSTR(std::string(e->what()), "replica 2 never arrived");
    }
  }
  expect_healthy(repl);
}

TEST(TimeoutTest, ConfigTimeoutNamesSeveralSleepers) {
  const milliseconds deadline(200);
  Replicator repl(with_replicas(4, deadline));
  const TimeoutOutcome outcome = run_with_sleepers(repl, {0, 3}, barrier_step, barrier_step);
  expect_timeout_outcome(outcome, {0, 3}, deadline, "barrier");
  expect_healthy(repl);
}

TEST(TimeoutTest, PerCallTimeoutOverridesConfigOnTheDirectPath) {
  const milliseconds deadline(200);
  Replicator repl(with_replicas(5));  // Config::timeout stays at its 5 min default
  const TimeoutOutcome outcome = run_with_sleepers(
      repl, {1, 3},
      [](ReplicaContext& ctx) {
        std::vector<double> v(70000, 1.0);  // 560 KB: the direct path
        ctx.all_reduce(v);
      },
      [deadline](ReplicaContext& ctx) {
        std::vector<double> v(70000, 1.0);
        ctx.all_reduce(v, {.op = ReduceOp::kMax, .timeout = deadline});
      });
  expect_timeout_outcome(outcome, {1, 3}, deadline, "all_reduce");
  expect_healthy(repl);
}

TEST(TimeoutTest, PerCallTimeoutOnBroadcastFromTheSleepingRoot) {
  const milliseconds deadline(150);
  Replicator repl(with_replicas(3));
  const TimeoutOutcome outcome =
      run_with_sleepers(repl, {0}, barrier_step, [deadline](ReplicaContext& ctx) {
        std::vector<std::int32_t> v(10, ctx.replica_id());
        ctx.broadcast(v, {.root = 0, .timeout = deadline});
      });
  expect_timeout_outcome(outcome, {0}, deadline, "broadcast");
  expect_healthy(repl);
  expect_healthy(repl);
}

// A per-call deadline longer than Config::timeout is honoured: a late replica within it is
// waited for, and the call succeeds. Replica 1 calls only once the others have been in the
// call for more than twice Config::timeout: a delay that must pass, measured from when the
// last of them entered rather than from the start of the step.
TEST(TimeoutTest, PerCallTimeoutCanBeLongerThanConfig) {
  constexpr milliseconds kConfigTimeout(300);
  Replicator repl(with_replicas(3, kConfigTimeout));
  std::mutex mu;
  std::chrono::steady_clock::time_point last_entered;  // guarded by mu
  harness::CountDown entered(2);
  const PerReplica<std::vector<float>> out = repl.run([&](ReplicaContext& ctx) {
    if (ctx.replica_id() == 1) {
      EXPECT_TRUE(entered.wait_for(std::chrono::seconds(30)));
      std::unique_lock lock(mu);
      const auto late = last_entered + 2 * kConfigTimeout;
      lock.unlock();
      std::this_thread::sleep_until(late);
    } else {
      {
        std::lock_guard lock(mu);
        last_entered = std::max(last_entered, std::chrono::steady_clock::now());
      }
      entered.count_down();
    }
    std::vector<float> v(8, 1.0f);
    ctx.all_reduce(v, {.timeout = std::chrono::minutes(1)});
    return v;
  });
  for (const auto& v : out) EXPECT_EQ(v, std::vector<float>(8, 3.0f));
}

// =========================================================================================
// (d) Bad input: InvalidArgument with a useful message, never a hang
// =========================================================================================

// Every replica issues the same bad call; each must catch InvalidArgument whose message
// holds every fragment of `mentions`. The Replicator must then work normally.
void expect_invalid_everywhere(int n, const Step& bad, const std::vector<std::string>& mentions) {
  Replicator repl(with_replicas(n));
  const std::vector<std::exception_ptr> caught = run_and_catch(repl, bad);
  for (int r = 0; r < n; ++r) {
    const auto e = caught_as<InvalidArgument>(caught[static_cast<std::size_t>(r)]);
    ASSERT_TRUE(e) << "replica " << r << " of " << n << " caught "
                   << describe(caught[static_cast<std::size_t>(r)]);
    for (const std::string& m : mentions) EXPECT_HAS_SUBSTR(std::string(e->what()), m);
  }
  expect_healthy(repl);
}

TEST(InvalidArgumentTest, AllGatherOutputOfWrongSize) {
  expect_invalid_everywhere(4,
                            [](ReplicaContext& ctx) {
                              std::vector<float> in(5), out(19);
                              ctx.all_gather(in, out);
                            },
                            {"all_gather", "output", "20", "19"});
  expect_invalid_everywhere(1,
                            [](ReplicaContext& ctx) {
                              std::vector<float> in(5), out(6);
                              ctx.all_gather(in, out);
                            },
                            {"all_gather", "5", "6"});
}

TEST(InvalidArgumentTest, GatherRootOutputOfWrongSizeOrRootOutOfRange) {
  // Each replica names itself the root, so each checks its own output (before any
  // communication): 7 elements where 2 x 4 are needed.
  expect_invalid_everywhere(2,
                            [](ReplicaContext& ctx) {
                              std::vector<float> in(4), out(7);
                              ctx.gather(in, out, {.root = ctx.replica_id()});
                            },
                            {"gather: output must hold input.size() * num_replicas() = 8 "
                             "elements, got 7"});
  expect_invalid_everywhere(3,
                            [](ReplicaContext& ctx) {
                              std::vector<float> in(4), out(12);
                              ctx.gather(in, out, {.root = 3});
                            },
                            {"gather: root must be a replica id in [0, 3), got 3"});
}

TEST(InvalidArgumentTest, ReduceScatterInputNotReplicasTimesOutput) {
  expect_invalid_everywhere(4,
                            [](ReplicaContext& ctx) {
                              std::vector<std::int32_t> in(10), out(3);
                              ctx.reduce_scatter(in, out);
                            },
                            {"reduce_scatter", "input", "12", "10"});
  expect_invalid_everywhere(1,
                            [](ReplicaContext& ctx) {
                              std::vector<std::int32_t> in(4), out(3);
                              ctx.reduce_scatter(in, out);
                            },
                            {"reduce_scatter", "3", "4"});
}

TEST(InvalidArgumentTest, AllToAllSizeNotAMultipleOfReplicas) {
  expect_invalid_everywhere(4,
                            [](ReplicaContext& ctx) {
                              std::vector<double> in(10), out(10);
                              ctx.all_to_all(in, out);
                            },
                            {"all_to_all", "10", "multiple", "4"});
}

TEST(InvalidArgumentTest, AllToAllOutputOfDifferentSize) {
  expect_invalid_everywhere(4,
                            [](ReplicaContext& ctx) {
                              std::vector<double> in(8), out(12);
                              ctx.all_to_all(in, out);
                            },
                            {"all_to_all", "8", "12"});
}

TEST(InvalidArgumentTest, BroadcastRootOutOfRange) {
  for (const int root : {-1, 4, 100}) {
    SCOPED_TRACE("root " + std::to_string(root));
    expect_invalid_everywhere(4,
                              [root](ReplicaContext& ctx) {
                                std::vector<float> v(3);
                                ctx.broadcast(v, {.root = root});
                              },
                              {"broadcast", "root", std::to_string(root), "[0, 4)"});
  }
  expect_invalid_everywhere(1,
                            [](ReplicaContext& ctx) {
                              std::vector<float> v(3);
                              ctx.broadcast(v, {.root = 1});
                            },
                            {"broadcast", "root", "1"});
}

TEST(InvalidArgumentTest, PermutePairOutOfRange) {
  for (const PermutePair& bad : {PermutePair{0, 4}, PermutePair{-1, 0}, PermutePair{7, 1}}) {
    const std::string text =
        "(" + std::to_string(bad.first) + ", " + std::to_string(bad.second) + ")";
    SCOPED_TRACE("pair " + text);
    expect_invalid_everywhere(4,
                              [bad](ReplicaContext& ctx) {
                                const std::vector<PermutePair> pairs = {{1, 2}, bad};
                                std::vector<float> in(3), out(3);
                                ctx.permute(in, out, pairs);
                              },
                              {"permute", text});
  }
}

TEST(InvalidArgumentTest, PermuteDuplicateSource) {
  expect_invalid_everywhere(4,
                            [](ReplicaContext& ctx) {
                              const std::vector<PermutePair> pairs = {{0, 1}, {2, 3}, {0, 2}};
                              std::vector<float> in(3), out(3);
                              ctx.permute(in, out, pairs);
                            },
                            {"permute", "replica 0", "source"});
}

TEST(InvalidArgumentTest, PermuteDuplicateDestination) {
  expect_invalid_everywhere(4,
                            [](ReplicaContext& ctx) {
                              const std::vector<PermutePair> pairs = {{0, 1}, {2, 1}};
                              std::vector<float> in(3), out(3);
                              ctx.permute(in, out, pairs);
                            },
                            {"permute", "replica 1", "destination"});
}

TEST(InvalidArgumentTest, PermuteOutputOfDifferentSize) {
  expect_invalid_everywhere(2,
                            [](ReplicaContext& ctx) {
                              const std::vector<PermutePair> pairs = {{0, 1}, {1, 0}};
                              std::vector<float> in(3), out(4);
                              ctx.permute(in, out, pairs);
                            },
                            {"permute", "3", "4"});
}

TEST(InvalidArgumentTest, InputDTypeDiffersFromOutput) {
  expect_invalid_everywhere(3,
                            [](ReplicaContext& ctx) {
                              std::vector<float> in(4);
                              std::vector<double> out(12);
                              ctx.all_gather(in, out);
                            },
                            {"all_gather", "f32", "f64"});
  expect_invalid_everywhere(3,
                            [](ReplicaContext& ctx) {
                              std::vector<std::int32_t> in(6);
                              std::vector<std::int64_t> out(2);
                              ctx.reduce_scatter(in, out);
                            },
                            {"reduce_scatter", "i32", "i64"});
  expect_invalid_everywhere(3,
                            [](ReplicaContext& ctx) {
                              std::vector<std::uint8_t> in(6);
                              std::vector<bfloat16> out(6);
                              ctx.all_to_all(in, out);
                            },
                            {"all_to_all", "u8", "bf16"});
  expect_invalid_everywhere(1,
                            [](ReplicaContext& ctx) {
                              std::vector<float16> in(6);
                              std::vector<bfloat16> out(6);
                              const std::vector<PermutePair> pairs = {{0, 0}};
                              ctx.permute(in, out, pairs);
                            },
                            {"permute", "f16", "bf16"});
}

TEST(InvalidArgumentTest, NullPointerWithNonZeroCount) {
  for (const int n : {1, 3}) {
    SCOPED_TRACE(std::to_string(n) + " replicas");
    expect_invalid_everywhere(
        n,
        [](ReplicaContext& ctx) {
          std::vector<float> good(4);
          const Buffer buffers[] = {Buffer::of(std::span(good)), Buffer{nullptr, 4, DType::kF32}};
          ctx.all_reduce(buffers);
        },
        {"all_reduce", "buffer 1", "null", "4"});
    expect_invalid_everywhere(n,
                              [](ReplicaContext& ctx) {
                                const Buffer buffers[] = {Buffer{nullptr, 2, DType::kI64}};
                                ctx.broadcast(buffers);
                              },
                              {"broadcast", "null"});
  }
}

TEST(InvalidArgumentTest, OverlappingBuffers) {
  expect_invalid_everywhere(2,
                            [](ReplicaContext& ctx) {
                              std::vector<float> data(10);
                              const Buffer buffers[] = {Buffer{data.data(), 6, DType::kF32},
                                                        Buffer{data.data() + 4, 6, DType::kF32}};
                              ctx.all_reduce(buffers);
                            },
                            {"all_reduce", "overlap"});
  expect_invalid_everywhere(2,
                            [](ReplicaContext& ctx) {
                              std::vector<float> data(12);
                              ctx.reduce_scatter(std::span(data).first(8),
                                                 std::span(data).subspan(6, 4));
                            },
                            {"reduce_scatter", "overlap"});
}

TEST(InvalidArgumentTest, NonPositivePerCallTimeout) {
  for (const int n : {1, 3}) {
    for (const int ms : {0, -5}) {
      SCOPED_TRACE(std::to_string(n) + " replicas, timeout " + std::to_string(ms) + "ms");
      expect_invalid_everywhere(
          n, [ms](ReplicaContext& ctx) { ctx.barrier({.timeout = milliseconds(ms)}); },
          {"barrier", "timeout", std::to_string(ms)});
      expect_invalid_everywhere(n,
                                [ms](ReplicaContext& ctx) {
                                  std::vector<float> v(4);
                                  ctx.all_reduce(v, {.timeout = milliseconds(ms)});
                                },
                                {"all_reduce", "timeout", std::to_string(ms)});
    }
  }
}

// all_gather in place is documented for the input as THIS replica's block of the output.
// With the input at ANOTHER replica's block, the direct path overwrites that block while
// peers still read it: the call must either be refused with InvalidArgument or give the
// right result (block j holds replica j's input); never silently wrong data.
TEST(InvalidArgumentTest, AllGatherInPlaceAtAnotherReplicasBlockIsRefusedOrCorrect) {
  constexpr int kReplicas = 3;
  constexpr std::size_t kBlock = 30000;  // 120 KB of f32: the direct path
  Replicator repl(with_replicas(kReplicas));
  std::vector<std::string> outcome(kReplicas);
  const std::vector<std::exception_ptr> caught = run_and_catch(repl, [&](ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    std::vector<float> out(kBlock * kReplicas, -1.0f);
    const std::size_t other = static_cast<std::size_t>((r + 1) % kReplicas);
    const auto input = std::span(out).subspan(other * kBlock, kBlock);
    std::fill(input.begin(), input.end(), static_cast<float>(10 + r));  // replica r's input
    ctx.all_gather(input, out);
    for (int j = 0; j < kReplicas; ++j) {
      const float got = out[static_cast<std::size_t>(j) * kBlock + kBlock / 2];
      outcome[static_cast<std::size_t>(r)] += std::to_string(static_cast<int>(got)) + " ";
      if (got != static_cast<float>(10 + j)) {
        outcome[static_cast<std::size_t>(r)] += "(want " + std::to_string(10 + j) + ") ";
      }
    }
  });
  for (std::size_t r = 0; r < kReplicas; ++r) {
    if (caught_as<InvalidArgument>(caught[r])) continue;
    // Not refused: then the call returned, and every block is right.
    EXPECT_FALSE(caught[r]) << "replica " << r << " caught " << describe(caught[r]);
    EXPECT_FALSE(outcome[r].empty()) << "replica " << r << " looked at no block";
    EXPECT_EQ(outcome[r].find("want"), std::string::npos)
        << "replica " << r << " got blocks: " << outcome[r];
  }
}

// A bad call on ONE replica (not caught): run throws that InvalidArgument tagged with the
// replica, and the others are released with Aborted instead of waiting for it.
TEST(InvalidArgumentTest, BadCallOnOneReplicaReleasesTheOthers) {
  Replicator repl(with_replicas(4));
  std::vector<std::exception_ptr> caught(4);
  try {
    repl.run([&](ReplicaContext& ctx) {
      harness::keep_and_rethrow(caught[static_cast<std::size_t>(ctx.replica_id())], [&] {
        std::vector<float> in(5), out(ctx.replica_id() == 2 ? 19 : 20);
        ctx.all_gather(in, out);
      });
    });
    FAIL() << "run did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.replica(), 2);
    EXPECT_HAS_SUBSTR(std::string(e.what()), "19");
  }
  for (const int r : {0, 1, 3}) {
    const auto e = caught_as<Aborted>(caught[static_cast<std::size_t>(r)]);
    ASSERT_TRUE(e) << "replica " << r << " caught "
                   << describe(caught[static_cast<std::size_t>(r)]);
    EXPECT_EQ(e->cause_replica(), 2);
  }
  expect_healthy(repl);
}

// =========================================================================================
// (e) Zero-length and single-replica collectives
// =========================================================================================

// Every kind with zero elements on R replicas, then an all_reduce that checks that no
// replica went out of step.
void expect_zero_length_everywhere(int n) {
  Replicator repl(with_replicas(n));
  const std::vector<PermutePair> ring = [n] {
    std::vector<PermutePair> pairs;
    for (int r = 0; r < n; ++r) pairs.push_back({r, (r + 1) % n});
    return pairs;
  }();
  const PerReplica<std::int64_t> out = repl.run([&](ReplicaContext& ctx) {
    std::vector<float> none;
    std::span<float> null_span;  // data() is nullptr, size() 0: valid
    ctx.all_reduce(none);
    ctx.all_reduce(null_span, {.op = ReduceOp::kMean});
    ctx.all_gather(none, null_span);
    ctx.gather(none, null_span, {.root = n - 1});
    ctx.broadcast(none, {.root = n - 1});
    ctx.reduce_scatter(none, null_span, {.op = ReduceOp::kProd});
    ctx.all_to_all(none, null_span);
    ctx.permute(none, null_span, ring);
    ctx.permute(none, null_span, {});
    ctx.barrier();
    ctx.all_reduce(std::span<const Buffer>{});
    const Buffer empties[] = {Buffer{nullptr, 0, DType::kF16}, Buffer{nullptr, 0, DType::kI64}};
    ctx.all_reduce(empties, {.op = ReduceOp::kMax});
    ctx.broadcast(empties);
    std::int64_t check[1] = {1};
    ctx.all_reduce(check);
    return check[0];
  });
  for (const std::int64_t v : out) EXPECT_EQ(v, n);
}

TEST(EdgeTest, ZeroLengthCollectivesOfEveryKind) {
  for (const int n : {1, 2, 4}) {
    SCOPED_TRACE(std::to_string(n) + " replicas");
    expect_zero_length_everywhere(n);
  }
}

TEST(EdgeTest, SingleReplicaCollectivesOfEveryKind) {
  Replicator repl(with_replicas(1));
  const std::vector<float> data = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  repl.run([&](ReplicaContext& ctx) {
    // all_reduce: with one replica every op (mean included) is the identity.
    for (const ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd}) {
      std::vector<float> v = data;
      ctx.all_reduce(v, {.op = op});
      EXPECT_EQ(v, data) << to_string(op);
      std::vector<float> out(5, -1.0f);
      ctx.reduce_scatter(data, out, {.op = op});
      EXPECT_EQ(out, data) << to_string(op);
    }
    std::vector<std::int32_t> ints = {7, 8, 9};
    ctx.all_reduce(ints, {.op = ReduceOp::kMean});
    EXPECT_EQ(ints, (std::vector<std::int32_t>{7, 8, 9}));

    std::vector<float> gathered(5, -1.0f);
    ctx.all_gather(data, gathered);
    EXPECT_EQ(gathered, data);

    std::vector<float> at_root(5, -1.0f);
    ctx.gather(data, at_root);
    EXPECT_EQ(at_root, data);

    std::vector<float> b = data;
    ctx.broadcast(b, {.root = 0});
    EXPECT_EQ(b, data);

    std::vector<float> exchanged(5, -1.0f);
    ctx.all_to_all(data, exchanged);
    EXPECT_EQ(exchanged, data);

    std::vector<float> moved(5, -1.0f);
    const std::vector<PermutePair> self = {{0, 0}};
    ctx.permute(data, moved, self);
    EXPECT_EQ(moved, data);
    std::vector<float> zeroed(5, -1.0f);
    ctx.permute(data, zeroed, {});
    EXPECT_EQ(zeroed, std::vector<float>(5, 0.0f));

    std::vector<double> f64 = {1.0, 2.0};
    std::vector<std::uint8_t> u8 = {3, 4, 5};
    const Buffer fused[] = {Buffer::of(std::span(f64)), Buffer::of(std::span(u8))};
    ctx.all_reduce(fused, {.op = ReduceOp::kProd});
    ctx.broadcast(fused);
    EXPECT_EQ(f64, (std::vector<double>{1.0, 2.0}));
    EXPECT_EQ(u8, (std::vector<std::uint8_t>{3, 4, 5}));
    ctx.barrier();
    EXPECT_EQ(ctx.sequence(), 20u);
  });
}

// =========================================================================================
// (f) PerReplica<bool>
// =========================================================================================

TEST(PerReplicaBoolTest, HoldsRealBoolsEachReplicaCanWrite) {
  Replicator repl(with_replicas(8));
  PerReplica<bool> flags =
      repl.per_replica([](ReplicaContext& ctx) { return ctx.replica_id() % 2 == 0; });
  ASSERT_EQ(flags.size(), 8);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(flags[r], r % 2 == 0);
  // Each replica writes its own element at the same time: real bools, no bit packing, so
  // no two replicas share a word (ThreadSanitizer would see it).
  repl.run([&](ReplicaContext& ctx) {
    bool& mine = flags[ctx];
    for (int i = 0; i < 1000; ++i) mine = !mine;
    mine = !mine;
  });
  for (int r = 0; r < 8; ++r) EXPECT_EQ(flags[r], r % 2 != 0);
  const PerReplica<bool> returned =
      repl.run([](ReplicaContext& ctx) { return ctx.replica_id() == 5; });
  int count = 0;
  for (const bool b : returned) count += b;
  EXPECT_EQ(count, 1);
  EXPECT_TRUE(returned[5]);
}

}  // namespace
}  // namespace replicator
