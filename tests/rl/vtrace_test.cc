// V-trace and the IMPALA loss against naive double-precision loops written from the paper's
// definitions (eq. 1 as a sum, not the library's backward recursion), the on-policy limit
// (n-step bootstrapped returns), finite differences of the loss, and the arguments refused.
#include "replicator/rl/vtrace.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "replicator/errors.h"

namespace replicator::rl {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A [T, B] (or [B]) double tensor as a flat vector, row-major.
std::vector<double> flat(const ::torch::Tensor& t) {
  const ::torch::Tensor c = t.detach().to(::torch::kFloat64).contiguous().cpu();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

struct Reference {
  std::vector<double> vs;
  std::vector<double> pg_advantages;
};

// V-trace from the definition: v_s = V_s + Σ_{t>=s} (Π_{i=s}^{t-1} γ_i·c_i)·δ_t.
Reference naive_vtrace(std::int64_t T, std::int64_t B, const std::vector<double>& log_rhos,
                       const std::vector<double>& discounts, const std::vector<double>& rewards,
                       const std::vector<double>& values, const std::vector<double>& bootstrap,
                       const VTraceOptions& o) {
  auto at = [B](std::int64_t t, std::int64_t b) { return t * B + b; };
  auto value = [&](std::int64_t t, std::int64_t b) {
    return t == T ? bootstrap[b] : values[at(t, b)];
  };
  Reference r{std::vector<double>(T * B), std::vector<double>(T * B)};
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t s = 0; s < T; ++s) {
      double sum = 0;
      double trace = 1;  // Π_{i=s}^{t-1} γ_i·c_i
      for (std::int64_t t = s; t < T; ++t) {
        const double rho = std::exp(log_rhos[at(t, b)]);
        const double delta =
            std::min(o.clip_rho_threshold, rho) *
            (rewards[at(t, b)] + discounts[at(t, b)] * value(t + 1, b) - values[at(t, b)]);
        sum += trace * delta;
        trace *= discounts[at(t, b)] * o.lambda * std::min(o.clip_c_threshold, rho);
      }
      r.vs[at(s, b)] = values[at(s, b)] + sum;
    }
    for (std::int64_t s = 0; s < T; ++s) {
      const double rho = std::exp(log_rhos[at(s, b)]);
      const double next_vs = s + 1 == T ? bootstrap[b] : r.vs[at(s + 1, b)];
      r.pg_advantages[at(s, b)] =
          std::min(o.clip_pg_rho_threshold, rho) *
          (rewards[at(s, b)] + discounts[at(s, b)] * next_vs - values[at(s, b)]);
    }
  }
  return r;
}

void expect_near(const std::vector<double>& actual, const std::vector<double>& expected,
                 double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1 + std::abs(expected[i])))
        << what << " at flat index " << i;
  }
}

// One random batch of unrolls: logits of both policies, actions drawn uniformly, rewards,
// discounts 0.99 with about one step in five terminal.
struct Unrolls {
  ::torch::Tensor behaviour_logits, target_logits, actions, discounts, rewards, values,
      bootstrap_value;
};

Unrolls random_unrolls(std::int64_t T, std::int64_t B, std::int64_t A, std::uint64_t seed) {
  ::torch::manual_seed(seed);
  const auto f64 = ::torch::kFloat64;
  Unrolls u;
  u.behaviour_logits = ::torch::randn({T, B, A}, f64);
  u.target_logits = ::torch::randn({T, B, A}, f64);
  u.actions = ::torch::randint(0, A, {T, B}, ::torch::kInt64);
  u.discounts = 0.99 * (::torch::rand({T, B}, f64) > 0.2).to(f64);
  u.rewards = ::torch::randn({T, B}, f64);
  u.values = ::torch::randn({T, B}, f64);
  u.bootstrap_value = ::torch::randn({B}, f64);
  return u;
}

