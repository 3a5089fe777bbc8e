// The host's waiting and placement policy (src/runtime/host_policy.h): pure functions, checked
// at the boundaries of each choice.
#include "src/runtime/host_policy.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <initializer_list>
#include <vector>

namespace replicator::detail {
namespace {

using std::chrono::microseconds;

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

  // 2 processes of one replica each on 2 cores: every replica has a core, the drivers not.
  const HostPolicy pair = host_policy(1, 2, 2, spin);
  EXPECT_FALSE(pair.oversubscribed);
  EXPECT_EQ(pair.collective_spin, spin);
  EXPECT_EQ(pair.step_spin, microseconds(0));
  EXPECT_EQ(host_policy(1, 2, 4, spin).step_spin, spin);

  const HostPolicy crowded = host_policy(2, 2, 2, spin);  // 2 processes x 2 replicas, 2 cores
  EXPECT_TRUE(crowded.oversubscribed);
  EXPECT_EQ(crowded.collective_spin, microseconds(0));
  EXPECT_EQ(crowded.step_spin, microseconds(0));

  EXPECT_TRUE(host_policy(2, 1, 0, spin).oversubscribed);  // unknown core count: one core
}

cpu_set_t cores(std::initializer_list<int> list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : list) CPU_SET(c, &set);
  return set;
}

TEST(HostPolicyTest, AReplicaOnALowerReplicasCoreMovesToTheAllowedCoresNoneHolds) {
  cpu_set_t out;
  const std::vector<int> on_0 = {0};
  ASSERT_TRUE(cores_elsewhere(0, on_0, cores({0, 1}), &out));
  const cpu_set_t just_1 = cores({1});
  EXPECT_TRUE(CPU_EQUAL(&out, &just_1));

  // Every core a lower replica holds is left out, and only allowed cores are offered.
  const std::vector<int> on_3_and_1 = {3, 1};
  ASSERT_TRUE(cores_elsewhere(3, on_3_and_1, cores({0, 1, 2, 3, 5}), &out));
  const cpu_set_t rest = cores({0, 2, 5});
  EXPECT_TRUE(CPU_EQUAL(&out, &rest));

  // Alone on its core: stays.
  const std::vector<int> on_1 = {1};
  EXPECT_FALSE(cores_elsewhere(0, on_1, cores({0, 1}), &out));
  EXPECT_FALSE(cores_elsewhere(0, {}, cores({0, 1}), &out));  // replica 0 never moves
  // Unknown cores (-1) and cores out of range hold nothing.
  const std::vector<int> unknown = {-1, CPU_SETSIZE + 7};
  EXPECT_FALSE(cores_elsewhere(0, unknown, cores({0, 1}), &out));
  // Every allowed core taken (more replicas than cores, or an affinity of one core): stays.
  const std::vector<int> both = {0, 1};
  EXPECT_FALSE(cores_elsewhere(1, both, cores({0, 1}), &out));
  EXPECT_FALSE(cores_elsewhere(0, on_0, cores({0}), &out));
}

}  // namespace
}  // namespace replicator::detail
