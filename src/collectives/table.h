// The collectives' table: one entry per collective, holding everything that differs between
// them (its name, local validation, what it stages, its algorithm in one process, across
// processes, and with one replica; how benchmarks measure it). The communicator
// (communicator.h) runs every collective the same way from its entry. Adding a collective is
// an enumerator, an entry in table.cc, and its algorithm files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/collectives/across/across.h"
#include "src/collectives/peers.h"
#include "src/comm/descriptor.h"
#include "src/engines/native.h"

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

// What a benchmark needs of a collective to size its buffers and report its figures, with
// nccl-tests' definitions (DESIGN.md "Reporting"). S is the per-replica buffer a benchmark
// names (all_gather and gather: the whole output; reduce_scatter: the whole input; the others:
// the input, or the buffer in place), R the replica count. Benchmarks list every entry that has
// one, in table order, and read the rest (name, whether it takes a reduce op, in place or with
// an output, whether it moves data) from the entry itself.
struct Measures {
  // busbw = algbw · bus_factor(R).
  double (*bus_factor)(double r);
  // The bytes an implementation in one process must at least read plus write: traffic(R) · S.
  double (*traffic)(double r);
  // S is cut into R equal blocks (each replica's share): its count is a multiple of R.
  bool blocked;
  // Every line that traffic writes was read just before (an update in place, as a reduction
  // into its own buffer); else outputs are written fresh, as a copy writes them.
  bool updates;
  // The engine's own version (NativeCollectives) that benchmarks time beside ours: f32 sums in
  // place over every process, on lane 0; null where engines have none.
  void (*native_f32_sum)(NativeCollectives& engine, float* data, std::size_t count);
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
  // How benchmarks measure and report it; null for what a program does not call (the end of
  // a step).
  const Measures* measures;
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
