// V-trace and the IMPALA loss. Targets are computed under NoGradGuard from detached inputs,
// so no graph is built for them, in one loop over the data on the CPU.
#include "replicator/rl/vtrace.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "replicator/errors.h"

namespace replicator::rl {

namespace {

std::string describe(const ::torch::Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  std::ostringstream out;
  out << t.sizes() << " " << t.dtype();
  if (!t.device().is_cpu()) out << " on " << t.device();
  return out.str();
}

std::string shape_text(std::initializer_list<std::int64_t> shape) {
  std::ostringstream out;
  out << ::torch::IntArrayRef(shape);
  return out.str();
}

// `t` must be a floating tensor of `shape`, with the dtype and device of `like`.
void check_float(const char* fn, const char* name, const ::torch::Tensor& t,
                 std::initializer_list<std::int64_t> shape, const ::torch::Tensor& like,
                 const char* like_name) {
  const bool ok = t.defined() && t.is_floating_point() &&
                  t.sizes() == ::torch::IntArrayRef(shape) &&
                  t.scalar_type() == like.scalar_type() && t.device() == like.device();
  if (!ok) {
    std::ostringstream want;
    want << shape_text(shape) << " " << like.dtype();
    if (!like.device().is_cpu()) want << " on " << like.device();
    throw InvalidArgument(std::string(fn) + ": " + name + " must be a " + want.str() +
                          " tensor (the shape, dtype and device of " + like_name + "), got " +
                          describe(t));
  }
}

// `values` fixes T, B, dtype and device for the others.
void check_reference(const char* fn, const char* name, const ::torch::Tensor& t, int dims) {
  if (!t.defined() || !t.is_floating_point() || t.dim() != dims) {
    throw InvalidArgument(std::string(fn) + ": " + name + " must be a floating-point " +
                          (dims == 2 ? "[T, B]" : "[T, B, A]") + " tensor, got " + describe(t));
  }
}

void check_threshold(const char* name, double x) {
  if (std::isnan(x) || x < 0) {
    throw InvalidArgument(std::string("vtrace: ") + name +
                          " must be non-negative (infinity: no clipping), got " +
                          std::to_string(x));
  }
}

void check_options(const VTraceOptions& o) {
  check_threshold("clip_rho_threshold", o.clip_rho_threshold);
  check_threshold("clip_c_threshold", o.clip_c_threshold);
  check_threshold("clip_pg_rho_threshold", o.clip_pg_rho_threshold);
  if (!(o.lambda >= 0 && o.lambda <= 1)) {
    throw InvalidArgument("vtrace: lambda must be in [0, 1], got " + std::to_string(o.lambda));
  }
}

void check_vtrace_inputs(const char* fn, const VTraceInputs& in) {
  check_reference(fn, "values", in.values, 2);
  const std::int64_t t = in.values.size(0);
  const std::int64_t b = in.values.size(1);
  check_float(fn, "behaviour_log_probs", in.behaviour_log_probs, {t, b}, in.values, "values");
  check_float(fn, "target_log_probs", in.target_log_probs, {t, b}, in.values, "values");
  check_float(fn, "discounts", in.discounts, {t, b}, in.values, "values");
  check_float(fn, "rewards", in.rewards, {t, b}, in.values, "values");
  check_float(fn, "bootstrap_value", in.bootstrap_value, {b}, in.values, "values");
}

// The recursion on contiguous CPU data, one pass per column from the back. As tensor
// arithmetic it would dispatch about 5 operators per step, which costs more than the
// arithmetic itself at the sizes of a learner's share (tens of steps, tens of columns).
template <typename S>
void vtrace_loop(const ::torch::Tensor& values, const ::torch::Tensor& bootstrap,
                 const ::torch::Tensor& discounts, const ::torch::Tensor& rewards,
                 const ::torch::Tensor& log_rhos, const VTraceOptions& o, VTraceReturns& out) {
  const std::int64_t steps = values.size(0);
  const std::int64_t cols = values.size(1);
  const S* v = values.data_ptr<S>();
  const S* boot = bootstrap.data_ptr<S>();
  const S* disc = discounts.data_ptr<S>();
  const S* rew = rewards.data_ptr<S>();
  const S* lr = log_rhos.data_ptr<S>();
  S* vs = out.vs.data_ptr<S>();
  S* adv = out.pg_advantages.data_ptr<S>();
  const auto clipped = [](S x, double threshold) {
    return std::isinf(threshold) ? x : std::min(x, static_cast<S>(threshold));
  };
  const auto lambda = static_cast<S>(o.lambda);
  for (std::int64_t b = 0; b < cols; ++b) {
    S acc = 0;  // v_{t+1} − V(x_{t+1})
    S next_value = boot[b];
    S next_vs = boot[b];
    for (std::int64_t t = steps - 1; t >= 0; --t) {
      const std::int64_t i = t * cols + b;
      const S rho = std::exp(lr[i]);
      const S delta = clipped(rho, o.clip_rho_threshold) * (rew[i] + disc[i] * next_value - v[i]);
      acc = delta + disc[i] * (lambda * clipped(rho, o.clip_c_threshold)) * acc;
      vs[i] = acc + v[i];
      adv[i] = clipped(rho, o.clip_pg_rho_threshold) * (rew[i] + disc[i] * next_vs - v[i]);
      next_value = v[i];
      next_vs = vs[i];
    }
  }
}

VTraceReturns vtrace_checked(const VTraceInputs& in, const VTraceOptions& o) {
  ::torch::NoGradGuard no_grad;
  // On the CPU in double for double inputs, in float otherwise; back to the inputs'
  // dtype and device at the end (no-ops for CPU float and double).
  const auto compute =
      in.values.scalar_type() == ::torch::kFloat64 ? ::torch::kFloat64 : ::torch::kFloat32;
  const auto here = [&](const ::torch::Tensor& t) {
    return t.detach().to(::torch::kCPU, compute).contiguous();
  };
  const ::torch::Tensor log_rhos = here(in.target_log_probs) - here(in.behaviour_log_probs);
  const ::torch::Tensor values = here(in.values);
  VTraceReturns out{.vs = ::torch::empty_like(values),
                    .pg_advantages = ::torch::empty_like(values)};
  const auto run = [&](auto zero) {
    vtrace_loop<decltype(zero)>(values, here(in.bootstrap_value), here(in.discounts),
                                here(in.rewards), log_rhos, o, out);
  };
  if (compute == ::torch::kFloat64) {
    run(0.0);
  } else {
    run(0.f);
  }
  out.vs = out.vs.to(in.values.options());
  out.pg_advantages = out.pg_advantages.to(in.values.options());
  return out;
}

}  // namespace

VTraceReturns vtrace(const VTraceInputs& inputs, const VTraceOptions& options) {
  check_vtrace_inputs("vtrace", inputs);
  check_options(options);
  return vtrace_checked(inputs, options);
}

::torch::Tensor action_log_probs(const ::torch::Tensor& logits, const ::torch::Tensor& actions) {
  check_reference("action_log_probs", "logits", logits, 3);
  const std::int64_t t = logits.size(0);
  const std::int64_t b = logits.size(1);
  const std::int64_t a = logits.size(2);
  if (!actions.defined() || actions.scalar_type() != ::torch::kInt64 ||
      actions.sizes() != ::torch::IntArrayRef({t, b}) || actions.device() != logits.device()) {
    throw InvalidArgument("action_log_probs: actions must be an int64 " + shape_text({t, b}) +
                          " tensor on the device of logits " + describe(logits) + ", got " +
                          describe(actions));
  }
  if (actions.numel() > 0) {
    const std::int64_t low = actions.min().item<std::int64_t>();
    const std::int64_t high = actions.max().item<std::int64_t>();
    if (low < 0 || high >= a) {
      throw InvalidArgument("action_log_probs: actions must be in [0, " + std::to_string(a) +
                            ") for logits over " + std::to_string(a) + " actions, got " +
                            std::to_string(low < 0 ? low : high));
    }
  }
  return ::torch::log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1);
}

