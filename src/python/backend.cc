#include "src/python/backend.h"

#include <ATen/Functions.h>

#include <memory>
#include <optional>
#include <span>
#include <utility>

#include "replicator/errors.h"
#include "replicator/torch/tensor_collectives.h"
#include "src/engines/make_transport.h"
#include "src/python/python_site.h"

namespace replicator::python {
namespace {

using Tensors = std::vector<at::Tensor>;

// torch.distributed's Store as the gloo engine's meeting place.
class C10dMeeting final : public rendezvous::KeyValueStore {
 public:
  explicit C10dMeeting(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  std::string describe() const override { return "c10d store (torch.distributed)"; }
  void set(const std::string& key, const std::vector<char>& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::vector<uint8_t> value = store_->get(key);
    return {value.begin(), value.end()};
  }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// What a collective can take: dense CPU tensors of a dtype replicator carries.
void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "replicator backend: ", what, " got an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "replicator backend: ", what, " takes CPU tensors, got one on ",
              t.device().str(),
              " (route other devices to another backend, e.g. "
              "init_process_group(\"cpu:replicator,cuda:nccl\"))");
  TORCH_CHECK(t.layout() == c10::kStrided, "replicator backend: ", what,
              " takes dense tensors, got layout ", t.layout());
  try {
    (void)torch::dtype_of(t.scalar_type());
  } catch (const InvalidArgument& e) {
    TORCH_CHECK(false, "replicator backend: ", what, ": ", e.what());
  }
}

void check_tensors(const Tensors& ts, const char* what) {
  for (const auto& t : ts) check_tensor(t, what);
}

// The one tensor of a call's list (one device per process).
const at::Tensor& single(const Tensors& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "replicator backend: ", what, " takes one tensor per process, got ",
              ts.size());
  check_tensor(ts[0], what);
  return ts[0];
}

ReduceOp reduce_op(const c10d::ReduceOp& op, const char* what) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return ReduceOp::kMean;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProd;
    case c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    default:
      TORCH_CHECK(false, "replicator backend: ", what,
                  " takes SUM, AVG, PRODUCT, MIN or MAX, not reduce op ",
                  static_cast<int>(static_cast<c10d::ReduceOp::RedOpType>(op)));
  }
}

Deadline deadline(std::chrono::milliseconds timeout) {
  if (timeout == c10d::kUnsetTimeout || timeout.count() <= 0) return std::nullopt;
  return timeout;
}

// A contiguous tensor with the data of `t` (t itself when it is contiguous); copy_back writes
// it into `t` after an in-place collective.
struct Dense {
  at::Tensor original;
  at::Tensor dense;
  explicit Dense(const at::Tensor& t) : original(t), dense(t.contiguous()) {}
  Buffer buffer() const { return torch::buffer_of(dense); }
  void copy_back() const {
    if (!dense.is_same(original)) original.copy_(dense);
  }
};

using torch::buffer_of;

// All `ts` have the shape and dtype of ts[0]; their concatenation along a new first dimension.
at::Tensor stacked(const Tensors& ts, const char* what) {
  check_tensors(ts, what);
  for (const auto& t : ts) {
    TORCH_CHECK(t.sizes() == ts[0].sizes() && t.scalar_type() == ts[0].scalar_type(),
                "replicator backend: ", what, " takes tensors of one shape and dtype");
  }
  return at::stack(ts).contiguous();
}

void check_list(const Tensors& ts, int size, const at::Tensor& like, const char* what) {
  TORCH_CHECK(static_cast<int>(ts.size()) == size, "replicator backend: ", what, " takes ", size,
              " tensors (one per rank), got ", ts.size());
  for (const auto& t : ts) {
    check_tensor(t, what);
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(),
                "replicator backend: ", what, " takes tensors of ", like.numel(), " elements of ",
                like.scalar_type(), " in its list, got ", t.numel(), " of ", t.scalar_type());
  }
}

std::exception_ptr stopped_error() {
  return std::make_exception_ptr(
      Aborted("replicator backend: stopped (its process group was destroyed, or the interpreter is "
              "exiting)",
              std::nullopt));
}

