// HostCores: where the replica threads of the processes of one host tell each other the core
// each started its last step on, so that two do not share one (the runtime's WorkerPool
// moves a thread off a core a lower-numbered replica of the host holds). An engine whose
// processes share this host's memory keeps it there (ShmMesh) and hands it to the runtime
// through its traits (TransportTraits::host_cores); the runtime knows nothing else of it.
//
// Threads: publish_core() by the thread of its lane; core_of() from any thread at any time.
// Every call is a load or a store of one word: never blocks, never throws.
#pragma once

namespace replicator::detail {

class HostCores {
 public:
  // This process among those of the board (0..size()-1, in the order of their replicas),
  // how many there are, and the lanes (replica threads) of each.
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual int lanes() const noexcept = 0;

  // Writes the core the thread of `lane` of this process started its last step on.
  virtual void publish_core(int lane, int cpu) noexcept = 0;
  // The core `process`'s thread of `lane` last published (this process's own too); -1 where
  // none was published, or out of range. Another process's may be stale by one step.
  virtual int core_of(int process, int lane) const noexcept = 0;

 protected:
  ~HostCores() = default;  // not owned through this interface
};

}  // namespace replicator::detail
