// PerReplica<T>: one value for each LOCAL replica of this process, indexed by local replica
// id or by a ReplicaContext. Returned by Replicator::run and Replicator::per_replica.
// Not thread-safe by itself: replica i may touch element i while the others touch theirs.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include "replicator/replica_context.h"

namespace replicator {

template <typename T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::deque<T> values) : values_(std::move(values)) {}

  // This replica's value. The context must belong to the Replicator that made this value.
  T& operator[](const ReplicaContext& ctx) { return values_[ctx.local_replica_id()]; }
  const T& operator[](const ReplicaContext& ctx) const { return values_[ctx.local_replica_id()]; }
  T& operator[](int local_replica) { return values_[static_cast<std::size_t>(local_replica)]; }
  const T& operator[](int local_replica) const {
    return values_[static_cast<std::size_t>(local_replica)];
  }

  int size() const { return static_cast<int>(values_.size()); }
  auto begin() { return values_.begin(); }
  auto end() { return values_.end(); }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }

 private:
  std::deque<T> values_;  // a deque: no vector<bool> bit packing, stable references
};

// What run() returns for a step that returns void: only the replica count.
template <>
class PerReplica<void> {
 public:
  PerReplica() = default;
  explicit PerReplica(int size) : size_(size) {}
  int size() const { return size_; }

 private:
  int size_ = 0;
};

}  // namespace replicator