VTraceInputs vtrace_inputs(const Unrolls& u) {
  return {.behaviour_log_probs = action_log_probs(u.behaviour_logits, u.actions),
          .target_log_probs = action_log_probs(u.target_logits, u.actions),
          .discounts = u.discounts,
          .rewards = u.rewards,
          .values = u.values,
          .bootstrap_value = u.bootstrap_value};
}

const std::vector<VTraceOptions>& option_sweep() {
  static const std::vector<VTraceOptions> kOptions = {
      {},  // ρ̄ = c̄ = ρ̄_pg = 1, λ = 1
      {.clip_rho_threshold = kInf, .clip_c_threshold = kInf, .clip_pg_rho_threshold = kInf},
      {.clip_rho_threshold = 2,
       .clip_c_threshold = 0.5,
       .clip_pg_rho_threshold = 1.5,
       .lambda = 0.9},
      {.clip_rho_threshold = 0.5,
       .clip_c_threshold = 1,
       .clip_pg_rho_threshold = 0.7,
       .lambda = 0.5},
      {.lambda = 0},
  };
  return kOptions;
}

TEST(VTrace, MatchesTheDefinition) {
  std::uint64_t seed = 1;
  for (std::int64_t T : {1, 2, 3, 7, 20}) {
    for (std::int64_t B : {1, 4}) {
      for (const VTraceOptions& o : option_sweep()) {
        const Unrolls u = random_unrolls(T, B, 5, seed++);
        const VTraceInputs in = vtrace_inputs(u);
        const Reference want = naive_vtrace(
            T, B, flat(in.target_log_probs - in.behaviour_log_probs), flat(u.discounts),
            flat(u.rewards), flat(u.values), flat(u.bootstrap_value), o);
        const std::string what = "T " + std::to_string(T) + " B " + std::to_string(B) + " rho " +
                                 std::to_string(o.clip_rho_threshold) + " c " +
                                 std::to_string(o.clip_c_threshold) + " lambda " +
                                 std::to_string(o.lambda);

        const VTraceReturns got = vtrace(in, o);
        ASSERT_EQ(got.vs.sizes(), ::torch::IntArrayRef({T, B}));
        ASSERT_EQ(got.vs.scalar_type(), ::torch::kFloat64);
        expect_near(flat(got.vs), want.vs, 1e-12, "vs, float64, " + what);
        expect_near(flat(got.pg_advantages), want.pg_advantages, 1e-12, "pg, float64, " + what);

        // float32 in, float32 out, to float32 accuracy.
        VTraceInputs in32 = in;
        for (::torch::Tensor* t :
             {&in32.behaviour_log_probs, &in32.target_log_probs, &in32.discounts, &in32.rewards,
              &in32.values, &in32.bootstrap_value}) {
          *t = t->to(::torch::kFloat32);
        }
        const VTraceReturns got32 = vtrace(in32, o);
        ASSERT_EQ(got32.vs.scalar_type(), ::torch::kFloat32);
        expect_near(flat(got32.vs), want.vs, 2e-4, "vs, float32, " + what);
        expect_near(flat(got32.pg_advantages), want.pg_advantages, 2e-4, "pg, float32, " + what);
      }
    }
  }
}

