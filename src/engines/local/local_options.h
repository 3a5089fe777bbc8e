// LocalOptions: how make_local_transport (local_transport.h) makes the transport of a job of
// one process. A plain struct with defaults, for designated initializers.
#pragma once

namespace replicator::detail {

struct LocalOptions {
  int lanes = 1;  // one per local replica
};

}  // namespace replicator::detail
