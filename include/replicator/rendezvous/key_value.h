// KeyValueStore: a write-once store of the caller's in which the processes of a gloo job meet,
// in place of Config::store's folder or Redis server. torch.distributed hands its backends a
// c10d Store (the TCPStore that torchrun starts); the Python backend wraps it in one of these
// so that a job started by torchrun needs no store of its own (Replicator's constructor that
// takes one, replicator.h).
//
// The engine writes each key once (its addresses, failure notices, a closing mark), reads
// keys other processes wrote, and polls for them with `check` until its rendezvous deadline;
// it never deletes. Implementations must be safe to call from several threads at once, and
// every call must return within the store's own timeout (a blocking `get` of a key that is
// set returns at once; the engine calls `get` only after `check` saw the key).
#pragma once

#include <string>
#include <vector>

namespace replicator::rendezvous {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // What the store is, for messages ("c10d TCPStore at 10.0.0.1:29500"). Never blocks.
  virtual std::string describe() const = 0;
  // Sets `key` to `value`. Blocks for one round trip. Throws on a store failure (the engine
  // reports it as a StoreError naming describe()).
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // The value of `key`, which check() has seen set. Blocks for one round trip. Throws on a
  // store failure.
  virtual std::vector<char> get(const std::string& key) = 0;
  // Whether every one of `keys` is set. Blocks for one round trip, never waits for a key.
  // Throws on a store failure.
  virtual bool check(const std::vector<std::string>& keys) = 0;
};

}  // namespace replicator::rendezvous
