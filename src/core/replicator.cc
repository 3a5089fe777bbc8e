#include "replicator/replicator.h"

#include <string>
#include <thread>

#include "src/collectives/cross_process.h"
#include "src/collectives/reduce_kernel.h"
#include "src/core/local_group.h"
#include "src/core/worker_pool.h"
#if defined(REPLICATOR_HAVE_MPI)
#include "src/engines/mpi/mpi_transport.h"
#endif
#if defined(REPLICATOR_HAVE_GLOO)
#include "src/engines/gloo/gloo_transport.h"
#endif

namespace replicator {
namespace {

std::unique_ptr<detail::Transport> make_transport(const Config& config) {
  switch (config.engine) {
    case Engine::kLocal:
      return nullptr;
    case Engine::kMpi:
#if defined(REPLICATOR_HAVE_MPI)
      return detail::make_mpi_transport(config.local_replicas);
#else
      break;
#endif
    case Engine::kGloo:
#if defined(REPLICATOR_HAVE_GLOO)
      return detail::make_gloo_transport({.rank = config.rank,
                                          .size = config.world_size,
                                          .store = config.store,
                                          .host = config.host,
                                          .job = config.job,
                                          .lanes = config.local_replicas,
                                          .timeout = config.timeout});
#else
      break;
#endif
  }
  throw ConfigError("engine " + std::string(to_string(config.engine)) +
                    " is not part of this build");
}

// Every process must run the same number of local replicas: ask them all.
void check_same_local_replicas(detail::Transport& transport, int local,
                               std::chrono::milliseconds timeout) {
  const int P = transport.size();
  std::vector<std::int32_t> theirs(static_cast<std::size_t>(P), local);
  std::vector<detail::SendOp> sends;
  std::vector<detail::RecvOp> recvs;
  const std::int32_t mine = local;
  for (int q = 0; q < P; ++q) {
    if (q == transport.rank()) continue;
    sends.push_back({q, &mine, sizeof mine});
    recvs.push_back({q, &theirs[static_cast<std::size_t>(q)], sizeof mine});
  }
  transport.exchange(0, sends, recvs, detail::Transport::Clock::now() + timeout);
  for (int q = 0; q < P; ++q) {
    if (theirs[static_cast<std::size_t>(q)] != local) {
      throw ConfigError("process " + std::to_string(q) + " runs " +
                        std::to_string(theirs[static_cast<std::size_t>(q)]) +
                        " local replicas but process " + std::to_string(transport.rank()) +
                        " runs " + std::to_string(local) +
                        "; every process must run the same number (--local-replicas)");
    }
  }
}

}  // namespace

Replicator::Replicator(Config config)
    : Replicator(config, (config.validate(), make_transport(config))) {}

Replicator::Replicator(Config config, std::unique_ptr<detail::Transport> transport)
    : config_(std::move(config)), transport_(std::move(transport)) {
  config_.validate();
  const int L = config_.local_replicas;
  if (transport_ && transport_->size() > 1) {
    check_same_local_replicas(*transport_, L, config_.timeout);
    layout_ = std::make_unique<detail::ProcessLayout>();
    layout_->transport = transport_.get();
    layout_->rank = transport_->rank();
    layout_->processes = transport_->size();
    layout_->local = L;
    for (int q = 0; q < layout_->processes; ++q) {
      layout_->subtrees.push_back(detail::canonical_subtrees(q * L, (q + 1) * L));
      layout_->max_subtrees =
          std::max(layout_->max_subtrees, static_cast<int>(layout_->subtrees.back().size()));
    }
  }
  // Waiting replicas spin only while every replica thread on this host has a core.
  const auto threads_on_host = static_cast<unsigned>(L) * static_cast<unsigned>(config_.host_processes);
  const std::chrono::microseconds spin =
      threads_on_host <= std::max(1u, std::thread::hardware_concurrency())
          ? config_.spin
          : std::chrono::microseconds(0);
  group_ = std::make_unique<detail::LocalGroup>(L, config_.timeout, spin, layout_.get());
  pool_ = std::make_unique<detail::WorkerPool>(*group_, layout_ ? layout_->rank * L : 0,
                                               num_replicas(), L, spin);
  reduce_scratch_ = std::make_unique<detail::ReduceScratch>(L);
}

Replicator::~Replicator() = default;

int Replicator::num_replicas() const {
  return layout_ ? layout_->replicas() : config_.local_replicas;
}
int Replicator::num_local_replicas() const { return config_.local_replicas; }

void Replicator::run_erased(detail::StepRef step) {
  if (!broken_.empty()) {
    throw Aborted("this job can no longer run: an earlier run failed (" + broken_ +
                  "); restart all its processes",
                  std::nullopt);
  }
  try {
    pool_->run(step);
  } catch (const std::exception& e) {
    // The other processes may be waiting for this one: release them.
    if (layout_) {
      broken_ = e.what();
      transport_->abort(e.what());
    }
    throw;
  }
}

void Replicator::check_reduce_size(int size) const {
  if (size != num_local_replicas()) {
    throw InvalidArgument("reduce: expected one value per local replica (" +
                          std::to_string(num_local_replicas()) + "), got " + std::to_string(size));
  }
}

void Replicator::reduce_erased(ReduceOp op, DType dtype, const void* const* inputs,
                               void* out) const {
  detail::tree_reduce(op, dtype, inputs, num_local_replicas(), &out, 1, 1,
                      static_cast<std::size_t>(num_local_replicas()), *reduce_scratch_);
}

}  // namespace replicator
