// The collectives' table: one entry per collective, holding everything that differs between
// them (its name, local validation, what it stages, its algorithm in one process, across
// processes, and with one replica). The communicator (communicator.h) runs every
// collective the same way from its entry. Adding a collective is an enumerator, an entry
// in table.cc, and its algorithm files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/collectives/across/across.h"
#include "src/collectives/peers.h"
#include "src/comm/descriptor.h"

namespace replicator::detail {

enum class OpKind : std::uint8_t {
  kAllReduce,
  kAllGather,
  kBroadcast,
  kReduceScatter,
  kAllToAll,
  kPermute,
  kGather,
  kBarrier,
  kEndStep,  // a replica's step function returned
  kCount,
};

struct CollectiveDef {
  OpTraits traits;
  // Checks what can be checked locally of replica `me`'s call among `n` replicas and fills
  // the descriptor's agreement fields (not the sequence number); throws InvalidArgument
  // naming the argument, the expected and the found value.
  void (*describe)(const Call& call, int me, int n, Descriptor& d);
  // Whether the call works in place on `call.buffers` (else on input/output).
  bool in_place;
  // Bytes that decide the staged or direct path: the same on every replica that made the
  // same call.
  std::size_t (*path_bytes)(const Descriptor& d);
  // Whether replica `me` copies its input into staging on the staged path.
  bool (*stages)(const Descriptor& d, int me);
  // The algorithm in one process, run once every local replica has arrived and the calls
  // matched; null when nothing moves (barrier).
  void (*in_process)(const Peers& peers);
  // This replica's part across processes (on its lane), after the local entry barrier.
  void (*across)(const Peers& peers, const ProcessLayout& layout, LaneScratch& lane,
                 Transport::Clock::time_point deadline);
  // The R == 1 shortcut: no peers, no synchronisation.
  void (*single)(const Descriptor& d, ReduceScratch& scratch);
};

// The entry of `kind`. Throws InvalidArgument for a kind past the table (a corrupt frame).
const CollectiveDef& definition(std::uint8_t kind);
inline const CollectiveDef& definition(OpKind kind) {
  return definition(static_cast<std::uint8_t>(kind));
}

// Copies replica `me`'s input into `staging` (in-place collectives: every buffer, packed,
// each 8-byte aligned).
void stage(const CollectiveDef& def, const Descriptor& d, std::byte* staging);

// The algorithms in one process (one file each).
void all_reduce(const Peers& peers);
void broadcast(const Peers& peers);
void all_gather(const Peers& peers);
void reduce_scatter(const Peers& peers);
void all_to_all(const Peers& peers);
void permute(const Peers& peers);
void gather(const Peers& peers);

}  // namespace replicator::detail
