// The chooser: which algorithm runs a collective, from its size, the layout, the transport's
// traits and facts about the machine. Pure functions (no state, no I/O): what they pick is
// a function of their arguments only, and the tests check their table. Choosing is kept
// apart from running (the algorithms are in their own files).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "src/collectives/peers.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// What the chooser knows of the machine.
struct MachineFacts {
  // More replica threads on this host than cores: every barrier costs futex wake-ups.
  bool oversubscribed = false;
};

// In one process: the staged path (inputs copied to staging, one barrier) below a size where
// one barrier beats bandwidth, else the direct path (two barriers, peers read each other's
// buffers). With a core per replica the direct path wins from about 1 KiB (its second
// barrier costs less than pulling R copies across cores); oversubscribed, every barrier
// costs wake-ups, so the staged path pays up to `staging_capacity`.
Path choose_local_path(std::size_t path_bytes, std::size_t staging_capacity,
                       const MachineFacts& facts);

// The all-reduce across processes of one lane's slice.
enum class AllReduceAlgorithm : std::uint8_t {
  kInFrame,    // the partials ride in the frames: one round trip
  kGathered,   // every process sends all its partials to all: one exchange after the frames
  kPipelined,  // owner parts in steps: partials to the owner, results back
  kNative,     // the engine's own all-reduce (after the frames), where it gives our bits
};

// "in frame", "gathered", "pipelined", "engine's own".
std::string_view to_string(AllReduceAlgorithm algorithm);

// What the job measured of its transport and host at start (the calibration,
// src/runtime/calibration.h): times at each of kCostBytes, read between them as straight
// lines (a transport's time is not one line: OpenMPI's jumps where its rendezvous starts,
// and a ring streams at another speed than a copy that fits in it). Zero where not
// measured; the chooser then keeps to its fixed limits.
// 512 KiB is half a shared-memory ring (the largest step that stays in it, see
// TransportTraits::shared_step_bytes); 16 and 64 MiB, past the caches. Past 16 MiB not
// every time is a line of the memory's bandwidth: OpenMPI's MPI_Allreduce between two
// processes of one host took 2.4-2.7 ms at 16 MiB and 25-37 ms at 64 MiB (a third of the
// busbw), while the pipelined steps through the rings took 12.5-13 ms, and a line drawn
// from 16 MiB had the chooser hand 64 MiB to MPI_Allreduce
// (bench/results/2026-12-07-mpi-all-sizes).
inline constexpr std::array<std::size_t, 9> kCostBytes = {64,
                                                          std::size_t{16} << 10,
                                                          std::size_t{64} << 10,
                                                          std::size_t{256} << 10,
                                                          std::size_t{512} << 10,
                                                          std::size_t{1} << 20,
                                                          std::size_t{4} << 20,
                                                          std::size_t{16} << 20,
                                                          std::size_t{64} << 20};
struct TransportCosts {
  using Times = std::array<double, kCostBytes.size()>;
  // Seconds of one exchange in which every process sends that many bytes to every other
  // (the transport as the collectives use it: through shared memory, MPI or TCP).
  Times exchange_s{};
  // Seconds of the same exchange cut into the steps the pipelined plan takes for a part
  // that large (pipelined_plan), one exchange a step at walking offsets: how the pipelined
  // all-reduce moves a part (through the shared-memory rings, where the transport has
  // them). A transport's larger messages may take another path (OpenMPI's own, past the
  // rings' size), so a part in steps costs what neither one message nor one step says.
  // Equal to exchange_s where the part is one step.
  Times stepped_s{};
  // Seconds of the engine's own all-reduce of that many bytes (where it has one).
  Times native_s{};
  // Seconds of a reduction of two inputs of that many bytes into a third (f32 sum, in this
  // process: from the caches at the small sizes, from memory at the large).
  Times reduce_s{};

  bool exchange_known() const { return known(exchange_s); }
  bool stepped_known() const { return known(stepped_s); }
  bool native_known() const { return known(native_s); }
  bool reduce_known() const { return known(reduce_s); }
  static bool known(const Times& times) {
    for (const double t : times) {
      if (!(t > 0)) return false;
    }
    return true;
  }
  // Seconds at `bytes`: between two measured sizes on the line through them, past the
  // largest on the last segment's line, below the smallest the smallest's time.
  static double at(const Times& times, double bytes);
};

struct AllReduceShape {
  std::size_t row_bytes = 0;           // one subtree's partials of the slice
  int max_subtrees = 1;                // most subtrees any process holds
  int processes = 2;                   // P
  std::size_t largest_part_bytes = 0;  // partials of the largest owner part (slice / P)
  // The engine has its own all-reduce of this dtype and op, and it gives the bits of the
  // canonical tree: two processes of one subtree each (the last step of the tree is then
  // a single op(a, b), which is commutative), partials of the element type.
  bool native_same_bits = false;
  // More replica threads on this host than cores.
  bool oversubscribed = false;
  // What the job measured (zero: not measured).
  TransportCosts costs;
  // This hardware thread's share of the last-level cache (runtime/host_policy.h's
  // CacheFacts; 0: unknown).
  std::size_t cache_share_bytes = 0;
};