// On-policy (π = μ) with thresholds >= 1 and λ = 1, every ρ and c is 1 and v_t is the
// n-step bootstrapped return r_t + γ_t·r_{t+1} + ... + (Π γ)·V(x_T).
TEST(VTrace, OnPolicyGivesBootstrappedReturns) {
  for (std::int64_t T : {1, 5, 20}) {
    const std::int64_t B = 3;
    const Unrolls u = random_unrolls(T, B, 4, 100 + T);
    const ::torch::Tensor log_probs = action_log_probs(u.target_logits, u.actions);
    for (const VTraceOptions& o : {VTraceOptions{}, VTraceOptions{.clip_rho_threshold = kInf,
                                                    .clip_c_threshold = 3,
                                                    .clip_pg_rho_threshold = 1.5}}) {
      const VTraceReturns got = vtrace({.behaviour_log_probs = log_probs,
                                        .target_log_probs = log_probs,
                                        .discounts = u.discounts,
                                        .rewards = u.rewards,
                                        .values = u.values,
                                        .bootstrap_value = u.bootstrap_value},
                                       o);
      const std::vector<double> r = flat(u.rewards), g = flat(u.discounts), v = flat(u.values),
                                bootstrap = flat(u.bootstrap_value);
      std::vector<double> returns(T * B), advantages(T * B);
      for (std::int64_t b = 0; b < B; ++b) {
        double ret = bootstrap[b];
        for (std::int64_t t = T - 1; t >= 0; --t) {
          const double next = ret;
          ret = r[t * B + b] + g[t * B + b] * ret;
          returns[t * B + b] = ret;
          advantages[t * B + b] = r[t * B + b] + g[t * B + b] * next - v[t * B + b];
        }
      }
      expect_near(flat(got.vs), returns, 1e-12, "vs, T " + std::to_string(T));
      expect_near(flat(got.pg_advantages), advantages, 1e-12, "pg, T " + std::to_string(T));
    }
  }
}

TEST(VTrace, EmptyUnrolls) {
  const Unrolls u = random_unrolls(0, 3, 4, 7);
  const VTraceReturns got = vtrace(vtrace_inputs(u));
  EXPECT_EQ(got.vs.sizes(), ::torch::IntArrayRef({0, 3}));
  EXPECT_EQ(got.pg_advantages.sizes(), ::torch::IntArrayRef({0, 3}));
}

TEST(VTrace, ActionLogProbs) {
  const Unrolls u = random_unrolls(3, 2, 5, 11);
  const ::torch::Tensor got = action_log_probs(u.target_logits, u.actions);
  ASSERT_EQ(got.sizes(), ::torch::IntArrayRef({3, 2}));
  const std::vector<double> logits = flat(u.target_logits);
  const ::torch::Tensor actions = u.actions.contiguous();
  for (std::int64_t i = 0; i < 6; ++i) {
    double norm = 0;
    for (int a = 0; a < 5; ++a) norm += std::exp(logits[i * 5 + a]);
    const std::int64_t a = actions.data_ptr<std::int64_t>()[i];
    EXPECT_NEAR(got.view(-1)[i].item<double>(), logits[i * 5 + a] - std::log(norm), 1e-12);
  }
}

// The IMPALA loss of the test, from its definition in double loops, with the V-trace
// targets held fixed (they are constants of the library's loss).
struct LossTerms {
  double policy_gradient = 0, baseline = 0, entropy = 0;
  double total() const { return policy_gradient + baseline + entropy; }
};

LossTerms naive_loss(std::int64_t T, std::int64_t B, std::int64_t A,
                     const std::vector<double>& logits, const std::vector<std::int64_t>& actions,
                     const std::vector<double>& values, const std::vector<double>& vs,
                     const std::vector<double>& pg_advantages, const ImpalaLossOptions& o) {
  LossTerms l;
  for (std::int64_t i = 0; i < T * B; ++i) {
    double norm = 0;
    for (std::int64_t a = 0; a < A; ++a) norm += std::exp(logits[i * A + a]);
    double entropy = 0;
    for (std::int64_t a = 0; a < A; ++a) {
      const double log_p = logits[i * A + a] - std::log(norm);
      entropy -= std::exp(log_p) * log_p;
    }
    const double log_pi = logits[i * A + actions[i]] - std::log(norm);
    l.policy_gradient -= log_pi * pg_advantages[i];
    l.baseline += o.baseline_cost * 0.5 * (vs[i] - values[i]) * (vs[i] - values[i]);
    l.entropy -= o.entropy_cost * entropy;
  }
  return l;
}

