#include "replicator/replica_context.h"

#include "src/collectives/communicator.h"
#include "src/collectives/table.h"

namespace replicator {
namespace {

// The call of collective `kind` with the fields of `options`.
template <typename Options>
detail::Call call_of(detail::OpKind kind, const Options& options) {
  detail::Call call{.kind = static_cast<std::uint8_t>(kind),
                    .timeout = options.timeout,
                    .signature = options.signature};
  if constexpr (requires { options.op; }) call.op = options.op;
  if constexpr (requires { options.root; }) call.root = options.root;
  return call;
}

// The call of collective `kind` from `input` to `output`.
template <typename Options>
detail::Call io_call(detail::OpKind kind, Buffer input, Buffer output, const Options& options) {
  detail::Call call = call_of(kind, options);
  call.input = input;
  call.output = output;
  return call;
}

}  // namespace

thread_local ReplicaContext* ReplicaContext::current_ = nullptr;

void ReplicaContext::all_reduce(std::span<const Buffer> buffers, const ReduceOptions& options) {
  detail::Call call = call_of(detail::OpKind::kAllReduce, options);
  call.buffers = buffers;
  comm_->collective(local_id_, sequence_, call);
}

void ReplicaContext::broadcast(std::span<const Buffer> buffers, const BroadcastOptions& options) {
  detail::Call call = call_of(detail::OpKind::kBroadcast, options);
  call.buffers = buffers;
  comm_->collective(local_id_, sequence_, call);
}

void ReplicaContext::all_gather(Buffer input, Buffer output, const CollectiveOptions& options) {
  comm_->collective(local_id_, sequence_,
                    io_call(detail::OpKind::kAllGather, input, output, options));
}

void ReplicaContext::gather(Buffer input, Buffer output, const GatherOptions& options) {
  comm_->collective(local_id_, sequence_, io_call(detail::OpKind::kGather, input, output, options));
}

void ReplicaContext::reduce_scatter(Buffer input, Buffer output, const ReduceOptions& options) {
  comm_->collective(local_id_, sequence_,
                    io_call(detail::OpKind::kReduceScatter, input, output, options));
}

void ReplicaContext::all_to_all(Buffer input, Buffer output, const CollectiveOptions& options) {
  comm_->collective(local_id_, sequence_,
                    io_call(detail::OpKind::kAllToAll, input, output, options));
}

void ReplicaContext::permute(Buffer input, Buffer output, std::span<const PermutePair> pairs,
                             const CollectiveOptions& options) {
  detail::Call call = io_call(detail::OpKind::kPermute, input, output, options);
  call.pairs = pairs;
  comm_->collective(local_id_, sequence_, call);
}

void ReplicaContext::barrier(const CollectiveOptions& options) {
  comm_->collective(local_id_, sequence_, call_of(detail::OpKind::kBarrier, options));
}

void ReplicaContext::end_step() {
  comm_->collective(local_id_, sequence_, call_of(detail::OpKind::kEndStep, CollectiveOptions{}));
}

}  // namespace replicator
