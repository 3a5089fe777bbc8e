// Unroll: T consecutive steps of one environment as an actor played them, the unit the
// trajectory queue carries from actors to the learner. Plain vectors (no LibTorch), so
// that it can also travel between processes.
//
// Steps are recorded with "same step" episode boundaries: observation x_t, the action a_t
// taken there, the reward r_t it brought and done_t, whether the episode ended with that
// step (terminated, or truncated by a time limit). After a done step the next observation
// is the first one of a new episode (the actor drops the batched environment's reset step,
// whose action is ignored). x_T is the observation after the last step, from which the
// learner bootstraps; it is never used after a done step (the discount there is 0). A time
// limit is therefore treated as the end of the episode: CartPole-v1's 500-step truncation
// makes its last value target r_T instead of r_T + γ·V(x_T), a small bias that IMPALA
// implementations commonly accept.
#pragma once

#include <cstdint>
#include <vector>

namespace replicator::rl {

struct Unroll {
  int length = 0;                       // T
  int observation_size = 0;             // floats per observation
  int num_actions = 0;                  // A
  std::vector<float> observations;      // (T + 1) × observation_size: x_0 .. x_T
  std::vector<std::int32_t> actions;    // T
  std::vector<float> rewards;           // T
  std::vector<std::uint8_t> done;       // T, 0 or 1
  std::vector<float> behaviour_logits;  // T × A: the acting policy's logits at x_t
  std::int64_t policy_version = 0;      // the version that acted at x_0
  std::int32_t actor = 0;               // which actor made it
  std::int64_t sequence = 0;            // that actor's count of unrolls before this one

  // Whether the vectors have the sizes the counts say (a check for data from elsewhere).
  bool consistent() const {
    const auto t = static_cast<std::size_t>(length);
    return length > 0 && observation_size > 0 && num_actions > 0 &&
           observations.size() == (t + 1) * static_cast<std::size_t>(observation_size) &&
           actions.size() == t && rewards.size() == t && done.size() == t &&
           behaviour_logits.size() == t * static_cast<std::size_t>(num_actions);
  }
};

}  // namespace replicator::rl
