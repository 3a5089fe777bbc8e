#include "src/rl/remote/wire.h"

#include "replicator/errors.h"

namespace replicator::rl::remote_wire {

void to_message(const Unroll& u, remote::Unroll* out) {
  out->set_length(u.length);
  out->set_observation_size(u.observation_size);
  out->set_num_actions(u.num_actions);
  put(u.observations, out->mutable_observations());
  put(u.actions, out->mutable_actions());
  put(u.rewards, out->mutable_rewards());
  put(u.done, out->mutable_done());
  put(u.behaviour_logits, out->mutable_behaviour_logits());
  out->set_policy_version(u.policy_version);
  out->set_actor(u.actor);
  out->set_sequence(u.sequence);
}

Unroll from_message(const remote::Unroll& m) {
  Unroll u;
  u.length = m.length();
  u.observation_size = m.observation_size();
  u.num_actions = m.num_actions();
  u.policy_version = m.policy_version();
  u.actor = m.actor();
  u.sequence = m.sequence();
  const bool whole = get(m.observations(), &u.observations) && get(m.actions(), &u.actions) &&
                     get(m.rewards(), &u.rewards) && get(m.done(), &u.done) &&
                     get(m.behaviour_logits(), &u.behaviour_logits);
  if (!whole || !u.consistent()) {
    throw DataError("a malformed unroll from actor " + std::to_string(u.actor) + " (length " +
                        std::to_string(u.length) + ", " + std::to_string(m.observations().size()) +
                        " bytes of observations of size " + std::to_string(u.observation_size) +
                        ")",
                    "an insert stream");
  }
  return u;
}

}  // namespace replicator::rl::remote_wire
