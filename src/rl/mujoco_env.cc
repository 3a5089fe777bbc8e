// MuJoCo's continuous-control tasks behind ContinuousEnv (continuous_env.h): the model read
// from gymnasium's assets, one mjData per env, gymnasium's rewards and resets.

#include "src/rl/mujoco_env.h"

#include <mujoco/mujoco.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "src/base/launch_env.h"
#include "src/rl/seeding.h"

namespace replicator::rl {
namespace {

struct ModelDeleter {
  void operator()(mjModel* model) const { mj_deleteModel(model); }
};
struct DataDeleter {
  void operator()(mjData* data) const { mj_deleteData(data); }
};
using ModelPtr = std::shared_ptr<const mjModel>;
using DataPtr = std::unique_ptr<mjData, DataDeleter>;

std::filesystem::path assets_folder() {
  if (const char* set = detail::env("REPLICATOR_MUJOCO_ASSETS"); set != nullptr && *set != 0) {
    return set;
  }
#ifdef REPLICATOR_MUJOCO_ASSETS
  return REPLICATOR_MUJOCO_ASSETS;
#else
  return {};
#endif
}

// Loads `file` from the assets folder; throws ConfigError saying where it looked and why not.
ModelPtr load_model(const std::string& task, const std::string& file) {
  const std::filesystem::path folder = assets_folder();
  const std::filesystem::path path = folder / file;
  if (folder.empty() || !std::filesystem::is_regular_file(path)) {
    throw ConfigError(task + ": no MuJoCo model at '" + path.string() +
                      "'; set REPLICATOR_MUJOCO_ASSETS to gymnasium's envs/mujoco/assets folder "
                      "(pip install gymnasium into the project's .venv: scripts/install_deps.sh)");
  }
  std::array<char, 1000> error{};
  mjModel* model = mj_loadXML(path.c_str(), nullptr, error.data(), static_cast<int>(error.size()));
  if (model == nullptr) {
    throw ConfigError(task + ": MuJoCo could not load '" + path.string() + "': " + error.data());
  }
  return ModelPtr(model, ModelDeleter{});
}

ActionBounds bounds_of(const mjModel& model) {
  ActionBounds bounds;
  const auto motors = static_cast<std::size_t>(model.nu);
  for (std::size_t k = 0; k < motors; ++k) {
    bounds.low.push_back(static_cast<float>(model.actuator_ctrlrange[2 * k]));
    bounds.high.push_back(static_cast<float>(model.actuator_ctrlrange[2 * k + 1]));
  }
  return bounds;
}

// A standard normal draw (Box-Muller, the cosine branch only: one draw per two uniforms).
double normal(SplitMix64& rng) {
  const double u1 = 1.0 - rng.uniform();  // (0, 1]
  const double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// HalfCheetah-v5 of gymnasium: a planar cheetah of 9 joints (qpos 9, qvel 9) and 6 motors in
// [-1, 1]; an action is held for 5 MuJoCo steps of 0.01 s. Observation: qpos without the
// x-coordinate, then qvel (17). Reward: the forward velocity (x after minus x before, over the
// 0.05 s) minus 0.1 times the squared action. Never terminates; truncated after 1000 steps.
// Reset: qpos0 plus U(-0.1, 0.1), qvel 0.1 N(0, 1), each env from its own stream.
class HalfCheetah final : public ContinuousEnv {
 public:
  static constexpr int kFrameSkip = 5;
  static constexpr int kMaxEpisodeSteps = 1000;
  static constexpr double kForwardWeight = 1.0;
  static constexpr double kControlWeight = 0.1;
  static constexpr double kResetNoise = 0.1;

  HalfCheetah(ModelPtr model, int num_envs, std::uint64_t seed)
      : ContinuousEnv("half_cheetah", num_envs, model->nq - 1 + model->nv, bounds_of(*model)),
        model_(std::move(model)) {
    const auto m = static_cast<std::size_t>(num_envs);
    for (std::size_t i = 0; i < m; ++i) {
      data_.emplace_back(mj_makeData(model_.get()));
      if (!data_.back()) throw Error("half_cheetah: MuJoCo could not allocate its data");
      rng_.emplace_back(env_seed(seed, i));
    }
    do_reset();
  }

 private:
  void do_reset() override {
    for (std::size_t i = 0; i < data_.size(); ++i) reset_env(i);
  }

  void reset_env(std::size_t i) {
    mjData* d = data_[i].get();
    mj_resetData(model_.get(), d);
    for (int q = 0; q < model_->nq; ++q) {
      d->qpos[q] = model_->qpos0[q] + kResetNoise * (2 * rng_[i].uniform() - 1);
    }
    for (int v = 0; v < model_->nv; ++v) d->qvel[v] = kResetNoise * normal(rng_[i]);
    mj_forward(model_.get(), d);
    start_episode(i);
    write_observation(i);
  }

  void do_step(std::span<const float> actions) override {
    const auto A = static_cast<std::size_t>(action_size());
    const double dt = model_->opt.timestep * kFrameSkip;
    for (std::size_t i = 0; i < data_.size(); ++i) {
      if (episode_over(i)) {
        reset_env(i);
        continue;
      }
      mjData* d = data_[i].get();
      double control_cost = 0;
      for (std::size_t k = 0; k < A; ++k) {
        const double a = actions[i * A + k];
        d->ctrl[k] = a;
        control_cost += a * a;
      }
      const double x_before = d->qpos[0];
      for (int s = 0; s < kFrameSkip; ++s) mj_step(model_.get(), d);
      const double x_velocity = (d->qpos[0] - x_before) / dt;
      finish_step(i, kForwardWeight * x_velocity - kControlWeight * control_cost, false,
                  kMaxEpisodeSteps);
      write_observation(i);
    }
  }

  void write_observation(std::size_t i) {
    const mjData* d = data_[i].get();
    float* out = observations_.data() + i * static_cast<std::size_t>(observation_size());
    for (int q = 1; q < model_->nq; ++q) *out++ = static_cast<float>(d->qpos[q]);
    for (int v = 0; v < model_->nv; ++v) *out++ = static_cast<float>(d->qvel[v]);
  }

  ModelPtr model_;
  std::vector<DataPtr> data_;
  std::vector<SplitMix64> rng_;
};

}  // namespace

const std::vector<std::string>& mujoco_env_names() {
  static const std::vector<std::string> kNames = {"half_cheetah"};
  return kNames;
}

std::unique_ptr<ContinuousEnv> make_mujoco_env(std::string_view name, int num_envs,
                                               std::uint64_t seed) {
  if (name == "half_cheetah") {
    // One model per batch: MuJoCo only reads it while stepping.
    return std::make_unique<HalfCheetah>(load_model("half_cheetah", "half_cheetah.xml"), num_envs,
                                         seed);
  }
  return nullptr;
}

}  // namespace replicator::rl