// The backends alive in this process, for stop_all().
struct Live {
  std::mutex mu;
  std::vector<Backend*> backends;
};
Live& live() {
  static Live* const kLive = new Live;  // never destroyed: backends may outlive static destructors
  return *kLive;
}

}  // namespace

Work::Work(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, title),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

void Work::complete(const std::exception_ptr& error) {
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

Backend::Backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                 std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size) {
  Config config = Config::from_env();
  config.engine = Engine::kGloo;
  config.gloo.rank = rank;
  config.gloo.world_size = size;
  config.local_replicas = 1;
  if (timeout.count() > 0) config.timeout = timeout;
  config.elastic.generation = -1;
  config.elastic.heartbeat = std::chrono::milliseconds(0);
  auto meeting = std::make_shared<C10dMeeting>(store);
  config.gloo.store = meeting->describe();
  config.validate();
  timeout_ = config.timeout;
  // The transport made here, not by the Replicator, so that sends and receives can reach
  // its point-to-point messages.
  std::unique_ptr<detail::Transport> transport = detail::make_transport(config, meeting);
  transport_ = transport.get();
  p2p_ = transport->point_to_point();
  replicator_ = detail::make_replicator(config, std::move(transport));
  thread_ = std::thread([this] { serve(); });
  Live& l = live();
  std::lock_guard lock(l.mu);
  l.backends.push_back(this);
}

Backend::~Backend() {
  {
    Live& l = live();
    std::lock_guard lock(l.mu);
    std::erase(l.backends, this);
  }
  stop();
}

void Backend::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  ready_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Sends and receives still waiting for their peers would wait until the timeout: they are
  // released (Aborted), and the peers with them.
  if (workers_.busy()) {
    transport_->abort(
        "replicator backend: stopped with sends or receives still waiting for "
        "their peers (destroy the process group after waiting for them)",
        std::nullopt);
  }
  workers_.stop();
  std::lock_guard lock(mu_);
  if (!failure_) failure_ = stopped_error();
}

bool Backend::Workers::submit(std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  tasks_.push_back(std::move(task));
  // Each idle thread takes one queued task; more tasks than that get a thread of their own.
  if (static_cast<int>(tasks_.size()) > idle_) {
    threads_.emplace_back([this] { loop(); });
  } else {
    ready_.notify_one();
  }
  return true;
}

bool Backend::Workers::busy() const {
  std::lock_guard lock(mu_);
  return running_ > 0 || !tasks_.empty();
}

void Backend::Workers::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void Backend::Workers::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    ++running_;
    lock.unlock();
    task();
    task = nullptr;
    lock.lock();
    --running_;
  }
}

void Backend::fail_from_worker(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (failure_ || thrown_) return;
    thrown_ = std::move(error);
  }
  ready_.notify_all();
}

void Backend::stop_all() {
  Live& l = live();
  std::lock_guard lock(l.mu);
  for (Backend* b : l.backends) b->stop();
}

uint64_t Backend::getSequenceNumberForGroup() {
  std::lock_guard lock(mu_);
  return issued_;
}

c10::intrusive_ptr<c10d::Work> Backend::enqueue(c10d::OpType type, const char* title,
                                                std::vector<at::Tensor> outputs, bool blocking,
                                                Op op) {
  auto work = c10::make_intrusive<Work>(getRank(), type, title, std::move(outputs));
  const CallSite where = python_caller();
  std::unique_lock lock(mu_);
  ++issued_;
  if (failure_ || thrown_ || stopping_) {
    work->complete(failure_ ? failure_ : thrown_ ? thrown_ : stopped_error());
    return work;
  }
  if (blocking && queue_.empty() && idle_ && ctx_ != nullptr && !inline_) {
    // Nothing ahead of it and the backend's thread parked: the caller runs the collective
    // itself (the lane has one user at a time) and saves two thread hand-offs.
    inline_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      op(*ctx_, where);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    inline_ = false;
    // A failure goes to the backend's thread, which raises it inside the step, so that the
    // Replicator releases the other processes as for any failed step.
    if (error) thrown_ = error;
    // The backend's thread waits for a failure or for work it may start: it is woken only
    // for those, not after every call made here (a wake-up per call took a core from the
    // caller, or from the other processes, on a busy host).
    const bool wake = error || !queue_.empty();
    lock.unlock();
    if (wake) ready_.notify_all();
    work->complete(error);
    return work;
  }
  queue_.push_back(Item{work, std::move(op), where});
  lock.unlock();
  ready_.notify_all();
  return work;
}

