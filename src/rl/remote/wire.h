// Unrolls and parameters to and from the service's messages (learner.proto): arrays as
// little-endian bytes, one copy each way.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "learner.pb.h"
#include "replicator/rl/unroll.h"

namespace replicator::rl::remote_wire {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

void to_message(const Unroll& u, remote::Unroll* out);
// The unroll a message holds. Throws DataError when its arrays do not have the sizes its
// counts say (data from elsewhere is checked, never trusted).
Unroll from_message(const remote::Unroll& m);

// Copies `values` into `bytes`.
template <typename T>
void put(const std::vector<T>& values, std::string* bytes) {
  bytes->assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}
// The values in `bytes`; false when its size is not a whole number of T.
template <typename T>
bool get(const std::string& bytes, std::vector<T>* values) {
  if (bytes.size() % sizeof(T) != 0) return false;
  values->resize(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(values->data(), bytes.data(), bytes.size());
  return true;
}

}  // namespace replicator::rl::remote_wire
