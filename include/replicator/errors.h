// Errors raised by replicator. Every error derives from replicator::Error and carries
// structured fields; its message is one sentence a user can act on.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace replicator {

// Root of the hierarchy. `replica()` is the global id of the replica that raised it, when
// known (run() fills it in before rethrowing).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::optional<int> replica = std::nullopt)
      : std::runtime_error(message), replica_(replica) {}
  std::optional<int> replica() const { return replica_; }
  void set_replica(int replica) { replica_ = replica; }

 private:
  std::optional<int> replica_;
};

// A call got an argument it cannot use: a wrong size, root, pair list or option.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A bad configuration value (environment variable or flag).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A data file is missing, corrupt or truncated. `path()` names the file.
class DataError : public Error {
 public:
  DataError(const std::string& message, std::string path)
      : Error(message), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Replicas issued different collectives at the same point of their sequence. Raised on
// every replica; `sequence()` is the collective's sequence number within the step and
// `calls()` holds, per replica id, a description of what that replica called.
class CollectiveMismatch : public Error {
 public:
  CollectiveMismatch(const std::string& message, std::uint64_t sequence,
                     std::vector<std::string> calls)
      : Error(message), sequence_(sequence), calls_(std::move(calls)) {}
  std::uint64_t sequence() const { return sequence_; }
  const std::vector<std::string>& calls() const { return calls_; }

 private:
  std::uint64_t sequence_;
  std::vector<std::string> calls_;
};

// A blocking call passed its deadline. `missing()` lists the replicas that never arrived.
class Timeout : public Error {
 public:
  Timeout(const std::string& message, std::string op, std::uint64_t sequence,
          std::chrono::milliseconds deadline, std::vector<int> missing)
      : Error(message),
        op_(std::move(op)),
        sequence_(sequence),
        deadline_(deadline),
        missing_(std::move(missing)) {}
  const std::string& op() const { return op_; }
  std::uint64_t sequence() const { return sequence_; }
  std::chrono::milliseconds deadline() const { return deadline_; }
  const std::vector<int>& missing() const { return missing_; }

 private:
  std::string op_;
  std::uint64_t sequence_;
  std::chrono::milliseconds deadline_;
  std::vector<int> missing_;
};

// This replica was released from a collective because another replica failed.
// `cause_replica()` is the replica whose failure released it.
class Aborted : public Error {
 public:
  Aborted(const std::string& message, std::optional<int> cause_replica)
      : Error(message), cause_replica_(cause_replica) {}
  std::optional<int> cause_replica() const { return cause_replica_; }

 private:
  std::optional<int> cause_replica_;
};

// A peer process was lost (crashed, killed or unreachable).
class PeerLost : public Error {
 public:
  PeerLost(const std::string& message, int peer) : Error(message), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

// A step function threw something that is not a replicator::Error. run() rethrows it
// wrapped in this type, tagged with the replica id; `original()` holds the exception.
class ReplicaFailed : public Error {
 public:
  ReplicaFailed(const std::string& message, int replica, std::exception_ptr original)
      : Error(message, replica), original_(std::move(original)) {}
  const std::exception_ptr& original() const { return original_; }

 private:
  std::exception_ptr original_;
};

}  // namespace replicator