bool Backend::next(Item& item) {
  std::unique_lock lock(mu_);
  idle_ = true;
  ready_.wait(lock, [&] { return stopping_ || thrown_ || (!queue_.empty() && !inline_); });
  idle_ = false;
  if (thrown_) std::rethrow_exception(thrown_);
  if (queue_.empty()) return false;
  item = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void Backend::serve() {
  std::exception_ptr failure;
  try {
    replicator_->run([this](ReplicaContext& ctx) {
      {
        std::lock_guard lock(mu_);
        ctx_ = &ctx;
      }
      Item item;
      while (next(item)) {
        // The op's tensors are released before its Work completes: once it has, the caller
        // may go on and Python may be finalizing.
        const c10::intrusive_ptr<Work> work = std::move(item.work);
        Op op = std::move(item.op);
        const CallSite where = item.where;
        item = Item{};
        std::exception_ptr error;
        try {
          op(ctx, where);
        } catch (...) {
          error = std::current_exception();
        }
        op = nullptr;
        work->complete(error);
        if (error) std::rethrow_exception(error);
      }
    });
    return;
  } catch (...) {
    failure = std::current_exception();
  }
  std::deque<Item> left;
  {
    std::lock_guard lock(mu_);
    failure_ = failure;
    ctx_ = nullptr;
    idle_ = false;
    left.swap(queue_);
  }
  for (auto& item : left) item.work->complete(failure);
}

// ---- collectives ----------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> Backend::broadcast(Tensors& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  check_tensors(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(),
              "replicator backend: broadcast from rank ", opts.rootRank, " of ", getSize());
  const BroadcastOptions options{.root = static_cast<int>(opts.rootRank),
                                 .timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::BROADCAST, "replicator:broadcast", tensors, !opts.asyncOp,
                 [tensors, options](ReplicaContext& ctx, CallSite where) {
                   torch::broadcast(ctx, tensors, options, where);
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(Tensors& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  check_tensors(tensors, "all_reduce");
  const ReduceOptions options{.op = reduce_op(opts.reduceOp, "all_reduce"),
                              .timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::ALLREDUCE, "replicator:all_reduce", tensors, !opts.asyncOp,
                 [tensors, options](ReplicaContext& ctx, CallSite where) {
                   torch::all_reduce(ctx, tensors, options, where);
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor tensor = single(tensors, "reduce");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(),
              "replicator backend: reduce to rank ", opts.rootRank, " of ", getSize());
  const ReduceOptions options{.op = reduce_op(opts.reduceOp, "reduce"),
                              .timeout = deadline(opts.timeout)};
  // Every rank reduces; only the root's tensor takes the result (the others keep theirs).
  const bool root = opts.rootRank == getRank();
  return enqueue(c10d::OpType::REDUCE, "replicator:reduce", tensors, !opts.asyncOp,
                 [tensor, options, root](ReplicaContext& ctx, CallSite where) {
                   torch::all_reduce(ctx, root ? tensor : tensor.clone(), options, where);
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  const at::Tensor input = single(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1, "replicator backend: all_gather takes one output list");
  check_list(outputs[0], getSize(), input, "all_gather");
  const CollectiveOptions options{.timeout = deadline(opts.timeout)};
  Tensors out = outputs[0];
  return enqueue(
      c10d::OpType::ALLGATHER, "replicator:all_gather", out, !opts.asyncOp,
      [input, out, options](ReplicaContext& ctx, CallSite where) {
        const at::Tensor in = input.contiguous();
        at::Tensor all = at::empty({static_cast<int64_t>(out.size()), in.numel()}, in.options());
        ctx.all_gather(buffer_of(in), buffer_of(all), options, where);
        for (std::size_t r = 0; r < out.size(); ++r) {
          out[r].copy_(all[static_cast<int64_t>(r)].view(out[r].sizes()));
        }
      });
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  check_tensor(input, "all_gather_into_tensor");
  check_tensor(output, "all_gather_into_tensor");
  TORCH_CHECK(
      output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
      "replicator backend: all_gather_into_tensor's output holds world size (", getSize(),
      ") times its input's elements, of its dtype");
  const CollectiveOptions options{.timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "replicator:all_gather_into_tensor", {output},
                 !opts.asyncOp, [input, output, options](ReplicaContext& ctx, CallSite where) {
                   const at::Tensor in = input.contiguous();
                   const Dense out(output);
                   ctx.all_gather(buffer_of(in), out.buffer(), options, where);
                   out.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(std::vector<Tensors>& outputs,
                                                            Tensors& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "replicator backend: all_gather_coalesced takes an output list per input");
  c10::intrusive_ptr<c10d::Work> last;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<Tensors> one{outputs[i]};
    Tensors in{inputs[i]};
    last = allgather(one, in, opts);
  }
  return last ? last : barrier(c10d::BarrierOptions{.timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "replicator backend: all_gather_into_tensor_coalesced takes an output per input");
  c10::intrusive_ptr<c10d::Work> last;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    last = _allgather_base(outputs[i], inputs[i], opts);
  return last ? last : barrier(c10d::BarrierOptions{.timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                               const c10d::GatherOptions& opts) {
  const at::Tensor input = single(inputs, "gather");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(),
              "replicator backend: gather to rank ", opts.rootRank, " of ", getSize());
  const bool root = opts.rootRank == getRank();
  Tensors out;
  if (root) {
    TORCH_CHECK(outputs.size() == 1,
                "replicator backend: gather takes one output list on the root");
    check_list(outputs[0], getSize(), input, "gather");
    out = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "replicator backend: gather takes no output list except on the root");
  }
  const GatherOptions options{.root = static_cast<int>(opts.rootRank),
                              .timeout = deadline(opts.timeout)};
  const int size = getSize();
  return enqueue(c10d::OpType::GATHER, "replicator:gather", out, !opts.asyncOp,
                 [input, out, options, root, size](ReplicaContext& ctx, CallSite where) {
                   const at::Tensor in = input.contiguous();
                   at::Tensor all = root ? at::empty({size, in.numel()}, in.options())
                                         : at::empty({0}, in.options());
                   ctx.gather(buffer_of(in), buffer_of(all), options, where);
                   for (std::size_t r = 0; r < out.size(); ++r) {
                     out[r].copy_(all[static_cast<int64_t>(r)].view(out[r].sizes()));
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ScatterOptions& opts) {
  const at::Tensor output = single(outputs, "scatter");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(),
              "replicator backend: scatter from rank ", opts.rootRank, " of ", getSize());
  const bool root = opts.rootRank == getRank();
  at::Tensor all;
  if (root) {
    TORCH_CHECK(inputs.size() == 1, "replicator backend: scatter takes one input list on the root");
    check_list(inputs[0], getSize(), output, "scatter");
    all = stacked(inputs[0], "scatter").view({getSize(), output.numel()});
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "replicator backend: scatter takes no input list except on the root");
    all = at::empty({getSize(), output.numel()}, output.options());
  }
  // The root's whole list goes to every rank, which keeps its own row.
  const BroadcastOptions options{.root = static_cast<int>(opts.rootRank),
                                 .timeout = deadline(opts.timeout)};
  const int64_t rank = getRank();
  return enqueue(c10d::OpType::SCATTER, "replicator:scatter", {output}, !opts.asyncOp,
                 [all, output, options, rank](ReplicaContext& ctx, CallSite where) {
                   torch::broadcast(ctx, all, options, where);
                   output.copy_(all[rank].view(output.sizes()));
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(Tensors& outputs,
                                                       std::vector<Tensors>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  const at::Tensor output = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "replicator backend: reduce_scatter takes one input list");
  check_list(inputs[0], getSize(), output, "reduce_scatter");
  const at::Tensor all = stacked(inputs[0], "reduce_scatter");
  const ReduceOptions options{.op = reduce_op(opts.reduceOp, "reduce_scatter"),
                              .timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::REDUCE_SCATTER, "replicator:reduce_scatter", {output}, !opts.asyncOp,
                 [all, output, options](ReplicaContext& ctx, CallSite where) {
                   const Dense out(output);
                   ctx.reduce_scatter(buffer_of(all), out.buffer(), options, where);
                   out.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "reduce_scatter_tensor");
  check_tensor(output, "reduce_scatter_tensor");
  TORCH_CHECK(
      input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
      "replicator backend: reduce_scatter_tensor's input holds world size (", getSize(),
      ") times its output's elements, of its dtype");
  const ReduceOptions options{.op = reduce_op(opts.reduceOp, "reduce_scatter_tensor"),
                              .timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "replicator:reduce_scatter_tensor", {output},
                 !opts.asyncOp, [input, output, options](ReplicaContext& ctx, CallSite where) {
                   const at::Tensor in = input.contiguous();
                   const Dense out(output);
                   ctx.reduce_scatter(buffer_of(in), out.buffer(), options, where);
                   out.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "replicator backend: reduce_scatter_tensor_coalesced takes an output per input");
  c10::intrusive_ptr<c10d::Work> last;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    last = _reduce_scatter_base(outputs[i], inputs[i], opts);
  }
  return last ? last : barrier(c10d::BarrierOptions{.timeout = opts.timeout});
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const c10d::AllToAllOptions& opts) {
  check_tensor(input, "all_to_all_single");
  check_tensor(output, "all_to_all_single");
  const int64_t size = getSize();
  const auto even = [&](const std::vector<int64_t>& splits, const at::Tensor& t) {
    if (splits.empty()) return true;
    for (int64_t s : splits) {
      if (s * size != t.size(0)) return false;
    }
    return true;
  };
  TORCH_CHECK(even(output_splits, output) && even(input_splits, input),
              "replicator backend: all_to_all_single takes equal splits only (each rank "
              "sends and receives the same number of rows)");
  TORCH_CHECK(input.dim() > 0 && input.size(0) % size == 0 && output.numel() == input.numel() &&
                  output.scalar_type() == input.scalar_type(),
              "replicator backend: all_to_all_single takes input and output of the same size and "
              "dtype, with a first dimension divisible by the world size (",
              size, ")");
  const CollectiveOptions options{.timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::ALLTOALL_BASE, "replicator:all_to_all_single", {output},
                 !opts.asyncOp, [input, output, options](ReplicaContext& ctx, CallSite where) {
                   const at::Tensor in = input.contiguous();
                   const Dense out(output);
                   ctx.all_to_all(buffer_of(in), out.buffer(), options, where);
                   out.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(Tensors& outputs, Tensors& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(!inputs.empty(), "replicator backend: all_to_all takes one tensor per rank");
  check_list(inputs, getSize(), inputs[0], "all_to_all");
  check_list(outputs, getSize(), inputs[0], "all_to_all");
  const at::Tensor all = stacked(inputs, "all_to_all");
  const CollectiveOptions options{.timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::ALLTOALL, "replicator:all_to_all", outputs, !opts.asyncOp,
                 [all, outputs, options](ReplicaContext& ctx, CallSite where) {
                   at::Tensor got = at::empty_like(all);
                   ctx.all_to_all(buffer_of(all), buffer_of(got), options, where);
                   for (std::size_t r = 0; r < outputs.size(); ++r) {
                     outputs[r].copy_(got[static_cast<int64_t>(r)].view(outputs[r].sizes()));
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  const CollectiveOptions options{.timeout = deadline(opts.timeout)};
  return enqueue(c10d::OpType::BARRIER, "replicator:barrier", {}, !opts.asyncOp,
                 [options](ReplicaContext& ctx, CallSite where) { ctx.barrier(options, where); });
}

double Backend::time_all_reduce(const at::Tensor& tensor, int iters) {
  check_tensor(tensor, "time_all_reduce");
  TORCH_CHECK(tensor.is_contiguous(),
              "replicator backend: time_all_reduce takes a contiguous tensor");
  TORCH_CHECK(iters >= 1, "replicator backend: time_all_reduce takes iters >= 1, got ", iters);
  auto seconds = std::make_shared<double>(0.0);
  const c10::intrusive_ptr<c10d::Work> work = enqueue(
      c10d::OpType::ALLREDUCE, "replicator:time_all_reduce", {tensor}, true,
      [tensor, iters, seconds](ReplicaContext& ctx, CallSite where) {
        const Buffer buffer = buffer_of(tensor);
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) ctx.all_reduce(std::span(&buffer, 1), {}, where);
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
  work->wait();
  return *seconds;
}

c10::intrusive_ptr<c10d::Work> Backend::send(Tensors& tensors, int dst, int tag) {
  return point_to_point(true, tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::recv(Tensors& tensors, int src, int tag) {
  return point_to_point(false, tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> Backend::point_to_point(bool sending, Tensors& tensors, int peer,
                                                       int tag) {
  const char* name = sending ? "send" : "recv";
  const at::Tensor tensor = single(tensors, name);
  TORCH_CHECK(peer >= 0 && peer < getSize() && peer != getRank(), "replicator backend: ", name,
              sending ? " to" : " from", " rank ", peer, ", but this is rank ", getRank(), " of ",
              getSize(), "; a send or recv goes to another rank of the group");
  TORCH_CHECK(p2p_ != nullptr,
              "replicator backend: this job's transport has no point-to-point "
              "messages");
  const CallSite where = python_caller();
  auto work =
      c10::make_intrusive<Work>(getRank(), sending ? c10d::OpType::SEND : c10d::OpType::RECV,
                                sending ? "replicator:send" : "replicator:recv", Tensors{tensor});
  auto done = std::make_shared<std::promise<void>>();
  std::shared_future<void> before;  // the previous send or recv of the same key
  {
    std::lock_guard lock(mu_);
    if (failure_ || thrown_ || stopping_) {
      work->complete(failure_ ? failure_ : thrown_ ? thrown_ : stopped_error());
      return work;
    }
    if (p2p_last_.size() > 1024) {  // forget the keys whose last call has ended
      std::erase_if(p2p_last_, [](const auto& entry) {
        return entry.second.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      });
    }
    std::shared_future<void>& last = p2p_last_[P2pKey{sending, peer, tag}];
    before = last;
    last = done->get_future().share();
  }
  const DType dtype = torch::dtype_of(tensor.scalar_type());
  std::string text = std::string(name) + "(" + std::string(to_string(dtype)) + " x " +
                     std::to_string(tensor.numel()) + (sending ? ", to rank " : ", from rank ") +
                     std::to_string(peer) + ", tag " + std::to_string(tag) + ")";
  if (where.known()) text += " at " + to_string(where);
  detail::PointToPoint::Call call{.bytes = static_cast<std::size_t>(tensor.nbytes()),
                                  .kind = static_cast<std::uint32_t>(dtype),
                                  .text = std::move(text)};
  const auto deadline = detail::Transport::Clock::now() + timeout_;
  // The tag as the transport takes it (its low 32 bits, unsigned).
  const auto slot_tag = static_cast<std::uint64_t>(static_cast<std::uint32_t>(tag));
  const bool started = workers_.submit([this, work, sending, held = tensor, peer, slot_tag,
                                        call = std::move(call), done, before, deadline]() mutable {
    if (before.valid()) before.wait();
    std::exception_ptr error;
    try {
      const at::Tensor dense = held.contiguous();
      if (sending) {
        p2p_->send(peer, slot_tag, call, dense.data_ptr(), deadline);
      } else {
        p2p_->recv(peer, slot_tag, call, dense.data_ptr(), deadline);
        if (!dense.is_same(held)) held.copy_(dense);
      }
    } catch (...) {
      error = std::current_exception();
    }
    held = at::Tensor();  // released before the Work completes (see serve())
    if (error) fail_from_worker(error);
    done->set_value();
    work->complete(error);
  });
  if (!started) {
    done->set_value();
    work->complete(stopped_error());
  }
  return work;
}

}  // namespace replicator::python
