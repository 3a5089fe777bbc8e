// Buckets, gradient views and the accumulate-grad hooks that reduce a bucket from within
// backward.
//
// Each bucket is one flat tensor on its parameters' device: the gradients of its parameters
// back to back, then one "present" flag per parameter (same dtype). A replica sets a parameter's
// flag when backward accumulates into its gradient; after the reduction a flag is non-zero exactly
// when some replica produced that gradient, so a parameter unused everywhere keeps an
// undefined gradient, without a collective of its own.
//
// Only the replica's own thread issues collectives. Backward runs the hooks of CPU
// parameters on the thread that called it; those of CUDA parameters run on autograd's thread
// for their GPU, which every replica of the process on that GPU shares: a hook there that
// blocked in a collective would keep the other replicas' backward (and so their part of the
// collective) from running. So hooks reduce only in a reducer whose buckets are all on the
// CPU, and only on the replica's thread; otherwise they mark their bucket complete and
// synchronize() reduces it. The bookkeeping the threads share is under a mutex, which no
// collective runs under.
#include "replicator/torch/gradient_reducer.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "replicator/errors.h"
#include "replicator/torch/tensor_collectives.h"

namespace replicator::torch {
namespace {

// `param`'s gradient inside `flat` from element `offset`: laid out as the parameter is
// (channels last stays channels last) where the parameter is dense, so that autograd
// accumulates into it without a strided copy; else row-major.
::torch::Tensor gradient_view(const ::torch::Tensor& flat, std::int64_t offset,
                              const ::torch::Tensor& param) {
  const ::torch::Tensor slice = flat.narrow(0, offset, param.numel());
  if (param.is_non_overlapping_and_dense()) {
    return slice.as_strided(param.sizes(), param.strides());
  }
  return slice.view(param.sizes());
}

// What LibTorch holds autograd nodes by: std::shared_ptr in older releases, c10::intrusive_ptr
// in newer ones (a GPU machine's LibTorch may be older than the virtual environment's).
using NodePointer =
    decltype(::torch::autograd::impl::grad_accumulator(std::declval<const ::torch::Tensor&>()));

}  // namespace

struct GradientReducer::State {
  struct Slot {
    ::torch::Tensor param;
    ::torch::Tensor view;  // the parameter's gradient inside its bucket
    std::size_t bucket = 0;
    std::int64_t index = 0;  // position among its bucket's parameters (flag index)
    bool ready = false;      // its gradient arrived in this backward
  };
  struct Bucket {
    ::torch::Tensor flat;   // gradients, then one flag per parameter
    ::torch::Tensor flags;  // view of the tail of `flat`
    std::vector<std::size_t> slots;
    std::size_t pending = 0;  // slots whose gradient has not arrived in this backward
  };

  ReplicaContext* ctx = nullptr;
  GradientOptions options;
  bool reduce_in_hooks = true;  // overlap, and every bucket on the CPU
  std::mutex mu;  // slots' ready, buckets' flags and pending, next_to_reduce, the counts
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  std::size_t next_to_reduce = 0;
  std::size_t reduced_in_backward = 0;       // in the backward under way
  std::size_t last_reduced_in_backward = 0;  // in the last synchronized step
  std::vector<NodePointer> accumulators;

  // `where`: the caller of synchronize(), or (buckets reduced from within backward) here.
  void reduce(std::size_t b, CallSite where = CallSite::here()) {
    all_reduce(*ctx, buckets[b].flat, {.op = options.op, .timeout = options.timeout}, where);
  }

  // Backward accumulated into slot `i`'s parameter gradient. With reduce_in_hooks, on the
  // replica's thread, reduces every complete bucket at the head of the order.
  void on_accumulated(std::size_t i) {
    std::size_t first = 0, end = 0;  // the buckets this call reduces
    {
      const std::lock_guard lock(mu);
      Slot& s = slots[i];
      Bucket& bucket = buckets[s.bucket];
      const ::torch::NoGradGuard no_grad;
      ::torch::Tensor& grad = s.param.mutable_grad();
      // AccumulateGrad replaces an undefined gradient by a tensor of its own; move it back.
      if (!grad.is_same(s.view)) {
        s.view.copy_(grad);
        grad = s.view;
      }
      bucket.flags[s.index].fill_(1);
      if (s.ready) return;
      s.ready = true;
      if (--bucket.pending != 0 || !reduce_in_hooks || ReplicaContext::current() != ctx) return;
      first = end = next_to_reduce;
      while (end < buckets.size() && buckets[end].pending == 0) ++end;
      next_to_reduce = end;
      reduced_in_backward += end - first;
    }
    for (std::size_t b = first; b < end; ++b) reduce(b);
  }

