// The messages a process sends to itself in one post: the k-th send to itself lands in the
// k-th receive from itself, copied at once. Shared by the transports that do not hand such
// messages to their wire (gloo, local).
#pragma once

#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "replicator/errors.h"
#include "src/engines/transport.h"

namespace replicator::detail {

// Copies the sends to `rank` (this process) into the receives from it, in order. Throws
// InvalidArgument, naming `engine` and `lane`, where their counts or a pair's sizes differ
// (nothing is copied past the first mismatch).
inline void copy_to_self(std::string_view engine, int rank, int lane, std::span<const SendOp> sends,
                         std::span<const RecvOp> recvs) {
  const auto where = [&] {
    return std::string(engine) + " engine: exchange on lane " + std::to_string(lane);
  };
  auto send = sends.begin();
  for (const RecvOp& recv : recvs) {
    if (recv.peer != rank) continue;
    while (send != sends.end() && send->peer != rank) ++send;
    if (send == sends.end()) {
      throw InvalidArgument(where() +
                            " receives from this process itself more messages than it sends "
                            "to itself");
    }
    if (send->bytes != recv.bytes) {
      throw InvalidArgument(where() + ": a message to this process itself has " +
                            std::to_string(send->bytes) + " bytes, but its receive expects " +
                            std::to_string(recv.bytes));
    }
    if (recv.bytes > 0 && recv.data != send->data) std::memmove(recv.data, send->data, recv.bytes);
    ++send;
  }
  while (send != sends.end() && send->peer != rank) ++send;
  if (send != sends.end()) {
    throw InvalidArgument(where() +
                          " sends to this process itself more messages than it receives from "
                          "itself");
  }
}

}  // namespace replicator::detail
