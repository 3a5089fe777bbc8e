// Frames per second of the batched environments alone: one thread steps a BatchedEnv with
// uniformly random actions drawn beforehand (so drawing is not timed).
#pragma once

#include <cstdint>
#include <string>

namespace replicator::bench {

struct EnvSpeed {
  double frames_per_s;  // env steps of all envs per second
  double seconds;
};

// Makes `name` with `num_envs` envs, runs `warmup` untimed batched steps, then times `steps`
// batched steps (frames = steps × num_envs). Blocks for the run; throws InvalidArgument for
// a bad name or num_envs, as make_env does.
EnvSpeed env_speed(const std::string& name, int num_envs, int steps, int warmup = 100);

}  // namespace replicator::bench
