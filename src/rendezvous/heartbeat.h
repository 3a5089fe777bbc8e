// Heartbeat: a thread that shows, through the rendezvous store, that this process still
// runs. The agent of an elastic job (`replicator launch --nnodes`) reads the beats of its
// workers and restarts the job when one stops changing (a stopped or wedged process).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace replicator::detail {

class Heartbeat {
 public:
  // Starts a thread that writes a counter to `key` of the rendezvous store at `url` (see
  // replicator/rendezvous/store.h) every `interval`. Throws ConfigError when the URL is malformed;
  // a store that fails later is reported once on stderr and tried again at the next beat.
  Heartbeat(const std::string& url, std::string key, std::chrono::milliseconds interval);
  // Writes "stopped" to the key (the agent stops watching it) and joins the thread. Blocks
  // for at most one store round trip. Never throws.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void beat();

  const std::string url_;
  const std::string key_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace replicator::detail
