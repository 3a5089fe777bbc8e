// The test and benchmark interface of the runtime: a Replicator over a transport made by
// the caller. The tests pass the in-memory transport (tests/collectives/fake_transport.h);
// the collective benchmark makes the engine's transport itself (make_transport) so that it
// can also run the engine's own collectives (NativeCollectives) in the same job.
#pragma once

#include <memory>

#include "replicator/replicator.h"
#include "src/engines/make_transport.h"
#include "src/engines/native.h"
#include "src/engines/transport.h"

// detail::make_replicator(config, transport) is declared in replicator/replicator.h.