  // Hooks slot `i`'s gradient accumulator. The accumulator node is kept alive here so
  // that backward uses (and fires) this same node.
  void attach(const std::shared_ptr<State>& self, std::size_t i) {
    const std::weak_ptr<State> weak = self;
    NodePointer accumulator = ::torch::autograd::impl::grad_accumulator(slots[i].param);
    accumulator->add_post_hook(std::make_unique<::torch::autograd::utils::LambdaPostHook>(
        [weak, i](const ::torch::autograd::variable_list& outputs,
                  const ::torch::autograd::variable_list& /*inputs*/) {
          if (const std::shared_ptr<State> state = weak.lock()) state->on_accumulated(i);
          return outputs;
        }));
    if (accumulators.size() <= i) accumulators.resize(i + 1);
    accumulators[i] = std::move(accumulator);
  }

  // Whether slot `i`'s parameter still accumulates through the hooked node. Replacing a
  // parameter's data with data of another tensor type (set_data across devices, or to a
  // sparse or quantized tensor) gives it a new node without our hook.
  bool attached(std::size_t i) const {
    return ::torch::autograd::impl::try_get_grad_accumulator(slots[i].param) == accumulators[i];
  }

  // After backward: no hook runs, but the mutex still orders what they wrote before.
  void finish(CallSite where) {
    std::size_t first = 0;
    {
      const std::lock_guard lock(mu);
      for (std::size_t i = 0; i < slots.size(); ++i) {
        if (!attached(i)) {
          throw Error("GradientReducer: the gradient of a parameter of shape " +
                      c10::str(slots[i].param.sizes()) +
                      " bypassed the reducer: its data was replaced (e.g. by Module::load) "
                      "after the reducer was built and zero_grad() was not called before "
                      "backward");
        }
      }
      last_reduced_in_backward = reduced_in_backward;
      reduced_in_backward = 0;
      first = next_to_reduce;
      next_to_reduce = buckets.size();
    }
    for (std::size_t b = first; b < buckets.size(); ++b) reduce(b, where);
    const std::lock_guard lock(mu);
    const ::torch::NoGradGuard no_grad;
    for (Bucket& bucket : buckets) {
      const ::torch::Tensor present = bucket.flags.ne(0).to(::torch::kCPU);
      const auto* has = present.data_ptr<bool>();
      for (const std::size_t i : bucket.slots) {
        Slot& s = slots[i];
        if (has[s.index]) {
          s.param.mutable_grad() = s.view;
        } else {
          s.param.mutable_grad() = ::torch::Tensor();
        }
        s.ready = false;
      }
      bucket.flags.zero_();
      bucket.pending = bucket.slots.size();
    }
    next_to_reduce = 0;
  }
};

GradientReducer::GradientReducer(ReplicaContext& ctx, std::vector<::torch::Tensor> parameters,
                                 GradientOptions options)
    : state_(std::make_shared<State>()) {
  if (options.bucket_bytes == 0) throw InvalidArgument("GradientReducer: bucket_bytes must be > 0");
  if (options.op != ReduceOp::kMean && options.op != ReduceOp::kSum) {
    throw InvalidArgument("GradientReducer: op must be kMean or kSum, got " +
                          std::string(to_string(options.op)));
  }
  State& s = *state_;
  s.ctx = &ctx;
  s.options = options;
  s.reduce_in_hooks = options.overlap;

  // Reverse order: backward produces the last layers' gradients first.
  std::vector<::torch::Tensor> params;
  for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
    if (!it->defined() || !it->requires_grad()) continue;
    try {
      (void)device_of(it->device());  // throws for devices collectives do not reach
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("GradientReducer: a parameter of shape ") +
                            c10::str(it->sizes()) + ": " + e.what());
    }
    dtype_of(it->scalar_type());  // throws for dtypes collectives do not carry
    if (!it->device().is_cpu()) s.reduce_in_hooks = false;
    params.push_back(*it);
  }

  // Group by dtype and device, closing a bucket when the next parameter would overflow it.
  struct Open {
    c10::ScalarType type;
    c10::Device device;
    std::vector<std::size_t> members;
    std::size_t bytes = 0;
  };
  std::vector<Open> open;
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const c10::ScalarType type = params[p].scalar_type();
    const c10::Device device = params[p].device();
    const std::size_t bytes =
        static_cast<std::size_t>(params[p].numel()) * params[p].element_size();
    auto it = std::find_if(open.begin(), open.end(),
                           [&](const Open& o) { return o.type == type && o.device == device; });
    if (it != open.end() && it->bytes + bytes > options.bucket_bytes) {
      groups.push_back(std::move(it->members));
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) it = open.insert(open.end(), Open{type, device, {}, 0});
    it->members.push_back(p);
    it->bytes += bytes;
  }
  for (Open& o : open) groups.push_back(std::move(o.members));

  const ::torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < groups.size(); ++b) {
    std::int64_t numel = 0;
    for (const std::size_t p : groups[b]) numel += params[p].numel();
    const auto members = static_cast<std::int64_t>(groups[b].size());
    State::Bucket bucket;
    bucket.flat = ::torch::zeros({numel + members}, params[groups[b].front()].options());
    bucket.flags = bucket.flat.narrow(0, numel, members);
    std::int64_t offset = 0;
    for (std::int64_t k = 0; k < members; ++k) {
      const ::torch::Tensor& param = params[groups[b][static_cast<std::size_t>(k)]];
      State::Slot slot;
      slot.param = param;
      slot.view = gradient_view(bucket.flat, offset, param);
      slot.bucket = b;
      slot.index = k;
      offset += param.numel();
      if (param.grad().defined()) slot.view.copy_(param.grad());
      slot.param.mutable_grad() = slot.view;
      bucket.slots.push_back(s.slots.size());
      s.slots.push_back(std::move(slot));
    }
    bucket.pending = bucket.slots.size();
    s.buckets.push_back(std::move(bucket));
  }

  for (std::size_t i = 0; i < s.slots.size(); ++i) s.attach(state_, i);
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::zero_grad() {
  for (std::size_t i = 0; i < state_->slots.size(); ++i) {
    if (!state_->attached(i)) state_->attach(state_, i);
  }
  const ::torch::NoGradGuard no_grad;
  for (State::Bucket& bucket : state_->buckets) bucket.flat.zero_();
  for (State::Slot& slot : state_->slots) {
    if (slot.view.strides() != slot.param.strides()) {
      const ::torch::Tensor& flat = state_->buckets[slot.bucket].flat;
      slot.view =
          gradient_view(flat, slot.view.storage_offset() - flat.storage_offset(), slot.param);
    }
    slot.param.mutable_grad() = slot.view;
  }
}

void GradientReducer::synchronize(CallSite where) { state_->finish(where); }

std::size_t GradientReducer::num_buckets() const { return state_->buckets.size(); }

std::size_t GradientReducer::buckets_reduced_in_backward() const {
  return state_->last_reduced_in_backward;
}

namespace {

std::vector<::torch::Tensor> parameters_of(const ::torch::optim::Optimizer& optimizer) {
  std::vector<::torch::Tensor> all;
  for (const auto& group : optimizer.param_groups()) {
    for (const ::torch::Tensor& p : group.params()) all.push_back(p);
  }
  return all;
}

}  // namespace

ReplicatedOptimizer::ReplicatedOptimizer(ReplicaContext& ctx,
                                         std::shared_ptr<::torch::optim::Optimizer> optimizer,
                                         GradientOptions options)
    : optimizer_(std::move(optimizer)), reducer_(ctx, parameters_of(*optimizer_), options) {}

}  // namespace replicator::torch