struct AllReducePlan {
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kInFrame;
  std::size_t step_bytes = 0;   // kPipelined: partial bytes per step
  bool receives_ahead = false;  // kPipelined: every receive posted first (else a step an exchange)
  // Results of a step this large or more are written past the cache (non-temporal stores).
  std::size_t stream_bytes = std::numeric_limits<std::size_t>::max();
};

// Up to this many bytes of partials per process, every process sends every process's
// partials of the whole slice to every other (one exchange after the frames) instead of
// owner parts and results (two). Where the job measured its costs and the engine's own
// all-reduce competes, the measured crossover instead, up to kGatherCapBytes (every
// process holds all the others' partials at once).
inline constexpr std::size_t kGatherBytes = std::size_t{16} << 10;
inline constexpr std::size_t kGatherCapBytes = std::size_t{4} << 20;
// The engine's own all-reduce is the fallback that cannot lose: gathered takes its sizes
// only where gathered's estimate is below it by more than this fraction. Two medians of
// one operation on this machine differ by up to 10% from run to run (compare_engines.sh's
// large sizes, where both sides run MPI_Allreduce), so closer estimates are a toss-up.
inline constexpr double kEstimateMargin = 0.1;
// Where peers copy results straight out of this process's memory and the cache is not
// known, a step's results from this size on are written past the cache.
inline constexpr std::size_t kStreamBytes = std::size_t{16} << 10;

// From which step size (AllReducePlan::stream_bytes) a pipelined all-reduce writes its
// results past the cache. The cost model: a result line written through the cache is
// first read for ownership, then written back when it is evicted; a streaming store writes
// it once, but the peer that copies it (OpenMPI's single copy, streamed_results) and this
// process's next use then read it from memory instead of from the last-level cache. So
// results stream only where they would not stay in the cache anyway: where the results
// this process writes in one call (its owner part) fill its share of the last-level cache
// (cache_share_bytes; the rule of glibc's memcpy for its non-temporal copies). Where that
// share is unknown, from kStreamBytes a step; never where peers do not read this process's
// memory.
std::size_t stream_from(const AllReduceShape& shape, const TransportTraits& traits);

// Estimated seconds of the gathered algorithm, of the pipelined one in steps of
// `step_bytes` and of the engine's own for that shape, from the measured costs (all start
// with the frames, one small exchange): gathered, one exchange of every row and the
// reduction of P rows; pipelined, the largest owner part's partials and then its results
// exchanged in steps (stepped_s where measured, in the steps of pipelined_plan, which
// `step_bytes` is then; else each step an exchange_s of its size
// or its share of the whole part's, whichever is dearer) and each step's reduction of P
// partials, at least its share of the whole part's (memory, not the caches, past them);
// the engine's own, its all-reduce of the row. Negative where the costs needed were not
// measured.
double gathered_seconds(const AllReduceShape& shape);
double pipelined_seconds(const AllReduceShape& shape, std::size_t step_bytes);
double native_seconds(const AllReduceShape& shape);

// The pipelined plan of that shape: steps of the largest part clamped to the transport's
// step range, or, where the transport has shared-memory rings and every replica thread a
// core, of the largest part up to the rings' step (results then never streamed).
AllReducePlan pipelined_plan(const AllReduceShape& shape, const TransportTraits& traits);

// In frame when every process's partials fit in a frame; gathered up to kGatherBytes unless
// that turns messages the transport sends at once into ones with a handshake (a row over
// the eager size whose owner parts would stay under it); else the engine's own all-reduce
// where it gives the same bits, else pipelined (pipelined_plan).
//
// The cost model behind the engine's own: every algorithm starts with the frames (the
// mismatch check). In frame, the data rides in them: one round trip, which nothing that
// needs the frames first can beat. Gathered, one exchange of rows follows them: the messages
// of the engine's own small-message algorithm (recursive doubling) for two processes, and
// the same bytes. Pipelined through the engine's messages, our reduce-scatter and
// all-gather move the bytes the engine's own ring moves, in as many round trips, but
// through a staging row and our own polling, where the engine copies straight from the
// peer's buffer inside its progress loop: so, where nothing was measured and the engine's
// own gives the same bits, it takes the pipelined sizes. Unless the host is oversubscribed:
// the engine's progress loop spins without yielding, and with more threads than cores a
// spinning lane takes the core of the replica or the lane it waits for (2 processes x 2
// replicas on 2 cores: 0.5x ours at 1 MiB), where our waits yield.
//
// Where the job measured its exchange, its reduction and the engine's own all-reduce, the
// cheaper of gathered (up to kGatherCapBytes) and pipelined takes the engine's sizes where
// its estimate is below native_seconds() by kEstimateMargin: over shared memory no message
// needs a handshake: two processes measured gathered 2.2x MPI_Allreduce at 64-256 KiB, and
// pipelined through the rings 1.07-3.31x from 16 KiB to 1 MiB in every run of
// bench/results/2026-12-04-mpi-chooser; with the part's steps through the rings measured
// (stepped_s), 1.43-2.18x at 4 and 16 MiB where the calibration picked them, and the
// engine's own where it did not (bench/results/2026-12-04-stepped-calibration).
AllReducePlan choose_all_reduce(const AllReduceShape& shape, const TransportTraits& traits);

}  // namespace replicator::detail
