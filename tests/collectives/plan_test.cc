// The chooser's table (src/collectives/plan.h) and the host's waiting policy
// (src/runtime/host_policy.h): pure functions, checked at the boundaries of each choice.
#include "src/collectives/plan.h"

#include <gtest/gtest.h>

#include <limits>

#include "src/collectives/frames.h"
#include "src/runtime/host_policy.h"

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

TEST(HostPolicyTest, SpinsOnlyWhileEveryReplicaThreadHasACore) {
  const microseconds spin(50);
  const HostPolicy fits = host_policy(2, 1, 4, spin);
  EXPECT_FALSE(fits.oversubscribed);
  EXPECT_EQ(fits.collective_spin, spin);
  EXPECT_EQ(fits.step_spin, spin);  // 2 replicas + the driving thread on 4 cores

  const HostPolicy tight = host_policy(2, 1, 2, spin);
  EXPECT_FALSE(tight.oversubscribed);
  EXPECT_EQ(tight.collective_spin, spin);
  EXPECT_EQ(tight.step_spin, microseconds(0));  // the driving thread has no core of its own

  const HostPolicy crowded = host_policy(2, 2, 2, spin);  // 2 processes x 2 replicas, 2 cores
  EXPECT_TRUE(crowded.oversubscribed);
  EXPECT_EQ(crowded.collective_spin, microseconds(0));
  EXPECT_EQ(crowded.step_spin, microseconds(0));

  EXPECT_TRUE(host_policy(2, 1, 0, spin).oversubscribed);  // unknown core count: one core
}

}  // namespace
}  // namespace replicator::detail
