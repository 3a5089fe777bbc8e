#include "replicator/replicator.h"

#include <string>

#include "src/collectives/reduce_kernel.h"
#include "src/core/local_group.h"
#include "src/core/worker_pool.h"

namespace replicator {

Replicator::Replicator(Config config) : config_(std::move(config)) {
  config_.validate();
  group_ = std::make_unique<detail::LocalGroup>(config_.local_replicas, config_.timeout,
                                                config_.spin);
  pool_ = std::make_unique<detail::WorkerPool>(*group_, 0, config_.local_replicas,
                                               config_.local_replicas, config_.spin);
  reduce_scratch_ = std::make_unique<detail::ReduceScratch>(config_.local_replicas);
}

Replicator::~Replicator() = default;

int Replicator::num_replicas() const { return config_.local_replicas; }
int Replicator::num_local_replicas() const { return config_.local_replicas; }

void Replicator::run_erased(detail::StepRef step) { pool_->run(step); }

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
