#include "replicator/replica_context.h"

#include "src/core/local_group.h"

namespace replicator {

thread_local ReplicaContext* ReplicaContext::current_ = nullptr;

void ReplicaContext::call(const detail::Call& call) {
  group_->collective(local_id_, sequence_, call);
}

void ReplicaContext::all_reduce(std::span<const Buffer> buffers, const ReduceOptions& options) {
  call({.kind = detail::OpKind::kAllReduce,
        .op = options.op,
        .buffers = buffers,
        .timeout = options.timeout,
        .signature = options.signature});
}

void ReplicaContext::broadcast(std::span<const Buffer> buffers, const BroadcastOptions& options) {
  call({.kind = detail::OpKind::kBroadcast,
        .root = options.root,
        .buffers = buffers,
        .timeout = options.timeout,
        .signature = options.signature});
}

void ReplicaContext::barrier(const CollectiveOptions& options) {
  call({.kind = detail::OpKind::kBarrier,
        .timeout = options.timeout,
        .signature = options.signature});
}

}  // namespace replicator
