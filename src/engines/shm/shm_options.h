// ShmOptions: how make_shm_transport (shm_transport.h) makes the shared-memory transport an
// engine composes with its own. A plain struct with defaults, for designated initializers:
//   make_shm_transport(std::move(mesh), {.engine = "gloo", .eager_bytes = 4000})
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace replicator::detail {

struct ShmOptions {
  // The engine the transport serves, which its errors name ("gloo" -> "gloo engine: ...").
  std::string engine = "shm";
  // Messages up to this size may be posted before their receive (traits().eager_bytes).
  std::size_t eager_bytes = 4000;
  // A wait spins this long, then yields its core this long, then parks (or naps, where the
  // mesh has no bells).
  std::chrono::microseconds spin{20};
  std::chrono::microseconds yield{0};
  // Told the reason of a failure a peer may not survive (timeout, lost peer, broken message)
  // before the exception is thrown. Must not throw.
  std::function<void(const std::string&)> on_fatal;
};

}  // namespace replicator::detail
