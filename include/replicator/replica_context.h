// ReplicaContext: what a step function sees of its replica — its ids, and the collectives.
//
// Every collective BLOCKS until all replicas of the Replicator have made the same call (or
// until its deadline), and every replica must issue the same collectives in the same order
// with the same dtype, element count, root and reduce op. Each throws:
//   InvalidArgument     a local argument is wrong (sizes, root, pairs); thrown before any
//                       communication, so peers see this replica fail and get Aborted;
//   CollectiveMismatch  replicas called different collectives here (raised on every replica,
//                       naming the sequence number and each replica's call);
//   Timeout             the deadline passed (raised on every waiting replica, naming the
//                       replicas that never arrived);
//   Aborted             another replica failed; this one is released;
//   PeerLost            (mpi, gloo engines) a process of the job died or left.
// Results are bitwise identical on every replica. Reductions combine the replicas' values
// in a canonical pairwise tree over replica ids (the same for any thread timing, process
// layout or engine), and
// 16-bit floats accumulate in f32 and round once. Integer sums and products wrap.
// A ReplicaContext is used only by the thread running its replica.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <type_traits>

#include "replicator/call_site.h"
#include "replicator/device.h"
#include "replicator/dtype.h"
#include "replicator/options.h"

namespace replicator {

namespace detail {

class Communicator;
class WorkerPool;

template <typename Range>
concept ElementRange = std::ranges::contiguous_range<Range> && std::ranges::sized_range<Range> &&
    kIsElement<std::remove_cv_t<std::ranges::range_value_t<Range>>>;

template <ElementRange Range>
Buffer as_buffer(Range&& range) {
  using T = std::remove_cv_t<std::ranges::range_value_t<Range>>;
  return Buffer{const_cast<T*>(std::ranges::data(range)), std::ranges::size(range), dtype_of<T>()};
}

}  // namespace detail

class ReplicaContext {
 public:
  int replica_id() const { return replica_id_; }         // global id, 0..R-1
  int num_replicas() const { return num_replicas_; }     // R, over all processes
  int local_replica_id() const { return local_id_; }     // 0..L-1 within this process
  int num_local_replicas() const { return num_local_; }  // L
  // The device this replica is bound to (Config::devices: replica r gets device r mod N; the
  // host when the job has no devices). Collectives take buffers on any device of that kind.
  Device device() const { return device_; }
  // How many replicas of this process (this one included) are bound to device(): 1 unless
  // the process has more replicas than devices (several replicas sharing a GPU), and L on
  // the host. Layers whose collectives run from autograd's backward use it: autograd runs
  // the backward of every graph on one GPU on one thread of its own, so replicas sharing a
  // GPU cannot each block that thread in a collective. Never blocks, never throws.
  int replicas_on_device() const { return replicas_on_device_; }
  // Number of collectives this replica has issued in the current run.
  std::uint64_t sequence() const { return sequence_; }

  // The context of the replica whose step function the calling thread is running, or
  // null outside a step (what layers such as cross-replica batch norm use when no
  // context is passed to them). Never blocks, never throws.
  static ReplicaContext* current() { return current_; }

  // Each collective takes typed contiguous ranges (std::vector<float>, std::span<double>,
  // ...) or, type-erased, Buffers (any dtype, e.g. from tensors); the two forms are the
  // same collective. The last argument, `where`, is the caller's line (call_site.h): leave
  // it to its default, or pass on the one a wrapper of yours was given.

  // Combines `data` over all replicas with `op` and writes the result into `data` on every
  // replica.
  template <detail::ElementRange Range>
  void all_reduce(Range&& data, const ReduceOptions& options = {},
                  CallSite where = CallSite::here()) {
    const Buffer buffer = detail::as_buffer(data);
    all_reduce(std::span<const Buffer>(&buffer, 1), options, where);
  }
  // Fused form: one collective over many buffers (dtypes may differ). Every replica passes
  // the same list of (dtype, count).
  void all_reduce(std::span<const Buffer> buffers, const ReduceOptions& options = {},
                  CallSite where = CallSite::here());

  // output = concatenation of every replica's input in replica-id order;
  // output.size() == input.size() * num_replicas(). `input` may be exactly this replica's
  // block of `output` (in place).
  template <detail::ElementRange In, detail::ElementRange Out>
  void all_gather(In&& input, Out&& output, const CollectiveOptions& options = {},
                  CallSite where = CallSite::here()) {
    all_gather(detail::as_buffer(input), detail::as_buffer(output), options, where);
  }
  void all_gather(Buffer input, Buffer output, const CollectiveOptions& options = {},
                  CallSite where = CallSite::here());

