// Collectives on torch::Tensor, built on ReplicaContext's. Every call BLOCKS until all
// replicas made the same call (see replica_context.h for the contract), and throws what
// the context's collectives throw:
//   InvalidArgument     a tensor is neither on the CPU nor on a CUDA device (a CUDA one in a
//                       build without the CUDA device path, too), has a dtype replicator does
//                       not carry (bool, complex, int8/16, uint16+), or the shapes do not fit
//                       the call, or one call mixes CPU and CUDA tensors;
//   CollectiveMismatch  replicas passed different dtypes or shapes (shapes are compared
//                       across replicas, not only element counts), CPU tensors on one and
//                       CUDA tensors on another (replicator/device.h), or different calls;
//   Timeout, Aborted, PeerLost as for every collective.
// Supported dtypes: float32, float64, bfloat16, float16, int32, int64, uint8. Tensors may
// be non-contiguous (they go through a contiguous copy); in-place calls write through the
// tensor, whatever its strides, and do not record the write in autograd.
// Each takes the caller's line last (call_site.h), which the messages name.
// Namespace note: inside namespace replicator, LibTorch is `::torch`.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <string_view>
#include <vector>

#include "replicator/device.h"
#include "replicator/dtype.h"
#include "replicator/replica_context.h"

namespace replicator::torch {

// The replicator dtype of a LibTorch scalar type; throws InvalidArgument for others.
DType dtype_of(c10::ScalarType type);

// Where a tensor on `device` lives for replicator: the CPU is the host, cuda:n is CUDA device
// n (a collective on CUDA tensors runs the device path of replicator/device.h: it waits for
// the work the calling thread issued on the device's default stream, which is LibTorch's
// unless the caller set another, and returns with the results in the tensors). Throws
// InvalidArgument for any other device, and for CUDA where built_with_cuda() is false.
Device device_of(const c10::Device& device);

// The LibTorch device of replicator's `device`, the inverse of device_of: the host is the CPU,
// CUDA device n is cuda:n. For CUDA, first loads LibTorch's CUDA library (libtorch_cuda.so,
// beside libtorch_cpu.so) where the process has not loaded it: a program linked against the
// CPU library only (as the `replicator` command is) gets CUDA tensors this way. Throws
// InvalidArgument for a fake device (it holds no LibTorch tensors), and Error when the CUDA
// library does not load or LibTorch sees no GPU n; the message says which and why. LibTorch
// decides once per process whether it has CUDA, at its first CUDA query (torch::manual_seed
// makes one), and sizes autograd's GPU threads at its first backward: call this before
// either. Never blocks on other replicas.
c10::Device torch_device_of(Device device);

// For a collective that `who` issues from autograd's backward on tensors on `device`: throws
// InvalidArgument (naming `who`, the device and the replicas) where that collective could
// wait forever. Autograd runs the backward of CUDA tensors on one thread per GPU, shared by
// every graph on that GPU, so when two replicas of this process run their backward on one
// GPU, the first to block that thread in a collective keeps the other from reaching it.
// Passes for CPU tensors (each replica's backward runs on its own thread), for a process
// of one replica, and for a replica alone on its device (ctx.device() is `device` and
// ctx.replicas_on_device() is 1). Never blocks.
void require_own_backward_thread(const ReplicaContext& ctx, const c10::Device& device,
                                 std::string_view who);

// The Buffer over a contiguous tensor's elements, on the tensor's device (device_of), for
// ReplicaContext's own collectives (the tensor must outlive the call). Throws
// InvalidArgument for a tensor that is undefined, on a device device_of() refuses, not
// contiguous, or of a dtype dtype_of() refuses.
Buffer buffer_of(const ::torch::Tensor& contiguous);

// Reduces `tensor` over replicas in place (sum by default; kMean divides by R).
void all_reduce(ReplicaContext& ctx, const ::torch::Tensor& tensor,
                const ReduceOptions& options = {}, CallSite where = CallSite::here());
// Fused: one collective over every tensor of the list (dtypes may differ).
void all_reduce(ReplicaContext& ctx, const std::vector<::torch::Tensor>& tensors,
                const ReduceOptions& options = {}, CallSite where = CallSite::here());

// Copies the root replica's `tensor` into `tensor` on every replica, in place.
void broadcast(ReplicaContext& ctx, const ::torch::Tensor& tensor,
               const BroadcastOptions& options = {}, CallSite where = CallSite::here());
void broadcast(ReplicaContext& ctx, const std::vector<::torch::Tensor>& tensors,
               const BroadcastOptions& options = {}, CallSite where = CallSite::here());

// Returns a new tensor of shape [R, *tensor.shape]: row r is replica r's tensor.
::torch::Tensor all_gather(ReplicaContext& ctx, const ::torch::Tensor& tensor,
                           const CollectiveOptions& options = {},
                           CallSite where = CallSite::here());

// `tensor` has R·k rows (dim 0); returns this replica's k rows of the reduction.
::torch::Tensor reduce_scatter(ReplicaContext& ctx, const ::torch::Tensor& tensor,
                               const ReduceOptions& options = {},
                               CallSite where = CallSite::here());

// `tensor` has R·k rows; block j (k rows) goes to replica j, and the result holds, as
// block r, what replica r sent to this one. Same shape as `tensor`.
::torch::Tensor all_to_all(ReplicaContext& ctx, const ::torch::Tensor& tensor,
                           const CollectiveOptions& options = {},
                           CallSite where = CallSite::here());

// Makes every replica's parameters and buffers equal to the root's (one fused broadcast).
// Every replica must pass a module with the same parameter and buffer shapes.
void broadcast_parameters(ReplicaContext& ctx, ::torch::nn::Module& module,
                          const BroadcastOptions& options = {}, CallSite where = CallSite::here());

}  // namespace replicator::torch