TEST(ImpalaLoss, TermsAndFiniteDifferenceGradients) {
  const std::int64_t T = 4, B = 2, A = 3;
  for (const ImpalaLossOptions& o :
       {ImpalaLossOptions{}, ImpalaLossOptions{.baseline_cost = 0.25,
                             .entropy_cost = 0.1,
                             .vtrace = {.clip_rho_threshold = kInf, .lambda = 0.7}}}) {
    Unrolls u = random_unrolls(T, B, A, 21);
    u.target_logits.requires_grad_(true);
    u.values.requires_grad_(true);
    u.behaviour_logits.requires_grad_(true);
    u.bootstrap_value.requires_grad_(true);
    const ImpalaLoss loss = impala_loss({.behaviour_logits = u.behaviour_logits,
                                         .target_logits = u.target_logits,
                                         .actions = u.actions,
                                         .discounts = u.discounts,
                                         .rewards = u.rewards,
                                         .values = u.values,
                                         .bootstrap_value = u.bootstrap_value},
                                        o);
    EXPECT_FALSE(loss.targets.vs.requires_grad());
    EXPECT_FALSE(loss.targets.pg_advantages.requires_grad());

    // The targets are V-trace's, and the terms those of the definition.
    const VTraceReturns targets = vtrace(vtrace_inputs(u), o.vtrace);
    expect_near(flat(loss.targets.vs), flat(targets.vs), 1e-12, "vs");
    expect_near(flat(loss.targets.pg_advantages), flat(targets.pg_advantages), 1e-12, "pg");
    const std::vector<double> vs = flat(targets.vs), pg = flat(targets.pg_advantages);
    const ::torch::Tensor actions_c = u.actions.contiguous();
    const std::vector<std::int64_t> actions(actions_c.data_ptr<std::int64_t>(),
                                            actions_c.data_ptr<std::int64_t>() + T * B);
    std::vector<double> logits = flat(u.target_logits), values = flat(u.values);
    const LossTerms want = naive_loss(T, B, A, logits, actions, values, vs, pg, o);
    EXPECT_NEAR(loss.policy_gradient.item<double>(), want.policy_gradient, 1e-12);
    EXPECT_NEAR(loss.baseline.item<double>(), want.baseline, 1e-12);
    EXPECT_NEAR(loss.entropy.item<double>(), want.entropy, 1e-12);
    EXPECT_NEAR(loss.total.item<double>(), want.total(), 1e-12);

    // Gradients: into the learner's logits and values only.
    const auto grads = ::torch::autograd::grad(
        {loss.total}, {u.target_logits, u.values, u.behaviour_logits, u.bootstrap_value},
        /*grad_outputs=*/{}, /*retain_graph=*/false, /*create_graph=*/false,
        /*allow_unused=*/true);
    for (int i : {2, 3}) {
      EXPECT_TRUE(!grads[i].defined() || grads[i].abs().max().item<double>() == 0) << i;
    }
    // Central differences of the definition, targets fixed.
    const double h = 1e-6;
    auto fd = [&](std::vector<double>& x, std::size_t i) {
      const double x0 = x[i];
      x[i] = x0 + h;
      const double up = naive_loss(T, B, A, logits, actions, values, vs, pg, o).total();
      x[i] = x0 - h;
      const double down = naive_loss(T, B, A, logits, actions, values, vs, pg, o).total();
      x[i] = x0;
      return (up - down) / (2 * h);
    };
    const std::vector<double> grad_logits = flat(grads[0]), grad_values = flat(grads[1]);
    for (std::size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(grad_logits[i], fd(logits, i), 1e-7) << "d total / d logits " << i;
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(grad_values[i], fd(values, i), 1e-7) << "d total / d values " << i;
    }
  }
}

template <typename F>
std::string invalid_argument(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument";
  return "";
}

