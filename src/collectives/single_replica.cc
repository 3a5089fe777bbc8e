// Collectives with one replica: nothing to exchange, each is a local copy at most.
#include <cstring>

#include "src/collectives/peers.h"

namespace replicator::detail {

void run_single(const Descriptor& d, ReduceScratch& scratch) {
  switch (d.kind) {
    case OpKind::kAllReduce:
      // One replica: sum, min, max, prod and mean are the identity (16-bit floats too).
      return;
    case OpKind::kBroadcast:
    case OpKind::kBarrier:
    case OpKind::kEndStep:
      return;
    case OpKind::kReduceScatter: {
      const void* in = d.call.input.data;
      void* out = d.call.output.data;
      return tree_reduce(d.op, d.dtype, &in, 1, &out, 1, d.count, 1, scratch);
    }
    case OpKind::kAllGather:
    case OpKind::kAllToAll:
      if (d.count > 0 && d.call.output.data != d.call.input.data) {
        std::memcpy(d.call.output.data, d.call.input.data, d.call.input.bytes());
      }
      return;
    case OpKind::kPermute:
      if (d.count == 0) return;
      if (d.call.pairs.empty()) {
        std::memset(d.call.output.data, 0, d.call.output.bytes());
      } else {
        std::memcpy(d.call.output.data, d.call.input.data, d.call.input.bytes());
      }
      return;
  }
}

}  // namespace replicator::detail
