#include "replicator/rl/policy.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstring>
#include <string>

#include "replicator/errors.h"

namespace replicator::rl {

namespace nn = ::torch::nn;

namespace {

// Channels-last [N, H·W·C] to channels-first [N, C, H, W].
class ToImageImpl : public nn::Module {
 public:
  ToImageImpl(int h, int w, int c) : h_(h), w_(w), c_(c) {}
  ::torch::Tensor forward(const ::torch::Tensor& x) {
    return x.reshape({x.size(0), h_, w_, c_}).permute({0, 3, 1, 2});
  }

 private:
  int h_, w_, c_;
};
class ToImage : public nn::ModuleHolder<ToImageImpl> {
 public:
  using nn::ModuleHolder<ToImageImpl>::ModuleHolder;
};

}  // namespace

// Images at least this tall and wide (Atari's 84 x 84) get the shallow network: the MinAtar
// network's full-resolution layer would have millions of weights there.
constexpr int kAtariSide = 36;

PolicyNetImpl::PolicyNetImpl(std::vector<int> observation_shape, int num_actions, int hidden)
    : shape_(std::move(observation_shape)), num_actions_(num_actions) {
  if (num_actions < 1 || hidden < 1) {
    throw InvalidArgument("PolicyNet: num_actions and hidden must be positive, got " +
                          std::to_string(num_actions) + " and " + std::to_string(hidden));
  }
  for (int d : shape_) {
    if (d < 1) throw InvalidArgument("PolicyNet: observation dimensions must be positive");
  }
  if (shape_.size() == 1) {
    torso_ = nn::Sequential(nn::Linear(shape_[0], hidden), nn::Tanh(), nn::Linear(hidden, hidden),
                            nn::Tanh());
  } else if (shape_.size() == 3 && shape_[0] >= kAtariSide && shape_[1] >= kAtariSide) {
    // The IMPALA paper's shallow network (Mnih et al. 2013's, with `hidden` units).
    const int c = shape_[2];
    const auto out = [](int side) { return ((side - 8) / 4 + 1 - 4) / 2 + 1; };
    torso_ = nn::Sequential(
        ToImage(shape_[0], shape_[1], c), nn::Conv2d(nn::Conv2dOptions(c, 16, 8).stride(4)),
        nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(16, 32, 4).stride(2)), nn::ReLU(), nn::Flatten(),
        nn::Linear(32 * out(shape_[0]) * out(shape_[1]), hidden), nn::ReLU());
  } else if (shape_.size() == 3 && shape_[0] >= 3 && shape_[1] >= 3) {
    const int h = shape_[0];
    const int w = shape_[1];
    const int c = shape_[2];
    torso_ = nn::Sequential(ToImage(h, w, c), nn::Conv2d(nn::Conv2dOptions(c, 16, 3)), nn::ReLU(),
                            nn::Flatten(), nn::Linear(16 * (h - 2) * (w - 2), hidden), nn::ReLU());
  } else {
    throw InvalidArgument("PolicyNet: observations must be {size} or {H, W, C} with H, W >= 3");
  }
  register_module("torso", torso_);
  policy_ = register_module("policy", nn::Linear(hidden, num_actions));
  value_ = register_module("value", nn::Linear(hidden, 1));
}

PolicyOutput PolicyNetImpl::forward(const ::torch::Tensor& observations) {
  const ::torch::Tensor h = torso_->forward(observations);
  return {.logits = policy_->forward(h), .value = value_->forward(h).squeeze(1)};
}

std::vector<float> flatten_parameters(nn::Module& module) {
  std::vector<float> flat;
  for (const ::torch::Tensor& p : module.parameters()) {
    const ::torch::Tensor c = p.detach().to(::torch::kFloat32).contiguous();
    const auto* data = c.data_ptr<float>();
    flat.insert(flat.end(), data, data + c.numel());
  }
  return flat;
}

void load_parameters(nn::Module& module, std::span<const float> flat) {
  std::size_t total = 0;
  for (const ::torch::Tensor& p : module.parameters()) total += static_cast<std::size_t>(p.numel());
  if (total != flat.size()) {
    throw InvalidArgument("load_parameters: the model has " + std::to_string(total) +
                          " parameters, the snapshot " + std::to_string(flat.size()));
  }
  ::torch::NoGradGuard no_grad;
  std::size_t at = 0;
  for (::torch::Tensor p : module.parameters()) {
    const auto n = static_cast<std::size_t>(p.numel());
    p.copy_(::torch::from_blob(const_cast<float*>(flat.data() + at), p.sizes(), ::torch::kFloat32));
    at += n;
  }
}

}  // namespace replicator::rl