TEST(VTrace, RejectsMismatchedTensorsAndOptions) {
  const Unrolls u = random_unrolls(5, 3, 4, 31);
  const VTraceInputs good = vtrace_inputs(u);
  EXPECT_NO_THROW(vtrace(good));

  VTraceInputs in = good;
  in.rewards = ::torch::zeros({5, 4}, ::torch::kFloat64);
  std::string m = invalid_argument([&] { vtrace(in); });
  EXPECT_NE(m.find("vtrace: rewards must be a [5, 3] double tensor (the shape, dtype and device "
                   "of values), got [5, 4] double"),
            std::string::npos)
      << m;

  in = good;
  in.discounts = in.discounts.to(::torch::kFloat32);
  m = invalid_argument([&] { vtrace(in); });
  EXPECT_NE(m.find("discounts must be a [5, 3] double"), std::string::npos) << m;
  EXPECT_NE(m.find("got [5, 3] float"), std::string::npos) << m;

  in = good;
  in.bootstrap_value = ::torch::zeros({5, 3}, ::torch::kFloat64);
  m = invalid_argument([&] { vtrace(in); });
  EXPECT_NE(m.find("bootstrap_value must be a [3] double"), std::string::npos) << m;

  in = good;
  in.values = ::torch::zeros({5}, ::torch::kFloat64);
  m = invalid_argument([&] { vtrace(in); });
  EXPECT_NE(m.find("values must be a floating-point [T, B] tensor, got [5] double"),
            std::string::npos)
      << m;

  in = good;
  in.behaviour_log_probs = ::torch::Tensor();
  m = invalid_argument([&] { vtrace(in); });
  EXPECT_NE(m.find("got an undefined tensor"), std::string::npos) << m;

  for (const VTraceOptions& o :
       {VTraceOptions{.clip_rho_threshold = -1}, VTraceOptions{.clip_c_threshold = std::nan("")},
        VTraceOptions{.clip_pg_rho_threshold = -0.5}, VTraceOptions{.lambda = 1.5},
        VTraceOptions{.lambda = -0.1}}) {
    EXPECT_THROW(vtrace(good, o), InvalidArgument);
  }
}

TEST(ImpalaLoss, RejectsMismatchedTensorsAndOptions) {
  const Unrolls u = random_unrolls(5, 3, 4, 41);
  const ImpalaInputs good{.behaviour_logits = u.behaviour_logits,
                          .target_logits = u.target_logits,
                          .actions = u.actions,
                          .discounts = u.discounts,
                          .rewards = u.rewards,
                          .values = u.values,
                          .bootstrap_value = u.bootstrap_value};
  EXPECT_NO_THROW(impala_loss(good));

  ImpalaInputs in = good;
  in.behaviour_logits = ::torch::zeros({5, 3, 6}, ::torch::kFloat64);
  std::string m = invalid_argument([&] { impala_loss(in); });
  EXPECT_NE(m.find("impala_loss: behaviour_logits must be a [5, 3, 4] double tensor"),
            std::string::npos)
      << m;

  in = good;
  in.actions = u.actions.to(::torch::kInt32);
  m = invalid_argument([&] { impala_loss(in); });
  EXPECT_NE(m.find("actions must be an int64 [5, 3] tensor"), std::string::npos) << m;

  in = good;
  in.actions = u.actions.clone();
  in.actions[2][1] = 4;
  m = invalid_argument([&] { impala_loss(in); });
  EXPECT_NE(m.find("actions must be in [0, 4) for logits over 4 actions, got 4"), std::string::npos)
      << m;

  in = good;
  in.values = u.values.to(::torch::kFloat32);
  m = invalid_argument([&] { impala_loss(in); });
  EXPECT_NE(m.find("values must be a [5, 3] double"), std::string::npos) << m;

  in = good;
  in.rewards = ::torch::zeros({4, 3}, ::torch::kFloat64);
  m = invalid_argument([&] { impala_loss(in); });
  EXPECT_NE(m.find("impala_loss: rewards must be a [5, 3] double"), std::string::npos) << m;

  EXPECT_THROW(impala_loss(good, {.baseline_cost = -1}), InvalidArgument);
  EXPECT_THROW(impala_loss(good, {.entropy_cost = kInf}), InvalidArgument);
  EXPECT_THROW(impala_loss(good, {.vtrace = {.lambda = 2}}), InvalidArgument);
}

}  // namespace
}  // namespace replicator::rl
