#include "src/rendezvous/heartbeat.h"

#include <cstdio>
#include <memory>

#include "replicator/errors.h"
#include "replicator/rendezvous/store.h"

namespace replicator::detail {

Heartbeat::Heartbeat(const std::string& url, std::string key, std::chrono::milliseconds interval)
    : url_(url), key_(std::move(key)), interval_(interval) {
  rendezvous::parse_store_url(url_);  // a bad URL fails here, in the caller's thread
  thread_ = std::thread([this] { beat(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Heartbeat::beat() {
  std::unique_ptr<rendezvous::Store> store;
  bool reported = false;
  std::uint64_t count = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    const bool stopping = stop_;
    lock.unlock();
    try {
      if (!store) store = rendezvous::open_store(url_);
      store->put(key_, stopping ? std::string("stopped") : std::to_string(++count));
    } catch (const std::exception& e) {
      store.reset();  // connect again at the next beat
      if (!reported) {
        std::fprintf(stderr, "replicator: warning: heartbeat to %s failed: %s\n", url_.c_str(),
                     e.what());
        reported = true;
      }
    }
    lock.lock();
    if (stopping) return;
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

}  // namespace replicator::detail
