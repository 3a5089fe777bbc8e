// What a collective algorithm sees: every replica's call (its descriptor) once all have
// arrived, where each replica's input can be read, and this replica's scratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "replicator/dtype.h"
#include "replicator/replica_context.h"
#include "src/collectives/reduce_kernel.h"

namespace replicator::detail {

// One replica's call of one collective, as published to its peers. The buffers it names
// stay valid until the collective returns on every replica.
// The fields every replica must agree on come first, in the first cache line, which is
// all a peer reads on the staged path.
struct alignas(64) Descriptor {
  OpKind kind = OpKind::kBarrier;
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kF32;
  int root = 0;
  std::uint64_t sequence = 0;
  std::uint64_t count = 0;   // in-place ops: elements over all buffers; others: input count
  std::uint64_t layout = 0;  // hash of a fused buffer list or of permute pairs
  Call call;

  // Same collective with the same shape: what every replica must agree on.
  bool matches(const Descriptor& other) const {
    return kind == other.kind && op == other.op && dtype == other.dtype && root == other.root &&
           sequence == other.sequence && count == other.count && layout == other.layout;
  }
  // e.g. "all_reduce(f32 x 1024, op=sum)".
  std::string describe() const;
};

// Builds the descriptor of replica `me`'s `call` after checking what can be checked
// locally; throws InvalidArgument naming the argument, the expected and the found value.
// The sequence number is left for the caller to set.
Descriptor describe_call(const Call& call, int me, int num_replicas);

std::string_view op_name(OpKind kind);

// Bytes a staged collective copies into the staging area (0: nothing).
std::size_t staged_bytes(const Descriptor& d, int me);
// Copies this replica's input into `staging` (packed, each buffer 8-byte aligned).
void stage(const Descriptor& d, int me, std::byte* staging);

enum class Path : std::uint8_t {
  kStaged,  // inputs copied to staging before the barrier; one barrier; latency path
  kDirect,  // peers read (and write) each other's buffers; entry and exit barriers
};

// The algorithm table: staged below a size where one barrier beats bandwidth.
Path choose_path(const Descriptor& d, int me, std::size_t staging_capacity);

struct Peers {
  int me = 0;
  int n = 1;
  Path path = Path::kDirect;
  std::span<const Descriptor* const> calls;  // calls[j]: replica j's descriptor
  std::span<std::byte* const> staging;       // staging[j]: replica j's staged input
  ReduceScratch* scratch = nullptr;
  std::span<const void*> in_ptrs;  // n pointers of room, owned by this replica
  std::span<void*> out_ptrs;       // n pointers of room, owned by this replica

  const Descriptor& mine() const { return *calls[static_cast<std::size_t>(me)]; }
  const Descriptor& of(int j) const { return *calls[static_cast<std::size_t>(j)]; }
  // Where replica j's `input` can be read: its staging area or its own buffer.
  const std::byte* input_of(int j) const;
};

// The algorithms, run after every replica has arrived and the calls matched.
void all_reduce(const Peers& peers);
void broadcast(const Peers& peers);
void all_gather(const Peers& peers);
void reduce_scatter(const Peers& peers);
void all_to_all(const Peers& peers);
void permute(const Peers& peers);

// The R == 1 shortcut of each collective (no peers, no synchronisation).
void run_single(const Descriptor& d, ReduceScratch& scratch);

// Size of a buffer in a packed staging area: its bytes rounded up to 8.
inline std::size_t packed_size(const Buffer& b) { return (b.bytes() + 7) & ~std::size_t{7}; }

// Element range [begin, end) of `total` that replica `r` of `n` owns when work is
// sliced; boundaries are multiples of 64 elements so slices do not share cache lines.
std::pair<std::uint64_t, std::uint64_t> slice_of(std::uint64_t total, int r, int n);

}  // namespace replicator::detail
