// replicator as a torch.distributed backend: a c10d::Backend whose collectives are
// replicator's, checked on every rank (replicator/replica_context.h).
//
// One process is one replica of a gloo job (Config::engine kGloo, one local replica) whose
// processes meet in the c10d Store the backend is handed (torchrun's TCPStore, through
// PrefixStores), so a job needs no store of its own. Each call checks its tensors at once on
// the calling thread (a CUDA, sparse or unsupported-dtype tensor, a reduce op replicator does
// not have: c10::Error, nothing queued) and queues the collective; the backend's own thread
// runs the queue in order, as the collectives of one long replicator step, and completes each
// Work (and its Future) as its collective returns. A blocking call (async_op=False) with
// nothing queued ahead of it runs on the caller's thread instead, the backend's thread parked
// meanwhile, and returns a completed Work. Work::wait rethrows the collective's error
// as its own type (CollectiveMismatch, Timeout, PeerLost, Aborted); after one, the backend is
// failed and every later Work fails with that error, as replicator's transport is poisoned
// and the other ranks are released with Aborted. stop() (the destructor, and the package's
// exit hook through stop_all()) lets the queue drain and ends the thread; later calls fail
// with Aborted.
//
// Sends and receives are not queued: each runs on a worker thread of its own over the
// transport's point-to-point messages (send() below).
//
// The job's Config comes from the environment (Config::from_env: REPLICATOR_TRACE_DIR,
// REPLICATOR_TIMELINE, REPLICATOR_STRAGGLER_AFTER, REPLICATOR_HOST, ...), with the engine,
// rank, world size and one local replica set from c10d's, and the default deadline from the
// process group's timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "replicator/call_site.h"
#include "replicator/config.h"
#include "replicator/replica_context.h"
#include "replicator/replicator.h"
#include "src/engines/transport.h"

namespace replicator::python {

// A collective's handle: completed on the backend's thread; its Future holds the output
// tensors (what DDP's communication hooks read).
class Work final : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs);

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  // Marks the work done (error null) or failed; wakes wait() and completes the Future.
  void complete(const std::exception_ptr& error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class Backend final : public c10d::Backend {
 public:
  // Joins the other ranks through `store` (blocks until all have, at most `timeout`, the
  // default deadline of every collective). Throws replicator's errors (ConfigError,
  // rendezvous::StoreError, Timeout) when the job cannot start.
  Backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
          std::chrono::milliseconds timeout);
  // Lets the queued collectives finish, then stops the backend's thread (stop()).
  ~Backend() override;

  // Lets the queued collectives finish and stops the backend's thread; later collectives
  // fail with Aborted. Idempotent. Blocks while the queue drains (each collective at most
  // its deadline). Call without the GIL: a collective's tensors may be released on that
  // thread.
  void stop();
  // stop() for every backend alive in this process. The package calls it at interpreter
  // exit (atexit), while Python can still take the GIL: a backend's thread that released the
  // last reference to a Python-owned tensor after that would be ended by the interpreter
  // inside a destructor, and the process would abort. Call without the GIL.
  static void stop_all();

  const std::string getBackendName() const override { return "replicator"; }
  uint64_t getSequenceNumberForGroup() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Times `iters` sum all-reduces of `tensor` (contiguous) made from C++ on the backend's
  // thread, as `replicator bench collectives` makes them (ReplicaContext::all_reduce on the
  // tensor's memory, nothing else per call), queued behind the calls before it; returns the
  // seconds they took together. It is how a benchmark weighs what the Python path adds to a
  // call against the same job's C++ calls, in one launch. A collective: every rank calls it
  // with the same iters and tensor shape. Blocks. Throws c10::Error (a tensor the backend
  // cannot take, iters < 1) and what Work::wait throws.
  double time_all_reduce(const at::Tensor& tensor, int iters);

  // Point-to-point messages (detail::PointToPoint, src/engines/transport.h), beside the
  // collectives and not ordered with them: the k-th send with a tag from one rank to another
  // lands in the k-th recv with that tag the other makes from it. Each runs on a thread of its
  // own, so that a send or recv waiting for its peer holds up neither the collectives nor the
  // sends and receives of other tags or peers (one of the same peer, tag and direction starts
  // when the one called before it has ended); its Work completes when the data have moved (a
  // send: once the peer has taken them). Before any data move the two sides compare their
  // calls: a send and a recv of different sizes or dtypes both fail with CollectiveMismatch
  // naming the two calls and lines. A failure (mismatch, the peer lost, the process group's
  // timeout passed) fails the backend as a collective's does. Throws c10::Error at once
  // (nothing sent) for a tensor the backend cannot take or a peer that is not another rank of
  // the group.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

 private:
  // Threads for sends and receives: each blocks until its peer comes, so no task waits behind
  // another; a thread is added whenever every one is busy, and kept for later tasks.
  class Workers {
   public:
    bool submit(std::function<void()> task);  // false, not run: stop() has begun
    bool busy() const;                        // a task queued or running
    void stop();                              // runs what is queued, then joins every thread
   private:
    void loop();
    mutable std::mutex mu_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> tasks_;
    std::vector<std::thread> threads_;
    int idle_ = 0;
    int running_ = 0;
    bool stopping_ = false;
  };

  c10::intrusive_ptr<c10d::Work> point_to_point(bool sending, std::vector<at::Tensor>& tensors,
                                                int peer, int tag);
  // A send's or recv's failure, for the backend's thread to raise inside the step (which
  // releases the other ranks) and for every later call.
  void fail_from_worker(std::exception_ptr error);

  using Op = std::function<void(ReplicaContext&, CallSite)>;
  struct Item {
    c10::intrusive_ptr<Work> work;
    Op op;
    CallSite where;
  };

  // Queues `op`, or with `blocking` (the caller waits for it anyway) runs it on the calling
  // thread when nothing is queued ahead of it.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* title,
                                         std::vector<at::Tensor> outputs, bool blocking, Op op);
  bool next(Item& item);  // false: stop
  void serve();

  std::unique_ptr<Replicator> replicator_;
  detail::Transport* transport_ = nullptr;  // replicator_'s
  detail::PointToPoint* p2p_ = nullptr;     // transport_'s
  std::chrono::milliseconds timeout_;       // of a send or recv
  Workers workers_;
  // Per peer, tag and direction, the end of the last send or recv: the next one starts after
  // it, so that they are posted in the order they were called and the k-th meets the k-th of
  // the peer's (the worker threads would otherwise post them in any order). Guarded by mu_.
  struct P2pKey {
    bool sending;
    int peer;
    int tag;
    // clang-tidy 14 reads the defaulted comparison as a 0 compared with a pointer.
    auto operator<=>(const P2pKey&) const = default;  // NOLINT(modernize-use-nullptr)
  };
  std::map<P2pKey, std::shared_future<void>> p2p_last_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::exception_ptr failure_;     // the error that ended the backend's thread
  std::exception_ptr thrown_;      // a collective's error on a caller's thread, for the step
  ReplicaContext* ctx_ = nullptr;  // the step's context while the backend's thread serves
  bool idle_ = false;              // the backend's thread waits in next()
  bool inline_ = false;            // a caller runs a collective on ctx_
  uint64_t issued_ = 0;
  std::thread thread_;
};

}  // namespace replicator::python
