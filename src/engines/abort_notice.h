// The notice a failed process sends its peers (through the store for gloo, a control message
// for mpi): the global id of the replica whose failure it was, when known, then the reason.
// Four bytes of id (little-endian int32, -1 for none) precede the text.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace replicator::detail {

struct AbortNotice {
  std::optional<int> replica;
  std::string why;
};

inline std::string encode_abort_notice(std::optional<int> replica, std::string_view why) {
  const std::int32_t id = replica.value_or(-1);
  std::string bytes(sizeof id, '\0');
  std::memcpy(bytes.data(), &id, sizeof id);
  bytes.append(why);
  return bytes;
}

// Never throws but std::bad_alloc; a notice shorter than its id is all reason.
inline AbortNotice decode_abort_notice(std::string_view bytes) {
  std::int32_t id = -1;
  if (bytes.size() < sizeof id) return {std::nullopt, std::string(bytes)};
  std::memcpy(&id, bytes.data(), sizeof id);
  return {id >= 0 ? std::optional<int>(id) : std::nullopt, std::string(bytes.substr(sizeof id))};
}

}  // namespace replicator::detail
