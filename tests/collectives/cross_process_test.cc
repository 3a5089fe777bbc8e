// Collectives across processes, run over the in-memory fake transport: P Replicators in
// one test process, each with L replicas, give the same bits as one Replicator with
// R = P x L replicas (the canonical tree does not depend on the layout), and keep the
// semantics (mismatch, failure release) across processes.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "replicator/replicator.h"
#include "src/collectives/across/across.h"
#include "src/engines/device/device_backend.h"
#include "src/runtime/testing.h"
#include "tests/collectives/fake_transport.h"
#include "tests/harness/device_checks.h"
#include "tests/harness/harness.h"

// Checks that `haystack` contains `needle`.
#define EXPECT_HAS_SUBSTR(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

namespace replicator {
namespace {

using detail::canonical_subtrees;

TEST(CanonicalSubtreesTest, AlignedPowerOfTwoBlocks) {
  const auto pairs = [](int b, int e) {
    std::vector<std::pair<int, int>> out;
    for (const auto& s : canonical_subtrees(b, e)) out.emplace_back(s.first, s.size);
    return out;
  };
  EXPECT_EQ(pairs(0, 4), (std::vector<std::pair<int, int>>{{0, 4}}));
  EXPECT_EQ(pairs(0, 3), (std::vector<std::pair<int, int>>{{0, 2}, {2, 1}}));
  EXPECT_EQ(pairs(3, 6), (std::vector<std::pair<int, int>>{{3, 1}, {4, 2}}));
  EXPECT_EQ(pairs(2, 5), (std::vector<std::pair<int, int>>{{2, 2}, {4, 1}}));
  EXPECT_EQ(pairs(4, 8), (std::vector<std::pair<int, int>>{{4, 4}}));
  EXPECT_EQ(pairs(5, 6), (std::vector<std::pair<int, int>>{{5, 1}}));
}

using Step = std::function<void(ReplicaContext&)>;

// How the fake network behaves: like Gloo (receives posted ahead, messages exactly as long
// as their receives) or like OpenMPI (no receives ahead, shorter messages accepted).
enum class Wire { kGloo, kMpi };

// Runs `step` on P fake processes of L replicas each; returns what each process's run threw.
std::vector<std::exception_ptr> run_processes(
    int P, int L, const Step& step, std::chrono::milliseconds timeout = std::chrono::seconds(30),
    Wire wire = Wire::kGloo, std::shared_ptr<testing::FakeNetwork>* used = nullptr) {
  auto network = std::make_shared<testing::FakeNetwork>(P, wire == Wire::kGloo, wire == Wire::kMpi);
  if (used) *used = network;
  return harness::run_threads(P, [&](int rank) {
    Config config;
    config.local_replicas = L;
    config.timeout = timeout;
    // Each algorithm at the sizes of the chooser's fixed limits: the fake network's timings
    // are those of threads in one process.
    config.transport.calibration = "off";
    auto repl = detail::make_replicator(config, network->endpoint(rank, L));
    repl->run(step);
  });
}

std::vector<float> data_of(int replica, std::size_t n) {
  return harness::mixed_magnitudes(1000 + static_cast<unsigned>(replica), n);
}

struct Layout {
  int processes;
  int local;
};

class LayoutTest : public ::testing::TestWithParam<Layout> {};

// all_reduce (sum of f32, mean of bf16, fused with mixed dtypes) gives the local engine's
// bits for the same R, whatever the layout; sizes on the frame path, the gathered path (up
// to 16 KiB of partials a lane) and the sliced path.
TEST_P(LayoutTest, AllReduceBitsMatchTheLocalEngine) {
  const auto [P, L] = GetParam();
  const int R = P * L;
  for (const std::size_t n : {1ul, 37ul, 1003ul, 5003ul, 300007ul}) {
    // Reference: one process, R replicas. 300007 elements: several pipeline chunks.
    std::vector<std::vector<float>> reference(static_cast<std::size_t>(R));
    std::vector<std::vector<bfloat16>> reference_bf(static_cast<std::size_t>(R));
    std::vector<std::vector<float>> reference_mean(static_cast<std::size_t>(R));
    {
      Config config;
      config.local_replicas = R;
      Replicator repl(config);
      repl.run([&](ReplicaContext& ctx) {
        auto v = data_of(ctx.replica_id(), n);
        std::vector<bfloat16> b(v.begin(), v.end());
        ctx.all_reduce(v);
        ctx.all_reduce(b, {.op = ReduceOp::kMean});
        reference[static_cast<std::size_t>(ctx.replica_id())] = v;
        reference_bf[static_cast<std::size_t>(ctx.replica_id())] = b;
        auto m = data_of(ctx.replica_id(), n);
        ctx.all_reduce(m, {.op = ReduceOp::kMean});
        reference_mean[static_cast<std::size_t>(ctx.replica_id())] = m;
      });
    }
    // Both ways of the algorithms: as over Gloo and as over OpenMPI.
    for (const Wire wire : {Wire::kGloo, Wire::kMpi}) {
      std::vector<std::vector<float>> got(static_cast<std::size_t>(R));
      std::vector<std::vector<bfloat16>> got_bf(static_cast<std::size_t>(R));
      std::vector<std::vector<std::int32_t>> got_fused(static_cast<std::size_t>(R));
      std::vector<std::vector<float>> got_mean(static_cast<std::size_t>(R));
      std::shared_ptr<testing::FakeNetwork> network;
      EXPECT_EQ(
          harness::all_errors(
              run_processes(
                  P, L,
                  [&](ReplicaContext& ctx) {
                    ASSERT_EQ(ctx.num_replicas(), R);
                    auto v = data_of(ctx.replica_id(), n);
                    std::vector<bfloat16> b(v.begin(), v.end());
                    ctx.all_reduce(v);
                    ctx.all_reduce(b, {.op = ReduceOp::kMean});
                    // Fused, mixed dtypes: floats again plus integers with a closed form.
                    auto f = data_of(ctx.replica_id(), n);
                    // Negative: summed as floats, their bits would be NaNs.
                    std::vector<std::int32_t> k(n / 2 + 3, -1000003 * (ctx.replica_id() + 1));
                    const Buffer fused[] = {Buffer::of(std::span(f)), Buffer::of(std::span(k))};
                    ctx.all_reduce(std::span<const Buffer>(fused));
                    EXPECT_EQ(std::memcmp(f.data(), v.data(), n * sizeof(float)), 0);
                    got[static_cast<std::size_t>(ctx.replica_id())] = v;
                    got_bf[static_cast<std::size_t>(ctx.replica_id())] = b;
                    got_fused[static_cast<std::size_t>(ctx.replica_id())] = k;
                    // f32 mean: the engine's own sum (over the mpi wire), then the division.
                    auto m = data_of(ctx.replica_id(), n);
                    ctx.all_reduce(m, {.op = ReduceOp::kMean});
                    got_mean[static_cast<std::size_t>(ctx.replica_id())] = m;
                  },
                  std::chrono::seconds(30), wire, &network),
              "process"),
          "");
      for (int r = 0; r < R; ++r) {
        const auto u = static_cast<std::size_t>(r);
        ASSERT_EQ(got[u].size(), n);
        EXPECT_EQ(std::memcmp(got[u].data(), reference[u].data(), n * sizeof(float)), 0)
            << "f32 sum, replica " << r << ", n " << n << ", mpi wire " << (wire == Wire::kMpi);
        EXPECT_EQ(std::memcmp(got_bf[u].data(), reference_bf[u].data(), n * 2), 0)
            << "bf16 mean, replica " << r << ", n " << n;
        EXPECT_EQ(got_fused[u], std::vector<std::int32_t>(n / 2 + 3, -1000003 * R * (R + 1) / 2));
        EXPECT_EQ(std::memcmp(got_mean[u].data(), reference_mean[u].data(), n * sizeof(float)), 0)
            << "f32 mean, replica " << r << ", n " << n << ", mpi wire " << (wire == Wire::kMpi);
      }
      // The engine's own all-reduce takes the pipelined sizes where it gives the same bits:
      // two processes of one canonical subtree each (L a power of two).
      // What fits in the frames never goes to it.
      const bool eligible = wire == Wire::kMpi && P == 2 && (L & (L - 1)) == 0;
      if (n == 300007 || n <= 37) {
        EXPECT_EQ(network->native_calls.load() > 0, eligible && n == 300007)
            << "P " << P << ", L " << L << ", n " << n;
      }
    }
  }
}

// The other collectives, with closed-form results, across processes.
TEST_P(LayoutTest, EveryCollectiveAcrossProcesses) {
  const auto [P, L] = GetParam();
  const int R = P * L;
  for (const std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{4099}}) {
    EXPECT_EQ(
        harness::all_errors(
            run_processes(
                P, L,
                [&](ReplicaContext& ctx) {
                  const int me = ctx.replica_id();
                  const auto value = [](int r, std::size_t i) {
                    return static_cast<double>(static_cast<std::size_t>(r) * 1000 + i % 97);
                  };
                  // all_gather
                  std::vector<double> in(n), out(n * static_cast<std::size_t>(R), -1);
                  for (std::size_t i = 0; i < n; ++i) in[i] = value(me, i);
                  ctx.all_gather(in, out);
                  for (int r = 0; r < R; ++r) {
                    for (std::size_t i = 0; i < n; ++i) {
                      ASSERT_EQ(out[static_cast<std::size_t>(r) * n + i], value(r, i))
                          << "all_gather";
                    }
                  }
                  // gather to the last replica and to replica 0: the root's output holds every
                  // input, the others' (empty) output is not touched
                  for (const int root : {R - 1, 0}) {
                    std::vector<double> g(me == root ? n * static_cast<std::size_t>(R) : 0, -1);
                    ctx.gather(in, g, {.root = root});
                    for (int r = 0; me == root && r < R; ++r) {
                      for (std::size_t i = 0; i < n; ++i) {
                        ASSERT_EQ(g[static_cast<std::size_t>(r) * n + i], value(r, i))
                            << "gather " << root;
                      }
                    }
                  }
                  // broadcast from the last replica (another process for most)
                  std::vector<double> b(n);
                  for (std::size_t i = 0; i < n; ++i) b[i] = value(me, i);
                  ctx.broadcast(b, {.root = R - 1});
                  for (std::size_t i = 0; i < n; ++i)
                    ASSERT_EQ(b[i], value(R - 1, i)) << "broadcast";
                  // reduce_scatter: block k of replica r holds r + k
                  std::vector<std::int64_t> rs_in(n * static_cast<std::size_t>(R)), rs_out(n, -1);
                  for (int k = 0; k < R; ++k) {
                    for (std::size_t i = 0; i < n; ++i)
                      rs_in[static_cast<std::size_t>(k) * n + i] =
                          me + k + static_cast<std::int64_t>(i);
                  }
                  ctx.reduce_scatter(rs_in, rs_out);
                  for (std::size_t i = 0; i < n; ++i) {
                    // sum over r of (r + me + i) = R(R-1)/2 + R(me + i)
                    ASSERT_EQ(rs_out[i], R * (R - 1) / 2 + R * (me + static_cast<std::int64_t>(i)))
                        << "reduce_scatter";
                  }
                  // all_to_all: block j of replica r's input is 100 r + j
                  std::vector<std::int32_t> a_in(n * static_cast<std::size_t>(R)),
                      a_out(n * static_cast<std::size_t>(R), -1);
                  for (int j = 0; j < R; ++j) {
                    for (std::size_t i = 0; i < n; ++i)
                      a_in[static_cast<std::size_t>(j) * n + i] = 100 * me + j;
                  }
                  ctx.all_to_all(a_in, a_out);
                  for (int j = 0; j < R; ++j) {
                    for (std::size_t i = 0; i < n; ++i) {
                      ASSERT_EQ(a_out[static_cast<std::size_t>(j) * n + i], 100 * j + me)
                          << "all_to_all";
                    }
                  }
                  // permute: ring shift r -> r + 1, except that R - 1 sends nowhere (0 gets zeros)
                  std::vector<PermutePair> pairs;
                  for (int r = 0; r + 1 < R; ++r) pairs.emplace_back(r, r + 1);
                  std::vector<float> p_in(n, static_cast<float>(me + 1)), p_out(n, -1.f);
                  ctx.permute(p_in, p_out, pairs);
                  for (std::size_t i = 0; i < n; ++i)
                    ASSERT_EQ(p_out[i], static_cast<float>(me)) << "permute";
                  ctx.barrier();
                }),
            "process"),
        "");
  }
}

// Between processes of one host, an all-reduce of device buffers stays in the device (the fake
// device's shared memory, waited for through its events) and gives the host's bits for every
// dtype and op, fused lists included, over both wires; the other collectives go through the
// host and give its results.
TEST_P(LayoutTest, DeviceAllReduceBetweenProcessesOfOneHost) {
  const int P = GetParam().processes;
  const int L = GetParam().local;
  if (P == 1) GTEST_SKIP() << "one process";
  namespace checks = device_checks;
  const std::uint64_t waits_before = detail::fake_event_waits();
  for (const Wire wire : {Wire::kGloo, Wire::kMpi}) {
    auto network = std::make_shared<testing::FakeNetwork>(P, wire == Wire::kGloo,
                                                          wire == Wire::kMpi, /*one_host=*/true);
    std::vector<std::string> failures(static_cast<std::size_t>(P));
    const auto errors = harness::run_threads(P, [&](int rank) {
      Config config = checks::config_for(MemoryKind::kFake, L, 2);
      config.transport.calibration = "off";
      auto repl = detail::make_replicator(config, network->endpoint(rank, L));
      std::string& out = failures[static_cast<std::size_t>(rank)];
      for (const DType dtype : checks::kDtypes) {
        for (const ReduceOp op : checks::kOps)
          out += checks::all_reduce_bits(*repl, 1003, dtype, op);
      }
      for (const std::size_t n :
           {std::size_t{1}, std::size_t{64} * static_cast<std::size_t>(P * L) - 1,
            std::size_t{70001}}) {
        out += checks::all_reduce_bits(*repl, n, DType::kF32, ReduceOp::kSum);
        out += checks::all_reduce_bits(*repl, n, DType::kBF16, ReduceOp::kMean);
      }
      out += checks::fused_all_reduce_bits(*repl);
      // every_collective's sizes divide among 1, 2, 3, 4, 6 or 8 replicas.
      if (wire == Wire::kGloo && 1344 % (P * L) == 0) out += checks::every_collective(*repl);
    });
    EXPECT_EQ(harness::all_errors(errors, "process"), "");
    for (int r = 0; r < P; ++r)
      EXPECT_EQ(failures[static_cast<std::size_t>(r)], "") << "process " << r;
  }
  EXPECT_GT(detail::fake_event_waits(), waits_before) << "no all-reduce stayed in the device";
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayoutTest,
                         ::testing::Values(Layout{2, 1}, Layout{4, 1}, Layout{2, 2}, Layout{3, 1},
                                           Layout{3, 2}, Layout{2, 3}, Layout{6, 1}, Layout{1, 4},
                                           Layout{5, 1}),
                         [](const auto& info) {
                           return std::to_string(info.param.processes) + "x" +
                                  std::to_string(info.param.local);
                         });

// Both wires: over the OpenMPI-like one the two processes' frames differ in length too.
TEST(CrossProcessTest, MismatchIsRaisedOnEveryReplicaOfEveryProcess) {
  for (const Wire wire : {Wire::kGloo, Wire::kMpi}) {
    std::atomic<int> mismatches{0};
    const auto errors = run_processes(
        2, 2,
        [&](ReplicaContext& ctx) {
          std::vector<float> v(ctx.replica_id() < 2 ? 4 : 5, 1.f);
          // The other process's call site comes with its frame.
          const CallSite site = CallSite::here();
          const std::string at = " at " + to_string(site);
          try {
            ctx.all_reduce(v, {}, site);
          } catch (const CollectiveMismatch& e) {
            EXPECT_HAS_SUBSTR(std::string(e.what()),
                              "process 1 (replicas 2-3) called all_reduce(f32 x 5, op=sum)" + at);
            EXPECT_HAS_SUBSTR(std::string(e.what()),
                              "process 0 (replicas 0-1) called all_reduce(f32 x 4, op=sum)" + at);
            ++mismatches;
            throw;
          }
        },
        std::chrono::seconds(30), wire);
    EXPECT_EQ(mismatches.load(), 4) << "mpi wire " << (wire == Wire::kMpi);
    EXPECT_EQ(harness::first_not_raising<CollectiveMismatch>(errors, {}, "process"), "");
  }
}

// The last replica alone differs: its process sees it at the local barrier and tells the
// others through its frame; every replica of both processes raises CollectiveMismatch, and
// the other process's message says that process 1's replicas disagree.
TEST(CrossProcessTest, MismatchInsideOneProcessIsRaisedOnEveryReplicaOfEveryProcess) {
  for (const Wire wire : {Wire::kGloo, Wire::kMpi}) {
    for (const std::size_t odd_count : {std::size_t{5}, std::size_t{300001}}) {
      std::atomic<int> mismatches{0};
      const auto errors = run_processes(
          2, 2,
          [&](ReplicaContext& ctx) {
            const bool odd = ctx.replica_id() == 3;
            std::vector<float> v(odd ? odd_count : odd_count - 1, 1.f);
            try {
              ctx.all_reduce(v);
            } catch (const CollectiveMismatch& e) {
              if (ctx.replica_id() < 2) {
                EXPECT_NE(std::string(e.what()).find("process 1 (replicas 2-3) disagree among "
                                                     "themselves: replica 2 called all_reduce"),
                          std::string::npos)
                    << e.what();
                EXPECT_EQ(e.calls().size(), 4u);
              }
              ++mismatches;
              throw;
            }
          },
          std::chrono::seconds(30), wire);
      EXPECT_EQ(mismatches.load(), 4) << "mpi wire " << (wire == Wire::kMpi) << ", " << odd_count;
      for (const auto& e : errors) EXPECT_TRUE(harness::caught_as<CollectiveMismatch>(e));
    }
  }
}

TEST(CrossProcessTest, GatherRootMismatchIsRaisedOnEveryReplicaOfEveryProcess) {
  for (const Wire wire : {Wire::kGloo, Wire::kMpi}) {
    std::atomic<int> mismatches{0};
    const auto errors = run_processes(
        2, 2,
        [&](ReplicaContext& ctx) {
          const int root = ctx.replica_id() < 2 ? 0 : 1;
          std::vector<float> in(4, 1.f), out(ctx.replica_id() == root ? 16 : 0);
          try {
            ctx.gather(in, out, {.root = root});
          } catch (const CollectiveMismatch& e) {
            EXPECT_NE(std::string(e.what()).find("gather(f32 x 4, root=1)"), std::string::npos)
                << e.what();
            ++mismatches;
            throw;
          }
        },
        std::chrono::seconds(30), wire);
    EXPECT_EQ(mismatches.load(), 4) << "mpi wire " << (wire == Wire::kMpi);
    for (const auto& e : errors) EXPECT_TRUE(e);
  }
}

TEST(CrossProcessTest, StepFailureInOneProcessReleasesTheOthers) {
  std::atomic<int> aborted{0};
  const auto errors = run_processes(
      3, 2,
      [&](ReplicaContext& ctx) {
        if (ctx.replica_id() == 3) throw std::runtime_error("replica three gives up");
        std::vector<float> v(100, 1.f);
        try {
          ctx.all_reduce(v);
        } catch (const Aborted& e) {
          // In its own process and in the others: the cause is replica 3.
          EXPECT_EQ(e.cause_replica(), std::optional<int>(3))
              << "replica " << ctx.replica_id() << ": " << e.what();
          ++aborted;
          throw;
        }
      },
      std::chrono::seconds(60));
  EXPECT_EQ(aborted.load(), 5);  // everyone but replica 3, well before the 60 s deadline
  EXPECT_EQ(harness::first_not_raising<Error>(errors, {}, "process"), "");
}

TEST(CrossProcessTest, TimeoutNamesTheReplicasOfTheLateProcess) {
  std::atomic<int> timeouts{0};
  // Process 1 is late: it calls only once process 0 has raised its Timeout, and is then
  // released by the abort of process 0.
  harness::CountDown timed_out(1);
  const auto errors = run_processes(2, 2, [&](ReplicaContext& ctx) {
    if (ctx.replica_id() >= 2) {
      EXPECT_TRUE(timed_out.wait_for(std::chrono::seconds(30))) << "process 0 never timed out";
    }
    std::vector<float> v(10, 1.f);
    try {
      ctx.all_reduce(v, {.timeout = std::chrono::milliseconds(200)});
    } catch (const Timeout& e) {
      if (ctx.replica_id() < 2) {
        EXPECT_EQ(e.missing(), (std::vector<int>{2, 3})) << e.what();
        EXPECT_NE(std::string(e.what()).find("process 1 (replicas 2-3)"), std::string::npos)
            << e.what();
        EXPECT_HAS_SUBSTR(std::string(e.what()), ") at cross_process_test.cc:");
        ++timeouts;
        timed_out.count_down();
      }
      throw;
    }
  });
  EXPECT_GE(timeouts.load(), 1);
  EXPECT_EQ(harness::first_not_raising<Error>(errors, {}, "process"), "");
}

// A late process on device buffers: the all-reduce that would stay in the device ends at its
// deadline with Timeout naming the late process's replicas, as on the host.
TEST(CrossProcessTest, DeviceAllReduceTimeoutNamesTheLateProcess) {
  std::atomic<int> timeouts{0};
  harness::CountDown timed_out(1);
  auto network = std::make_shared<testing::FakeNetwork>(2, true, false, /*one_host=*/true);
  const auto errors = harness::run_threads(2, [&](int rank) {
    Config config = device_checks::config_for(MemoryKind::kFake, 2, 2);
    config.transport.calibration = "off";
    auto repl = detail::make_replicator(config, network->endpoint(rank, 2));
    repl->run([&](ReplicaContext& ctx) {
      const std::vector<std::byte> host(std::size_t{4} * 1000);
      const device_checks::OnDevice device(ctx.device(), host, DType::kF32);
      const Buffer b = device.buffer();
      if (ctx.replica_id() >= 2) {
        EXPECT_TRUE(timed_out.wait_for(std::chrono::seconds(30))) << "process 0 never timed out";
      }
      try {
        ctx.all_reduce(std::span<const Buffer>(&b, 1), {.timeout = std::chrono::milliseconds(200)});
      } catch (const Timeout& e) {
        if (ctx.replica_id() < 2) {
          EXPECT_EQ(e.missing(), (std::vector<int>{2, 3})) << e.what();
          EXPECT_HAS_SUBSTR(std::string(e.what()), "process 1 (replicas 2-3)");
          ++timeouts;
          timed_out.count_down();
        }
        throw;
      }
    });
  });
  EXPECT_GE(timeouts.load(), 1);
  EXPECT_EQ(harness::first_not_raising<Error>(errors, {}, "process"), "");
}

}  // namespace
}  // namespace replicator
