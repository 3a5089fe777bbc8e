#include "replicator/torch/ema.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "replicator/errors.h"
#include "replicator/torch/batch_norm.h"

namespace replicator::torch {
namespace {

// The tensors of `named` in order, after checking that `other` has the same names and
// shapes.
void pair_up(const ::torch::OrderedDict<std::string, ::torch::Tensor>& source,
             const ::torch::OrderedDict<std::string, ::torch::Tensor>& target, const char* what,
             std::vector<::torch::Tensor>& source_out, std::vector<::torch::Tensor>& target_out) {
  if (source.size() != target.size()) {
    throw InvalidArgument(std::string("ModuleEma: the modules have different numbers of ") + what +
                          " (" + std::to_string(source.size()) + " and " +
                          std::to_string(target.size()) + ")");
  }
  for (std::size_t i = 0; i < source.size(); ++i) {
    const auto& s = source[i];
    const auto& t = target[i];
    if (s.key() != t.key() || !s.value().sizes().equals(t.value().sizes())) {
      throw InvalidArgument(std::string("ModuleEma: ") + what + " " + std::to_string(i) + " is " +
                            s.key() + " " + c10::str(s.value().sizes()) + " in the source and " +
                            t.key() + " " + c10::str(t.value().sizes()) + " in the target");
    }
    source_out.push_back(s.value());
    target_out.push_back(t.value());
  }
}

void copy_all(const std::vector<::torch::Tensor>& from, const std::vector<::torch::Tensor>& to) {
  for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
}

}  // namespace

ModuleEma::ModuleEma(::torch::nn::Module& source, ::torch::nn::Module& target, EmaOptions options)
    : options_(options) {
  if (!(options_.decay >= 0 && options_.decay < 1)) {
    throw InvalidArgument("ModuleEma: decay must be in [0, 1), got " +
                          std::to_string(options_.decay));
  }
  pair_up(source.named_parameters(), target.named_parameters(), "parameters", source_params_,
          target_params_);
  pair_up(source.named_buffers(), target.named_buffers(), "buffers", source_buffers_,
          target_buffers_);
  const ::torch::NoGradGuard no_grad;
  copy_all(source_params_, target_params_);
  copy_all(source_buffers_, target_buffers_);
}

void ModuleEma::update(std::int64_t step) {
  const ::torch::NoGradGuard no_grad;
  if (step < options_.start_step) {
    copy_all(source_params_, target_params_);
  } else {
    // t ← t + (1 − decay)·(s − t): the same bits on every replica for equal inputs.
    for (std::size_t i = 0; i < source_params_.size(); ++i) {
      target_params_[i].lerp_(source_params_[i], 1.0 - options_.decay);
    }
  }
  copy_all(source_buffers_, target_buffers_);
}

void standing_statistics(::torch::nn::Module& module, int batches,
                         const std::function<void(int)>& forward_batch) {
  if (batches < 1) {
    throw InvalidArgument("standing statistics need at least 1 batch, got " +
                          std::to_string(batches));
  }
  struct Norm {
    CrossReplicaBatchNormOptions* options;
    double momentum;
  };
  std::vector<Norm> norms;
  for (const auto& m : module.modules()) {
    if (auto* bn = m->as<CrossReplicaBatchNorm2dImpl>()) {
      bn->reset_running_stats();
      norms.push_back({&bn->options, bn->options.momentum()});
    } else if (auto* bn1 = m->as<CrossReplicaBatchNorm1dImpl>()) {
      bn1->reset_running_stats();
      norms.push_back({&bn1->options, bn1->options.momentum()});
    }
  }
  const ::torch::NoGradGuard no_grad;
  module.train();
  try {
    for (int i = 0; i < batches; ++i) {
      for (Norm& n : norms) n.options->momentum(1.0 / (i + 1));
      forward_batch(i);
    }
  } catch (...) {
    for (Norm& n : norms) n.options->momentum(n.momentum);
    module.eval();
    throw;
  }
  for (Norm& n : norms) n.options->momentum(n.momentum);
  module.eval();
}

}  // namespace replicator::torch
