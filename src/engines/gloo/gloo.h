// Gloo for the gloo engine and the store: Debian's gloo headers with the namespace spelled
// `replicator_gloo`, the name its private copy of libgloo exports (cmake/gloo.cmake), so that
// nothing here binds to the other gloo that libtorch_cpu.so carries. Every file of the project
// includes gloo through this header and no other way (the `layers` test checks it); the code
// keeps writing `gloo::`, an alias of the renamed namespace.
#pragma once

// The Debian headers of Gloo include <hiredis.h>; hiredis installs it as <hiredis/hiredis.h>.
#define HIREDIS_NESTED_INCLUDE 1

// The standard headers gloo's include, first, so that the renaming below touches only gloo.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#define gloo replicator_gloo
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#undef gloo

namespace gloo = ::replicator_gloo;
