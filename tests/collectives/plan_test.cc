// The chooser's table (src/collectives/plan.h): pure functions, checked at the boundaries of
// each choice.
#include "src/collectives/plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "src/collectives/frames.h"
#include "src/runtime/host_policy.h"  // the machine facts the chooser reads (CacheFacts)

namespace replicator::detail {
namespace {

using std::chrono::microseconds;

TEST(ChooseLocalPathTest, StagedUpTo1KiBWithACorePerReplicaElseUpToTheStagingArea) {
  const MachineFacts fits{.oversubscribed = false};
  const MachineFacts crowded{.oversubscribed = true};
  EXPECT_EQ(choose_local_path(0, 16384, fits), Path::kStaged);
  EXPECT_EQ(choose_local_path(1024, 16384, fits), Path::kStaged);
  EXPECT_EQ(choose_local_path(1025, 16384, fits), Path::kDirect);
  EXPECT_EQ(choose_local_path(16384, 16384, crowded), Path::kStaged);
  EXPECT_EQ(choose_local_path(16385, 16384, crowded), Path::kDirect);
  // Never more than the staging area holds.
  EXPECT_EQ(choose_local_path(600, 512, fits), Path::kDirect);
}

constexpr TransportTraits kMpiLike{.receives_shorter = true,
                                   .streamed_results = true,
                                   .eager_bytes = 4000,
                                   .min_step_bytes = std::size_t{2} << 20,
                                   .max_step_bytes = std::size_t{2} << 20};
constexpr TransportTraits kGlooLike{.receives_ahead = true,
                                    .min_step_bytes = std::size_t{64} << 10,
                                    .max_step_bytes = std::size_t{4} << 20};

AllReducePlan plan_for(std::size_t row, int subtrees, int processes, const TransportTraits& t,
                       bool native_same_bits = false) {
  return choose_all_reduce({.row_bytes = row,
                            .max_subtrees = subtrees,
                            .processes = processes,
                            .largest_part_bytes = row / static_cast<std::size_t>(processes),
                            .native_same_bits = native_same_bits},
                           t);
}

TEST(FramesTest, AsLongAsTheEagerSizeWhereAReceiveTakesShorterMessagesElseFixed) {
  EXPECT_EQ(frame_bytes(kGlooLike), kFrameBytes);
  EXPECT_EQ(frame_payload(kGlooLike), kFramePayload);
  EXPECT_EQ(frame_bytes(kMpiLike), 3968u);  // whole cache lines within the 4000 eager bytes
  EXPECT_EQ(frame_payload(kMpiLike), 3968u - kHeaderBytes);
  // Never shorter than the fixed frame (a flagged frame's payload must fit).
  EXPECT_EQ(frame_bytes({.receives_shorter = true, .eager_bytes = 100}), kFrameBytes);
}

TEST(ChooseAllReduceTest, InFrameWhileEveryRowFitsTheFramePayload) {
  EXPECT_EQ(plan_for(0, 1, 2, kGlooLike).algorithm, AllReduceAlgorithm::kInFrame);
  EXPECT_EQ(plan_for(kFramePayload, 1, 2, kGlooLike).algorithm, AllReduceAlgorithm::kInFrame);
  EXPECT_NE(plan_for(kFramePayload + 8, 1, 2, kGlooLike).algorithm, AllReduceAlgorithm::kInFrame);
  const std::size_t mpi_payload = frame_payload(kMpiLike);
  EXPECT_EQ(plan_for(mpi_payload / 2, 2, 2, kMpiLike).algorithm, AllReduceAlgorithm::kInFrame);
  EXPECT_NE(plan_for(mpi_payload / 2 + 8, 2, 2, kMpiLike).algorithm, AllReduceAlgorithm::kInFrame);
  // The engine's own all-reduce never takes what fits in the frames (one round trip).
  EXPECT_EQ(plan_for(mpi_payload, 1, 2, kMpiLike, true).algorithm, AllReduceAlgorithm::kInFrame);
}

TEST(ChooseAllReduceTest, TheEnginesOwnTakesThePipelinedSizesWhereItGivesTheSameBits) {
  EXPECT_EQ(plan_for(16384, 1, 2, kMpiLike, true).algorithm, AllReduceAlgorithm::kGathered);
  for (const std::size_t row : {std::size_t{8000}, std::size_t{64} << 10, std::size_t{64} << 20}) {
    EXPECT_EQ(plan_for(row, 1, 2, kMpiLike, true).algorithm, AllReduceAlgorithm::kNative) << row;
    EXPECT_EQ(plan_for(row, 1, 2, kMpiLike, false).algorithm, AllReduceAlgorithm::kPipelined)
        << row;
  }
  // Its progress loop spins: not where threads outnumber cores.
  AllReduceShape crowded{.row_bytes = std::size_t{1} << 20,
                         .max_subtrees = 1,
                         .processes = 2,
                         .largest_part_bytes = std::size_t{512} << 10,
                         .native_same_bits = true,
                         .oversubscribed = true};
  EXPECT_EQ(choose_all_reduce(crowded, kMpiLike).algorithm, AllReduceAlgorithm::kPipelined);
}

TEST(ChooseAllReduceTest, GatheredUpTo16KiBUnlessItTurnsEagerMessagesIntoRendezvous) {
  // Gloo has no eager limit: gathered up to kGatherBytes of rows.
  EXPECT_EQ(plan_for(kGatherBytes, 1, 2, kGlooLike).algorithm, AllReduceAlgorithm::kGathered);
  EXPECT_EQ(plan_for(kGatherBytes + 8, 1, 2, kGlooLike).algorithm, AllReduceAlgorithm::kPipelined);
  // OpenMPI sends 4000 bytes eagerly: a 4000-byte row goes gathered; an 8 KiB row whose owner
  // parts (4 KiB) are still eager is better pipelined; a 16 KiB row (parts of 8 KiB) gathered.
  EXPECT_EQ(plan_for(4000, 1, 2, kMpiLike).algorithm, AllReduceAlgorithm::kGathered);
  EXPECT_EQ(plan_for(8000, 1, 2, kMpiLike).algorithm, AllReduceAlgorithm::kPipelined);
  EXPECT_EQ(plan_for(16384, 1, 2, kMpiLike).algorithm, AllReduceAlgorithm::kGathered);
}

TEST(ChooseAllReduceTest, PipelinedStepsClampTheLargestPartToTheTransportsRange) {
  const AllReducePlan mpi = plan_for(std::size_t{64} << 20, 1, 2, kMpiLike);
  EXPECT_EQ(mpi.algorithm, AllReduceAlgorithm::kPipelined);
  EXPECT_EQ(mpi.step_bytes, std::size_t{2} << 20);
  EXPECT_FALSE(mpi.receives_ahead);
  EXPECT_EQ(mpi.stream_bytes, kStreamBytes);

  const AllReducePlan small_gloo = plan_for(std::size_t{1} << 20, 1, 2, kGlooLike);
  EXPECT_EQ(small_gloo.step_bytes, std::size_t{512} << 10);  // one step per part
  EXPECT_TRUE(small_gloo.receives_ahead);
  EXPECT_EQ(small_gloo.stream_bytes, std::numeric_limits<std::size_t>::max());
  EXPECT_EQ(plan_for(std::size_t{64} << 20, 1, 2, kGlooLike).step_bytes, std::size_t{4} << 20);
  EXPECT_EQ(plan_for(std::size_t{40} << 10, 1, 2, kGlooLike).step_bytes, std::size_t{64} << 10);
}

// With the cache known, results stream only where one call's owner part fills this
// thread's share of the last-level cache; never where peers do not read this process's
// memory.
TEST(ChooseAllReduceTest, ResultsStreamPastTheCacheOnlyWhereTheyWouldNotStayInIt) {
  const std::size_t share = std::size_t{16} << 20;
  const auto plan_with_cache = [&](std::size_t row, const TransportTraits& t) {
    return choose_all_reduce({.row_bytes = row,
                              .max_subtrees = 1,
                              .processes = 2,
                              .largest_part_bytes = row / 2,
                              .cache_share_bytes = share},
                             t);
  };
  const AllReducePlan fits = plan_with_cache(std::size_t{16} << 20, kMpiLike);  // parts of 8 MiB
  EXPECT_EQ(fits.algorithm, AllReduceAlgorithm::kPipelined);
  EXPECT_EQ(fits.stream_bytes, std::numeric_limits<std::size_t>::max());
  EXPECT_EQ(plan_with_cache(2 * share - 8, kMpiLike).stream_bytes,
            std::numeric_limits<std::size_t>::max());
  EXPECT_EQ(plan_with_cache(2 * share, kMpiLike).stream_bytes, 0u);  // every step streams
  EXPECT_EQ(plan_with_cache(std::size_t{256} << 20, kGlooLike).stream_bytes,
            std::numeric_limits<std::size_t>::max());
}

// A fake sysfs cache folder: index<i>/{level,type,size,shared_cpu_list}.
class CacheFactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("cache_facts_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void add(int index, const std::string& level, const std::string& type, const std::string& size,
           const std::string& shared) {
    const std::filesystem::path d = dir_ / ("index" + std::to_string(index));
    std::filesystem::create_directories(d);
    std::ofstream(d / "level") << level << "\n";
    std::ofstream(d / "type") << type << "\n";
    std::ofstream(d / "size") << size << "\n";
    std::ofstream(d / "shared_cpu_list") << shared << "\n";
  }
  std::filesystem::path dir_;
};

TEST_F(CacheFactsTest, ReadsTheLevelTwoAndTheLastLevelWithItsSharers) {
  add(0, "1", "Data", "48K", "0");
  add(1, "1", "Instruction", "32K", "0");
  add(2, "2", "Unified", "1024K", "0");
  add(3, "3", "Unified", "32768K", "0-1,4,6-7");
  const CacheFacts facts = read_cache_facts(dir_);
  EXPECT_EQ(facts.level2_bytes, std::size_t{1} << 20);
  EXPECT_EQ(facts.last_level_bytes, std::size_t{32} << 20);
  EXPECT_EQ(facts.last_level_sharers, 5);
  EXPECT_EQ(facts.last_level_share(), (std::size_t{32} << 20) / 5);
}

TEST_F(CacheFactsTest, WhatCannotBeReadIsUnknown) {
  EXPECT_EQ(read_cache_facts(dir_ / "missing").last_level_share(), 0u);
  EXPECT_EQ(read_cache_facts(dir_).last_level_share(), 0u);  // no index folders
  add(0, "2", "Unified", "lots", "0");                       // a size it cannot parse
  add(1, "x", "Unified", "2M", "0");                         // a level it cannot parse
  EXPECT_EQ(read_cache_facts(dir_).last_level_bytes, 0u);
  add(2, "3", "Unified", "8M", "");  // unknown sharers: taken as one
  const CacheFacts facts = read_cache_facts(dir_);
  EXPECT_EQ(facts.last_level_bytes, std::size_t{8} << 20);
  EXPECT_EQ(facts.last_level_sharers, 0);
  EXPECT_EQ(facts.last_level_share(), std::size_t{8} << 20);
}

// Times at kCostBytes that grow as `latency + bytes / rate`.
TransportCosts::Times line(double latency_s, double bytes_per_s) {
  TransportCosts::Times times{};
  for (std::size_t i = 0; i < kCostBytes.size(); ++i) {
    times[i] = latency_s + static_cast<double>(kCostBytes[i]) / bytes_per_s;
  }
  return times;
}

TEST(TransportCostsTest, ReadsBetweenTheMeasuredSizesOnStraightLines) {
  TransportCosts::Times t{};
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(i + 1);
  EXPECT_DOUBLE_EQ(TransportCosts::at(t, 0), 1);  // below the smallest: the smallest's time
  EXPECT_DOUBLE_EQ(TransportCosts::at(t, 64), 1);
  EXPECT_DOUBLE_EQ(TransportCosts::at(t, 16384), 2);
  // Halfway between 16 and 64 KiB.
  EXPECT_DOUBLE_EQ(TransportCosts::at(t, 40 << 10), 2.5);
  EXPECT_DOUBLE_EQ(TransportCosts::at(t, 4 << 20), 7);
  // A quarter of the way from 16 to 64 MiB.
  EXPECT_DOUBLE_EQ(TransportCosts::at(t, 28 << 20), 8.25);
  // Past the largest, on the last segment's line (1 per 48 MiB).
  EXPECT_DOUBLE_EQ(TransportCosts::at(t, std::size_t{112} << 20), 10);
  EXPECT_FALSE(TransportCosts{}.exchange_known());
  TransportCosts some;
  some.exchange_s = t;
  some.exchange_s[3] = 0;  // one size not measured: not known
  EXPECT_FALSE(some.exchange_known());
}

AllReduceAlgorithm measured_plan(std::size_t row, const TransportCosts& costs,
                                 const TransportTraits& traits = kMpiLike, bool native = true) {
  return choose_all_reduce({.row_bytes = row,
                            .processes = 2,
                            .largest_part_bytes = row / 2,
                            .native_same_bits = native,
                            .costs = costs},
                           traits)
      .algorithm;
}

// Gathered moves the row in one exchange and reduces it whole; pipelined moves the same
// bytes in two exchanges of the owner part and reduces only the part: so gathered wins
// where the reduction of half a row costs less than a round trip.
TEST(ChooseAllReduceTest, MeasuredCostsPickTheCheapestOfGatheredPipelinedAndTheEnginesOwn) {
  TransportCosts costs;
  costs.exchange_s = line(1e-6, 10e9);
  costs.reduce_s = line(0, 20e9);
  // The engine's own: a handshake of 20 us, then 20 GB/s.
  costs.native_s = line(20e-6, 20e9);
  // 20,000 bytes: gathered 1 + 2 + 1 = 4 us, pipelined 2 x (1 + 1) + 0.5 = 4.5 us, the
  // engine's own 21 us.
  EXPECT_EQ(measured_plan(20000, costs), AllReduceAlgorithm::kGathered);
  AllReduceShape small{.row_bytes = 20000, .processes = 2, .largest_part_bytes = 10000};
  small.costs = costs;
  EXPECT_DOUBLE_EQ(gathered_seconds(small), 4e-6);
  EXPECT_DOUBLE_EQ(pipelined_seconds(small, std::size_t{2} << 20), 4.5e-6);
  EXPECT_DOUBLE_EQ(native_seconds(small), 21e-6);
  // 220,000 bytes: pipelined 2 x (1 + 11) + 5.5 = 29.5 us, gathered 1 + 22 + 11 = 34 us,
  // the engine's own 31 us: pipelined is cheaper, but within kEstimateMargin (10%).
  EXPECT_EQ(measured_plan(220000, costs), AllReduceAlgorithm::kNative);
  // 100,000 bytes: pipelined 2 x (1 + 5) + 2.5 = 14.5 us against 25 us.
  EXPECT_EQ(measured_plan(100000, costs), AllReduceAlgorithm::kPipelined);
  EXPECT_EQ(measured_plan(4 << 20, costs), AllReduceAlgorithm::kNative);
  // Frames still come first; and without the engine's own the costs decide nothing.
  EXPECT_EQ(measured_plan(1000, costs), AllReduceAlgorithm::kInFrame);
  EXPECT_EQ(measured_plan(1 << 20, costs, kMpiLike, false), AllReduceAlgorithm::kPipelined);
  EXPECT_EQ(measured_plan(16 << 10, costs, kMpiLike, false), AllReduceAlgorithm::kGathered);

  // A dear round trip and a cheap reduction: gathered up to kGatherCapBytes, no further (every
  // process would hold all the others' partials at once).
  costs.exchange_s = line(50e-6, 10e9);
  costs.reduce_s = line(0, 1e12);
  costs.native_s = line(1e-3, 1e9);
  EXPECT_EQ(measured_plan(kGatherCapBytes, costs), AllReduceAlgorithm::kGathered);
  EXPECT_EQ(measured_plan(kGatherCapBytes + 64, costs), AllReduceAlgorithm::kPipelined);

  // Costs not measured (zero): the fixed limits.
  EXPECT_EQ(measured_plan(64 << 10, TransportCosts{}), AllReduceAlgorithm::kNative);
  EXPECT_LT(gathered_seconds({.row_bytes = 1 << 20}), 0);
  EXPECT_LT(pipelined_seconds({.row_bytes = 1 << 20}, 1 << 20), 0);
  EXPECT_LT(native_seconds({.row_bytes = 1 << 20}), 0);
}

constexpr TransportTraits kMpiOverRings{.receives_shorter = true,
                                        .streamed_results = true,
                                        .eager_bytes = std::size_t{16} << 10,
                                        .min_step_bytes = std::size_t{2} << 20,
                                        .max_step_bytes = std::size_t{2} << 20,
                                        .shared_step_bytes = std::size_t{512} << 10};

// Steps that stay in the shared-memory rings where every replica thread has a core: one
// step per part up to the rings' step, results never streamed (the peers copy them out of
// the rings, not out of this process's memory); with more threads than cores, the steps
// through the engine's messages.
TEST(ChooseAllReduceTest, PipelinedStepsStayInTheRingsWhereEveryThreadHasACore) {
  const AllReducePlan big = plan_for(std::size_t{64} << 20, 1, 2, kMpiOverRings);
  EXPECT_EQ(big.algorithm, AllReduceAlgorithm::kPipelined);
  EXPECT_EQ(big.step_bytes, std::size_t{512} << 10);
  EXPECT_FALSE(big.receives_ahead);
  EXPECT_EQ(big.stream_bytes, std::numeric_limits<std::size_t>::max());
  EXPECT_EQ(plan_for(std::size_t{512} << 10, 1, 2, kMpiOverRings).step_bytes,
            std::size_t{256} << 10);
  AllReduceShape crowded{.row_bytes = std::size_t{64} << 20,
                         .max_subtrees = 2,
                         .processes = 2,
                         .largest_part_bytes = std::size_t{32} << 20,
                         .oversubscribed = true};
  const AllReducePlan through_messages = choose_all_reduce(crowded, kMpiOverRings);
  EXPECT_EQ(through_messages.step_bytes, std::size_t{2} << 20);
  EXPECT_EQ(through_messages.stream_bytes, kStreamBytes);

  // Measured: the rings' steps take the engine's sizes where their estimate is cheaper.
  // 64 MiB in 64 steps of 512 KiB, each 2 x (1 + 26.2) + 26.2 us: 5.2 ms, against 16.8 ms
  // for an engine's own of 4 GB/s, and 3.4 ms for one of 20 GB/s.
  TransportCosts costs;
  costs.exchange_s = line(1e-6, 20e9);
  costs.reduce_s = line(0, 20e9);
  costs.native_s = line(20e-6, 4e9);
  EXPECT_EQ(measured_plan(std::size_t{64} << 20, costs, kMpiOverRings),
            AllReduceAlgorithm::kPipelined);
  costs.native_s = line(20e-6, 20e9);
  EXPECT_EQ(measured_plan(std::size_t{64} << 20, costs, kMpiOverRings),
            AllReduceAlgorithm::kNative);

  // Past the caches a step costs its share of the whole part's streaming from memory: with
  // 20 GB/s up to 1 MiB and 2 GB/s from 4 MiB, 64 MiB (parts of 32 MiB) costs 2 x 16.8 +
  // 16.8 ms, not 5.2 ms, and the engine's own of 4 GB/s (16.8 ms) is cheaper.
  for (std::size_t i = 0; i < kCostBytes.size(); ++i) {
    if (kCostBytes[i] >= (std::size_t{4} << 20)) {
      costs.exchange_s[i] = static_cast<double>(kCostBytes[i]) / 2e9;
      costs.reduce_s[i] = static_cast<double>(kCostBytes[i]) / 2e9;
    }
  }
  costs.native_s = line(20e-6, 4e9);
  const AllReduceShape streamed{.row_bytes = std::size_t{64} << 20,
                                .processes = 2,
                                .largest_part_bytes = std::size_t{32} << 20,
                                .costs = costs};
  EXPECT_NEAR(pipelined_seconds(streamed, std::size_t{512} << 10), 3 * (32 << 20) / 2e9, 1e-9);
  EXPECT_EQ(measured_plan(std::size_t{64} << 20, costs, kMpiOverRings),
            AllReduceAlgorithm::kNative);
  // 1 MiB (parts of 512 KiB) still costs its steps: 2 x (1 + 26.2) + 26.2 us = 80.6 us.
  const AllReduceShape cached{.row_bytes = std::size_t{1} << 20,
                              .processes = 2,
                              .largest_part_bytes = std::size_t{512} << 10,
                              .costs = costs};
  EXPECT_NEAR(pipelined_seconds(cached, std::size_t{512} << 10),
              2 * (1e-6 + (512 << 10) / 20e9) + (512 << 10) / 20e9, 1e-9);
}

// Where the exchange in the rings' steps was measured, the part moves at that cost, not at
// one message's: OpenMPI sends a message past the rings' size its own way, and a large one
// measured at 10 GB/s says nothing of 16 steps through the rings at 2.5 GB/s.
TEST(ChooseAllReduceTest, APartInStepsCostsWhatItsStepsWereMeasuredToCost) {
  TransportCosts costs;
  costs.exchange_s = line(1e-6, 10e9);
  costs.reduce_s = line(0, 20e9);
  costs.native_s = line(20e-6, 10e9);
  const AllReduceShape shape{.row_bytes = std::size_t{16} << 20,
                             .processes = 2,
                             .largest_part_bytes = std::size_t{8} << 20,
                             .costs = costs};
  const std::size_t step = std::size_t{512} << 10;
  // Not measured in steps: 16 steps of (2 x (1 + 52.4) + 26.2) us = 2.13 ms, against the
  // engine's own 1.70 ms.
  EXPECT_NEAR(pipelined_seconds(shape, step), 16 * (2 * (1e-6 + step / 10e9) + step / 20e9), 1e-9);
  // The rings' steps at 20 GB/s: 2 x 0.42 + 0.42 ms = 1.26 ms, below the engine's own.
  costs.stepped_s = line(0, 20e9);
  EXPECT_EQ(measured_plan(std::size_t{16} << 20, costs, kMpiOverRings),
            AllReduceAlgorithm::kPipelined);
  // At 2.5 GB/s: 2 x 3.36 + 0.42 ms = 7.1 ms, and the engine's own (1.70 ms) takes it.
  costs.stepped_s = line(0, 2.5e9);
  AllReduceShape slow = shape;
  slow.costs = costs;
  EXPECT_NEAR(pipelined_seconds(slow, step), 2 * (8 << 20) / 2.5e9 + (8 << 20) / 20e9, 1e-9);
  EXPECT_EQ(measured_plan(std::size_t{16} << 20, costs, kMpiOverRings),
            AllReduceAlgorithm::kNative);
}

}  // namespace
}  // namespace replicator::detail
