#include "replicator/replica_context.h"

#include "src/collectives/communicator.h"
#include "src/collectives/table.h"

namespace replicator {
namespace {

// The call of collective `kind` with the fields of `options`.
template <typename Options>
detail::Call call_of(detail::OpKind kind, const Options& options, CallSite where) {
  detail::Call call{.kind = static_cast<std::uint8_t>(kind),
                    .timeout = options.timeout,
                    .signature = options.signature,
                    .where = where};
  if constexpr (requires { options.op; }) call.op = options.op;
  if constexpr (requires { options.root; }) call.root = options.root;
  return call;
}

// The call of collective `kind` from `input` to `output`.
template <typename Options>
detail::Call io_call(detail::OpKind kind, Buffer input, Buffer output, const Options& options,
                     CallSite where) {
  detail::Call call = call_of(kind, options, where);
  call.input = input;
  call.output = output;
  return call;
}

}  // namespace

thread_local ReplicaContext* ReplicaContext::current_ = nullptr;

void ReplicaContext::all_reduce(std::span<const Buffer> buffers, const ReduceOptions& options,
                                CallSite where) {
  detail::Call call = call_of(detail::OpKind::kAllReduce, options, where);
  call.buffers = buffers;
  comm_->collective(local_id_, sequence_, call);
}

void ReplicaContext::broadcast(std::span<const Buffer> buffers, const BroadcastOptions& options,
                               CallSite where) {
  detail::Call call = call_of(detail::OpKind::kBroadcast, options, where);
  call.buffers = buffers;
  comm_->collective(local_id_, sequence_, call);
}

void ReplicaContext::all_gather(Buffer input, Buffer output, const CollectiveOptions& options,
                                CallSite where) {
  comm_->collective(local_id_, sequence_,
                    io_call(detail::OpKind::kAllGather, input, output, options, where));
}

void ReplicaContext::gather(Buffer input, Buffer output, const GatherOptions& options,
                            CallSite where) {
  comm_->collective(local_id_, sequence_,
                    io_call(detail::OpKind::kGather, input, output, options, where));
}

void ReplicaContext::reduce_scatter(Buffer input, Buffer output, const ReduceOptions& options,
                                    CallSite where) {
  comm_->collective(local_id_, sequence_,
                    io_call(detail::OpKind::kReduceScatter, input, output, options, where));
}

void ReplicaContext::all_to_all(Buffer input, Buffer output, const CollectiveOptions& options,
                                CallSite where) {
  comm_->collective(local_id_, sequence_,
                    io_call(detail::OpKind::kAllToAll, input, output, options, where));
}

void ReplicaContext::permute(Buffer input, Buffer output, std::span<const PermutePair> pairs,
                             const CollectiveOptions& options, CallSite where) {
  detail::Call call = io_call(detail::OpKind::kPermute, input, output, options, where);
  call.pairs = pairs;
  comm_->collective(local_id_, sequence_, call);
}

void ReplicaContext::barrier(const CollectiveOptions& options, CallSite where) {
  comm_->collective(local_id_, sequence_, call_of(detail::OpKind::kBarrier, options, where));
}

void ReplicaContext::end_step() {
  comm_->collective(local_id_, sequence_,
                    call_of(detail::OpKind::kEndStep, CollectiveOptions{}, CallSite{}));
}

}  // namespace replicator
