// Replicator: runs the step function of ONE replica on every replica (SPMD).
//
//   replicator::Replicator repl(replicator::Config::from_env());
//   auto loss = repl.run([&](replicator::ReplicaContext& ctx) {
//     ...; ctx.all_reduce(grads, {.op = replicator::ReduceOp::kMean}); ...; return l;
//   });
//   float mean = repl.reduce(replicator::ReduceOp::kMean, loss);
//
// The replicas are persistent threads made by the constructor. With the mpi or gloo
// engine the job spans several processes, each running the same program with the same
// number of local replicas: replica ids are rank * local_replicas + local id, and every
// collective and reduce() covers all of them. Two Replicators are independent. A
// Replicator is driven from one thread at a time: run, per_replica and reduce are not to
// be called concurrently on the same Replicator, nor from a step.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "replicator/config.h"
#include "replicator/dtype.h"
#include "replicator/errors.h"
#include "replicator/per_replica.h"
#include "replicator/rendezvous/key_value.h"
#include "replicator/replica_context.h"

namespace replicator {

class Replicator;

namespace detail {
class Communicator;
class WorkerPool;
class ReduceScratch;
class Tracer;
class Transport;
struct ProcessLayout;

// A Replicator over a transport made by the caller (an engine of its own, or the in-memory
// transport of the tests); config.engine is ignored. The test and benchmark interface, see
// src/runtime/testing.h; throws as Replicator's constructor, InvalidArgument if null.
std::unique_ptr<Replicator> make_replicator(Config config, std::unique_ptr<Transport> transport);

// Registers `prepare` to run once per process, on the thread that constructs the first
// Replicator with more than one local replica (at once, when such a Replicator already
// exists), before that Replicator's replica threads start. For a library above the runtime
// whose code has a one-time setup that must not race between replica threads: the torch
// layer registers the first calls of LibTorch's MKL routines (replicator/torch/cpu_kernels.h).
// Blocks while another thread runs the hooks; what `prepare` throws leaves the Replicator's
// constructor (and `prepare` runs again at the next one).
void on_first_replica_threads(void (*prepare)());

// A non-owning reference to a callable taking ReplicaContext&.
struct StepRef {
  void* object;
  void (*invoke)(void* object, ReplicaContext& ctx);
};
}  // namespace detail

class Replicator {
 public:
  // Starts config.local_replicas replica threads; with the mpi or gloo engine, first joins
  // the other processes (blocks until all have joined, at most config.timeout). Throws
  // ConfigError on a bad config or when processes disagree on local_replicas, and the
  // engine's errors (Timeout, PeerLost) when the rendezvous fails. Creates
  // config.trace.dir and the timeline file when set (ConfigError when it cannot), and
  // while it lives SIGUSR1 dumps its flight recorder (config.trace.signal).
  explicit Replicator(const Config& config = Config{});
  // The same, for a gloo job whose processes meet in `meeting`, a store of the caller's
  // (torch.distributed's, for one), instead of config.gloo.store: config.gloo.store, unless set,
  // becomes meeting->describe(). Throws InvalidArgument when `meeting` is null or the engine is not
  // gloo; otherwise as above.
  Replicator(const Config& config, const std::shared_ptr<rendezvous::KeyValueStore>& meeting);
  // Stops and joins the replica threads; finishes the timeline file. Not to be called
  // while run() is in progress.
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  int num_replicas() const;
  int num_local_replicas() const;
  const Config& config() const { return config_; }