  // The root's output = concatenation of every replica's input in replica-id order
  // (output.size() == input.size() * num_replicas() on the root; the others' output is not
  // touched and may be empty). `input` may be exactly the root's own block of its output.
  template <detail::ElementRange In, detail::ElementRange Out>
  void gather(In&& input, Out&& output, const GatherOptions& options = {},
              CallSite where = CallSite::here()) {
    gather(detail::as_buffer(input), detail::as_buffer(output), options, where);
  }
  void gather(Buffer input, Buffer output, const GatherOptions& options = {},
              CallSite where = CallSite::here());

  // Copies the root replica's `data` into `data` on every replica.
  template <detail::ElementRange Range>
  void broadcast(Range&& data, const BroadcastOptions& options = {},
                 CallSite where = CallSite::here()) {
    const Buffer buffer = detail::as_buffer(data);
    broadcast(std::span<const Buffer>(&buffer, 1), options, where);
  }
  // Fused form: one collective over many buffers.
  void broadcast(std::span<const Buffer> buffers, const BroadcastOptions& options = {},
                 CallSite where = CallSite::here());

  // Reduces `input` (num_replicas() blocks of output.size()) over replicas; replica r
  // receives block r of the result in `output`.
  template <detail::ElementRange In, detail::ElementRange Out>
  void reduce_scatter(In&& input, Out&& output, const ReduceOptions& options = {},
                      CallSite where = CallSite::here()) {
    reduce_scatter(detail::as_buffer(input), detail::as_buffer(output), options, where);
  }
  void reduce_scatter(Buffer input, Buffer output, const ReduceOptions& options = {},
                      CallSite where = CallSite::here());

  // `input` and `output` hold num_replicas() equal blocks; block j of replica r's input
  // becomes block r of replica j's output.
  template <detail::ElementRange In, detail::ElementRange Out>
  void all_to_all(In&& input, Out&& output, const CollectiveOptions& options = {},
                  CallSite where = CallSite::here()) {
    all_to_all(detail::as_buffer(input), detail::as_buffer(output), options, where);
  }
  void all_to_all(Buffer input, Buffer output, const CollectiveOptions& options = {},
                  CallSite where = CallSite::here());

  // For each (source, destination) pair, the destination's `output` receives the source's
  // `input`; a replica that is no pair's destination gets zeros. Every replica passes the
  // same pairs; each replica is the source of at most one pair and the destination of at
  // most one pair.
  template <detail::ElementRange In, detail::ElementRange Out>
  void permute(In&& input, Out&& output, std::span<const PermutePair> pairs,
               const CollectiveOptions& options = {}, CallSite where = CallSite::here()) {
    permute(detail::as_buffer(input), detail::as_buffer(output), pairs, options, where);
  }
  void permute(Buffer input, Buffer output, std::span<const PermutePair> pairs,
               const CollectiveOptions& options = {}, CallSite where = CallSite::here());

  // Returns once every replica has called barrier.
  void barrier(const CollectiveOptions& options = {}, CallSite where = CallSite::here());

 private:
  friend class detail::WorkerPool;
  ReplicaContext(detail::Communicator* comm, int replica_id, int num_replicas, int local_id,
                 int num_local, Device device, int replicas_on_device)
      : comm_(comm),
        replica_id_(replica_id),
        num_replicas_(num_replicas),
        local_id_(local_id),
        num_local_(num_local),
        device_(device),
        replicas_on_device_(replicas_on_device) {}
  // The check every replica makes when its step function returns (its peers must not be
  // waiting in a collective).
  void end_step();

  // Makes `ctx` the calling thread's current() for the scope's lifetime.
  class CurrentScope {
   public:
    explicit CurrentScope(ReplicaContext& ctx) : previous_(current_) { current_ = &ctx; }
    ~CurrentScope() { current_ = previous_; }
    CurrentScope(const CurrentScope&) = delete;
    CurrentScope& operator=(const CurrentScope&) = delete;

   private:
    ReplicaContext* previous_;
  };
  static thread_local ReplicaContext* current_;

  detail::Communicator* comm_;
  int replica_id_;
  int num_replicas_;
  int local_id_;
  int num_local_;
  Device device_;
  int replicas_on_device_;
  std::uint64_t sequence_ = 0;
};

}  // namespace replicator
