// Unrolls, parameters and env server steps to and from the services' messages (learner.proto,
// env.proto): arrays and values as little-endian bytes, one copy each way.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
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
void put(std::span<const T> values, std::string* bytes) {
  bytes->assign(reinterpret_cast<const char*>(values.data()), values.size_bytes());
}
template <typename T>
void put(const std::vector<T>& values, std::string* bytes) {
  put(std::span<const T>(values), bytes);
}
// The bytes of one value.
template <typename T>
std::string bytes_of(const T& value) {
  std::string bytes;
  put(std::span<const T>(&value, 1), &bytes);
  return bytes;
}
// Fills `out` from `bytes`; false (and `out` untouched) when the sizes differ.
template <typename T>
bool get_into(const std::string& bytes, std::span<T> out) {
  if (bytes.size() != out.size_bytes()) return false;
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return true;
}
// The values in `bytes`; false when its size is not a whole number of T.
template <typename T>
bool get(const std::string& bytes, std::vector<T>* values) {
  if (bytes.size() % sizeof(T) != 0) return false;
  values->resize(bytes.size() / sizeof(T));
  return get_into(bytes, std::span<T>(*values));
}
// One value from `bytes`; false when they are not its size.
template <typename T>
bool get_value(const std::string& bytes, T* value) {
  return get_into(bytes, std::span<T>(value, 1));
}

}  // namespace replicator::rl::remote_wire
