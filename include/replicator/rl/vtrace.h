// V-trace off-policy targets and the IMPALA loss (Espeholt et al. 2018, "IMPALA: Scalable
// Distributed Deep-RL with Importance Weighted Actor-Learner Architectures", eq. 1 and
// section 4.2; the semantics of DeepMind's scalable_agent vtrace.py and experiment.py).
//
// Tensors are time-major: [T, B] for T steps of B unrolls, [T, B, A] for logits over A
// actions, [B] for the value after the last step. Step t of unroll b saw observation x_t,
// took action a_t (drawn from the behaviour policy μ of the actor), got reward r_t and
// discount γ_t, where γ_t multiplies the value of x_{t+1}:
// - γ_t = 0 when the episode terminated at step t (nothing after it counts); the next
//   step of the unroll, if any, is the start of a new episode.
// - An episode cut short (time limit, truncation) must still bootstrap from the value of
//   its last observation x', which the unroll does not hold at t + 1. Represent it as
//   γ_t = 0 and r_t + γ·V(x') in place of r_t, with V(x') computed by the learner without
//   gradient: the targets of step t are then those of an unroll that ended at x' and
//   bootstrapped from V(x') (the trace stops there, as at any unroll's end).
// - Otherwise γ_t = γ, the agent's discount.
// All functions here are pure (no state, no blocking). The losses run on the inputs'
// device; V-trace's recursion runs on the CPU (tens of steps by tens of columns: one loop
// costs less than dispatching its steps as operators) and its results go back to the
// inputs' device.
#pragma once

#include <torch/types.h>

namespace replicator::rl {

struct VTraceOptions {
  // ρ̄: importance weights of the value targets are min(ρ̄, π/μ). Infinity: no clipping.
  double clip_rho_threshold = 1.0;
  // c̄: the trace coefficients are c_t = λ·min(c̄, π/μ). Infinity: no clipping.
  double clip_c_threshold = 1.0;
  // ρ̄ of the policy-gradient advantages. Infinity: no clipping.
  double clip_pg_rho_threshold = 1.0;
  // λ in [0, 1]: mixes in shorter returns (λ = 0: one-step targets), as trfl and rlax do.
  double lambda = 1.0;
};

struct VTraceInputs {
  ::torch::Tensor behaviour_log_probs;  // [T, B] log μ(a_t | x_t), the actor's
  ::torch::Tensor target_log_probs;     // [T, B] log π(a_t | x_t), the learner's
  ::torch::Tensor discounts;            // [T, B] γ_t, see above
  ::torch::Tensor rewards;              // [T, B] r_t
  ::torch::Tensor values;               // [T, B] V(x_t), the learner's
  ::torch::Tensor bootstrap_value;      // [B] V(x_T)
};

struct VTraceReturns {
  ::torch::Tensor vs;             // [T, B] value targets v_t
  ::torch::Tensor pg_advantages;  // [T, B] min(ρ̄_pg, ρ_t)·(r_t + γ_t·v_{t+1} − V(x_t))
};

// V-trace targets, with ρ_t = π/μ = exp(target − behaviour log-probs):
//   v_t = V(x_t) + δ_t + γ_t·c_t·(v_{t+1} − V(x_{t+1})),  v_T = V(x_T) = bootstrap_value,
//   δ_t = min(ρ̄, ρ_t)·(r_t + γ_t·V(x_{t+1}) − V(x_t)),   c_t = λ·min(c̄, ρ_t),
// computed backwards over t, and pg_advantages as above. The results carry no gradient
// (targets); they have the inputs' dtype (float32 or float64) and device. Throws
// InvalidArgument, naming the tensor, its shape and dtype, when a tensor is undefined, not
// floating point, of a dtype or device other than values', or not [T, B] / [B]; and for a
// negative or NaN threshold, or λ outside [0, 1]. T = 0 gives empty results.
VTraceReturns vtrace(const VTraceInputs& inputs, const VTraceOptions& options = {});

// log π(a_t | x_t) = log_softmax(logits)[t, b, actions[t, b]]: [T, B] from logits [T, B, A]
// and int64 actions [T, B]. Keeps the gradient with respect to logits. Throws
// InvalidArgument for other shapes, non-floating logits, non-int64 actions or an action
// outside [0, A).
::torch::Tensor action_log_probs(const ::torch::Tensor& logits, const ::torch::Tensor& actions);

struct ImpalaLossOptions {
  double baseline_cost = 0.5;  // scales 0.5·Σ(v_t − V(x_t))²
  double entropy_cost = 0.01;  // the loss adds −entropy_cost·Σ H(π(·|x_t))
  VTraceOptions vtrace;
};

struct ImpalaInputs {
  ::torch::Tensor behaviour_logits;  // [T, B, A] the actor's logits (no gradient needed)
  ::torch::Tensor target_logits;     // [T, B, A] the learner's logits, with gradient
  ::torch::Tensor actions;           // [T, B] int64
  ::torch::Tensor discounts;         // [T, B]
  ::torch::Tensor rewards;           // [T, B]
  ::torch::Tensor values;            // [T, B] the learner's values, with gradient
  ::torch::Tensor bootstrap_value;   // [B], used as a target only
};

// The terms of the IMPALA loss, each a scalar as it enters `total`; sums over T and B (as
// scalable_agent: divide the learning rate by T·B for per-step means).
struct ImpalaLoss {
  ::torch::Tensor policy_gradient;  // −Σ log π(a_t|x_t)·pg_advantages_t
  ::torch::Tensor baseline;         // baseline_cost·0.5·Σ(v_t − V(x_t))²
  ::torch::Tensor entropy;          // −entropy_cost·Σ H(π(·|x_t)), H = −Σ_a π log π
  ::torch::Tensor total;            // policy_gradient + baseline + entropy
  VTraceReturns targets;            // the V-trace targets used (no gradient)
};

// The IMPALA loss: V-trace targets from the behaviour and target log-probs of the taken
// actions, then the three terms. Gradients flow into target_logits (policy gradient and
// entropy) and values (baseline) only; the targets are constants. Throws InvalidArgument
// as vtrace() and action_log_probs() do, when the two logits differ in shape, dtype or
// device, and for a negative or non-finite cost.
ImpalaLoss impala_loss(const ImpalaInputs& inputs, const ImpalaLossOptions& options = {});

}  // namespace replicator::rl