  // Runs fn(ReplicaContext&) once on every local replica and blocks until all return.
  // Returns one result per local replica (PerReplica<void> for a void step).
  // If a step throws, the other replicas are released from their collectives with
  // Aborted, and run rethrows the FIRST failure: a replicator::Error keeps its type, with
  // replica() set; any other exception is wrapped in ReplicaFailed. The Replicator stays
  // usable for the next run. A replica that returns while its peers wait in a
  // collective makes them raise CollectiveMismatch. run cannot interrupt user code that
  // never returns or calls a collective. In a job of several processes a failure also
  // releases the replicas of the other processes (Aborted, or PeerLost if a process
  // died); the job cannot run again after one and should be restarted. The message of a
  // Timeout, CollectiveMismatch, PeerLost or Aborted thrown by run ends with the flight
  // recorder's summary, one line per replica (see README, "When a job fails or hangs").
  template <typename Fn>
  auto run(Fn&& fn) -> PerReplica<std::invoke_result_t<Fn&, ReplicaContext&>> {
    using R = std::invoke_result_t<Fn&, ReplicaContext&>;
    if constexpr (std::is_void_v<R>) {
      auto body = [&fn](ReplicaContext& ctx) { fn(ctx); };
      run_erased(ref(body));
      return PerReplica<void>(num_local_replicas());
    } else {
      std::vector<std::optional<R>> slots(static_cast<std::size_t>(num_local_replicas()));
      auto body = [&fn, &slots](ReplicaContext& ctx) {
        slots[static_cast<std::size_t>(ctx.local_replica_id())].emplace(fn(ctx));
      };
      run_erased(ref(body));
      std::deque<R> values;
      for (auto& slot : slots) values.push_back(std::move(*slot));
      return PerReplica<R>(std::move(values));
    }
  }

  // Builds per-replica state: calls factory(ReplicaContext&) (or factory()) on each
  // replica's own thread, so its memory is first touched there. Blocks; throws as run.
  template <typename Factory>
  auto per_replica(Factory&& factory) {
    if constexpr (std::is_invocable_v<Factory&, ReplicaContext&>) {
      return run(factory);
    } else {
      return run([&factory](ReplicaContext&) { return factory(); });
    }
  }

  // Combines one value per replica with `op` over ALL replicas, in the same canonical tree
  // order as the collectives. T is an element type (float, double, int32_t, int64_t,
  // uint8_t, bfloat16, float16). Throws InvalidArgument if `values` does not hold one value
  // per local replica. In a one-process job it does not block; across processes it is a
  // collective (every process calls it at the same point) and throws as run.
  template <typename T>
  T reduce(ReduceOp op, const PerReplica<T>& values) {
    static_assert(kIsElement<T>, "reduce takes a PerReplica of an element type");
    check_reduce_size(values.size());
    if (num_replicas() != num_local_replicas()) {
      PerReplica<T> reduced = run([&](ReplicaContext& ctx) {
        T value = values[ctx];
        ctx.all_reduce(std::span<T>(&value, 1), {.op = op});
        return value;
      });
      return reduced[0];
    }
    std::vector<const void*> inputs;
    for (const T& v : values) inputs.push_back(&v);
    T out{};
    reduce_erased(op, dtype_of<T>(), inputs.data(), &out);
    return out;
  }

 private:
  friend std::unique_ptr<Replicator> detail::make_replicator(
      Config config, std::unique_ptr<detail::Transport> transport);
  Replicator(Config config, std::unique_ptr<detail::Transport> transport);
  // The constructor with a meeting store, once its config is checked.
  Replicator(const Config& config, std::nullptr_t,
             const std::shared_ptr<rendezvous::KeyValueStore>& meeting);
  template <typename F>
  static detail::StepRef ref(F& f) {
    return {&f, [](void* o, ReplicaContext& ctx) { (*static_cast<F*>(o))(ctx); }};
  }
  void run_erased(detail::StepRef step);
  void check_reduce_size(int size) const;
  // out = tree(op, inputs[0..L)), one element of `dtype` each.
  void reduce_erased(ReduceOp op, DType dtype, const void* const* inputs, void* out) const;

  Config config_;
  std::unique_ptr<detail::Transport> transport_;   // never null; one process: the local one
  std::unique_ptr<detail::ProcessLayout> layout_;  // null in a one-process job
  std::string broken_;  // why a multi-process job can no longer run, if it cannot
  std::unique_ptr<detail::Tracer> tracer_;  // flight recorders, timeline; outlives the threads
  std::unique_ptr<detail::Communicator> comm_;
  std::unique_ptr<detail::WorkerPool> pool_;
  std::unique_ptr<detail::ReduceScratch> reduce_scratch_;  // for reduce(), made once
};

}  // namespace replicator
