// SIGUSR1 -> flight-recorder dumps, for a job that looks hung. Installed while at least one
// registration lives (each Replicator with Config::trace_signal holds one) and removed with
// the last, when the previous disposition comes back (unless the program installed another
// handler meanwhile, which is then left alone).
//
// The handler only writes one byte to a pipe (async-signal-safe; a full pipe drops it) and
// then calls the handler the program had installed before, if any, so a program that uses
// SIGUSR1 itself keeps getting it. A library thread reads the pipe and runs every
// registration's dump there, never in the handler. That thread is the only library thread
// that takes SIGUSR1 (the replica threads block it). Config::trace_signal = false
// (REPLICATOR_TRACE_SIGNAL=off) leaves SIGUSR1 entirely to the program.
#pragma once

#include <functional>

namespace replicator::detail {

class SignalDump {
 public:
  // Registers `dump`, run on the dump thread at each SIGUSR1 until this is destroyed;
  // installs the handler and starts the thread for the first registration. Throws
  // std::system_error when the pipe, the thread or the handler cannot be made.
  explicit SignalDump(std::function<void()> dump);
  // Unregisters (waits for a dump of it in progress); the last one restores the previous
  // handler and joins the thread.
  ~SignalDump();
  SignalDump(const SignalDump&) = delete;
  SignalDump& operator=(const SignalDump&) = delete;

  // Blocks SIGUSR1 in the calling thread (a library thread that must not take it).
  static void block_in_this_thread();

 private:
  std::function<void()> dump_;
};

}  // namespace replicator::detail
