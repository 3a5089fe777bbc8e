// Collectives across processes: the part each local replica thread runs, on its own lane
// of the transport, after the local entry barrier and before the local exit barrier.
//
// Every collective starts with one frame exchange on every lane between every pair of
// processes (the receives posted at the end of the collective before): a fixed-size frame holding the caller's descriptor (so a mismatch across
// processes is raised as CollectiveMismatch on every replica, never read as data) and,
// for small all-reduces, the data itself (one round trip in all). The data phases are
// written against Transport::exchange only, so they run unchanged over MPI and Gloo.
//
// Layout: replica g lives in process g / L as local replica g % L. Local thread l drives
// lane l and owns slice l of every buffer (64-element aligned), so the L threads of a
// process and all their connections work at once.
//
// Determinism: process p first reduces its replicas' values over the canonical subtrees
// (aligned power-of-two blocks of replica ids) that lie inside its id range, into
// accumulators; the owner of each piece then combines all processes' subtree partials in
// id order with the same binary-counter tree. The result has the same bits as the local
// engine's for the same R, whatever P x L.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "src/collectives/peers.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// A canonical subtree: replicas [first, first + size), size a power of two.
struct Subtree {
  int first;
  int size;
};

// The canonical subtrees that cover replicas [begin, end) (of any tree over at least
// `end` replicas): aligned power-of-two blocks, largest first.
std::vector<Subtree> canonical_subtrees(int begin, int end);

// Shared by the local threads of one process.
struct ProcessLayout {
  Transport* transport = nullptr;
  int rank = 0;             // this process
  int processes = 1;        // P
  int local = 1;            // L
  std::vector<std::vector<Subtree>> subtrees;  // per process
  int max_subtrees = 1;

  int replicas() const { return processes * local; }
};

// Per local thread: memory reused by every collective (grown, never shrunk).
struct LaneScratch {
  std::vector<std::byte> arena;
  std::vector<std::byte> frames;  // one frame per process (this one's at its rank)
  bool frames_ahead = false;      // the receives of the next frames are posted
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<int> sizes;
  std::vector<std::byte*> rows;  // this process's partial rows, by subtree
  std::vector<Transport::Ticket> tickets;  // of the receives of each pipeline step

  std::byte* reserve(std::size_t bytes);  // arena of at least `bytes`
};

// Runs replica `local_me`'s part of collective `peers` across processes on lane
// `local_me`. Throws CollectiveMismatch, Timeout (naming replicas), PeerLost, Aborted.
void cross_process(const Peers& peers, const ProcessLayout& layout, LaneScratch& lane,
                   Transport::Clock::time_point deadline);

}  // namespace replicator::detail