ImpalaLoss impala_loss(const ImpalaInputs& in, const ImpalaLossOptions& options) {
  const char* fn = "impala_loss";
  check_reference(fn, "target_logits", in.target_logits, 3);
  const auto sizes = in.target_logits.sizes();
  check_float(fn, "behaviour_logits", in.behaviour_logits, {sizes[0], sizes[1], sizes[2]},
              in.target_logits, "target_logits");
  check_float(fn, "values", in.values, {sizes[0], sizes[1]}, in.target_logits, "target_logits");
  for (const auto& [name, cost] : {std::pair{"baseline_cost", options.baseline_cost},
                                   std::pair{"entropy_cost", options.entropy_cost}}) {
    if (!std::isfinite(cost) || cost < 0) {
      throw InvalidArgument(std::string(fn) + ": " + name +
                            " must be finite and non-negative, got " + std::to_string(cost));
    }
  }
  check_options(options.vtrace);

  const ::torch::Tensor target_log_probs = action_log_probs(in.target_logits, in.actions);
  ::torch::Tensor behaviour_log_probs;
  {
    ::torch::NoGradGuard no_grad;
    behaviour_log_probs = action_log_probs(in.behaviour_logits.detach(), in.actions);
  }
  const VTraceInputs vtrace_inputs{.behaviour_log_probs = behaviour_log_probs,
                                   .target_log_probs = target_log_probs,
                                   .discounts = in.discounts,
                                   .rewards = in.rewards,
                                   .values = in.values,
                                   .bootstrap_value = in.bootstrap_value};
  check_vtrace_inputs(fn, vtrace_inputs);

  ImpalaLoss loss;
  loss.targets = vtrace_checked(vtrace_inputs, options.vtrace);
  loss.policy_gradient = -(target_log_probs * loss.targets.pg_advantages).sum();
  loss.baseline = options.baseline_cost * 0.5 * (loss.targets.vs - in.values).square().sum();
  const ::torch::Tensor log_policy = ::torch::log_softmax(in.target_logits, -1);
  const ::torch::Tensor entropy = -(log_policy.exp() * log_policy).sum();
  loss.entropy = -options.entropy_cost * entropy;
  loss.total = loss.policy_gradient + loss.baseline + loss.entropy;
  return loss;
}

}  // namespace replicator::rl
