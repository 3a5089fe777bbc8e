// Descriptor: what one replica called at one point of its sequence of collectives, as
// published to its peers, and the check that every replica called the same.
//
// The fields every replica must agree on (the collective, reduce op, dtype, root, sequence
// number, element count, the kind of memory, and a hash of the buffer list, permute pairs and
// signature) come first, in the first cache line, which is all a peer reads on the fast path. The
// call itself (buffers) follows for the algorithms.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "src/comm/call.h"

namespace replicator::detail {

// How a collective names itself in messages: "all_reduce(f32 x 1024, op=sum)".
struct OpTraits {
  std::string_view name;
  bool shows_shape = true;   // "(dtype x count ...)"
  bool shows_op = false;     // ", op=sum"
  bool shows_root = false;   // ", root=0"
  bool shows_pairs = false;  // ", 2 pairs #hash"
  std::string_view phrase;   // when set, the whole description (e.g. the end of a step)
};

struct alignas(64) Descriptor {
  const OpTraits* traits = nullptr;
  std::uint8_t kind = 0;
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kF32;
  int root = 0;
  std::uint64_t sequence = 0;
  std::uint64_t count = 0;   // in-place ops: elements over all buffers; others: input count
  std::uint64_t layout = 0;  // hash of a fused buffer list, permute pairs, signature
  std::uint32_t num_buffers = 0;
  MemoryKind memory = MemoryKind::kHost;  // where the buffers live (device.h)
  std::chrono::milliseconds timeout{0};   // the collective's own limit, for messages; 0: unset
  Call call;

  // Same collective with the same shape: what every replica must agree on.
  bool matches(const Descriptor& other) const {
    return kind == other.kind && op == other.op && dtype == other.dtype && root == other.root &&
           sequence == other.sequence && count == other.count && layout == other.layout &&
           memory == other.memory;
  }
  // e.g. "all_reduce(f32 x 1024, op=sum)", "all_reduce(f32 x 1024 on fake, op=sum)". Never throws
  // but std::bad_alloc.
  std::string describe() const;
  std::string_view name() const { return traits ? traits->name : std::string_view("?"); }
};

// Mixes `value` into the hash `h` (the layout field).
std::uint64_t mix_hash(std::uint64_t h, std::uint64_t value);

// Throws CollectiveMismatch unless every descriptor of `calls` (one per replica, global ids
// first, first + 1, ...) matches the first: the message names the sequence number and
// what each replica called, grouping runs of equal calls; `me` is the replica that checks.
void check_match(int first, int me, std::span<const Descriptor* const> calls);

}  // namespace replicator::detail
