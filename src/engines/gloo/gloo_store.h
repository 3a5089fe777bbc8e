// GlooStore: the store the gloo engine's processes meet in (a shared folder or a Redis
// server), as Gloo's rendezvous wants it, with the job's keys in a namespace of their own
// ("<job>/..."). The processes also announce failures in it. (The elastic agent's store,
// with keys that are overwritten and deleted, is replicator/rendezvous/store.h.)
//
// file:///abs/folder (created if missing; every process must see the same folder) or
// redis://host[:port] (port 6379 by default; [IPv6]:port accepted).
#pragma once

#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "replicator/rendezvous/key_value.h"
#include "replicator/rendezvous/store.h"
#include "src/engines/gloo/gloo.h"

namespace replicator::detail {

struct GlooStoreUrl {
  bool redis = false;
  std::string path;  // file store: absolute folder
  std::string host;  // redis
  int port = 6379;
  std::string text;  // as given
};

// Parses a store URL. Throws ConfigError showing the URL, what is wrong and the accepted
// forms. Never blocks.
GlooStoreUrl parse_gloo_store_url(const std::string& url);

// What an exception (from Gloo or the standard library) says, whatever its type.
std::string describe_error(const std::exception_ptr& error);

// A wait on the store reached the rendezvous deadline.
struct StoreTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// FileStore::check is protected; the transport needs a look that does not wait.
class FileStore final : public gloo::rendezvous::FileStore {
 public:
  using gloo::rendezvous::FileStore::check;
  using gloo::rendezvous::FileStore::FileStore;
};

// Connects to the Redis at host:port and hangs up. Gloo's RedisStore keeps hiredis's context
// when its connection fails (its constructor throws without freeing it): a Redis nobody
// answers is found here first, so that the failure leaks nothing. Blocks up to 2 s to
// connect; throws std::runtime_error with hiredis's reason.
void reach_redis(const std::string& host, int port);

// The job's store: Gloo's FileStore or RedisStore, or a caller's KeyValueStore, behind a mutex
// (Gloo's are not thread-safe),
// with every wait bounded by the rendezvous deadline (Gloo's own get() waits a fixed 30 s)
// and a look that does not wait (`has`). Store failures become rendezvous::StoreError naming
// the store; a wait past the deadline throws StoreTimeout.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens the store (connects to Redis, or makes the folder). Throws rendezvous::StoreError
  // naming the store when it cannot be used. `job` names the key namespace (see key()).
  GlooStore(GlooStoreUrl url, std::string job) : url_(std::move(url)), job_(std::move(job)) {
    if (url_.redis) {
      try {
        reach_redis(url_.host, url_.port);
        redis_ = std::make_unique<gloo::rendezvous::RedisStore>(url_.host, url_.port);
      } catch (...) {
        throw rendezvous::StoreError(
            "store: cannot reach the Redis store at " + url_.host + ":" +
                std::to_string(url_.port) + " (" + describe_error(std::current_exception()) +
                "); start redis-server there, or fix the store URL '" + url_.text + "'",
            url_.text);
      }
      return;
    }
    std::error_code ec;
    std::filesystem::create_directories(url_.path, ec);
    if (!std::filesystem::is_directory(url_.path)) {
      throw rendezvous::StoreError("store: the file store folder '" + url_.path +
                                       "' does not exist and cannot be created" +
                                       (ec ? " (" + ec.message() + ")" : std::string()) +
                                       "; give a writable folder that every process sees, as "
                                       "file:///dir",
                                   url_.text);
    }
    try {
      file_ = std::make_unique<FileStore>(url_.path);
    } catch (...) {
      throw rendezvous::StoreError("store: cannot use the file store folder '" + url_.path +
                                       "': " + describe_error(std::current_exception()),
                                   url_.text);
    }
  }

  // A store of the caller's (replicator/rendezvous/key_value.h); url().text is its
  // describe(). `kv` is not null.
  GlooStore(std::shared_ptr<rendezvous::KeyValueStore> kv, std::string job)
      : url_{.text = kv->describe()}, job_(std::move(job)), kv_(std::move(kv)) {}

  const GlooStoreUrl& url() const { return url_; }
  const std::string& job() const { return job_; }
  // The key `name` in this job's namespace: "<job>/<name>".
  std::string key(std::string_view name) const { return job_ + "/" + std::string(name); }
  void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }

  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard lock(mu_);
    guarded("writing key '" + key + "'", [&] {
      if (kv_) {
        kv_->set(key, data);
      } else if (redis_) {
        redis_->set(key, data);
      } else {
        file_->set(key, data);
      }
    });
  }

  std::vector<char> get(const std::string& key) override {
    wait({key});
    std::lock_guard lock(mu_);
    std::vector<char> value;
    guarded("reading key '" + key + "'", [&] {
      value = kv_ ? kv_->get(key) : redis_ ? redis_->get(key) : file_->get(key);
    });
    return value;
  }

  void wait(const std::vector<std::string>& keys) override { wait_until(keys, deadline_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    // Gloo passes its context timeout, which is ours; zero means "no timeout" to Gloo.
    Clock::time_point until = deadline_;
    if (timeout > std::chrono::milliseconds::zero())
      until = std::min(until, Clock::now() + timeout);
    wait_until(keys, until);
  }

  // Whether every key is set. Does not wait.
  bool has(const std::vector<std::string>& keys) {
    std::lock_guard lock(mu_);
    bool found = false;
    guarded("looking up keys", [&] {
      found = kv_ ? kv_->check(keys) : redis_ ? redis_->check(keys) : file_->check(keys);
    });
    return found;
  }

 private:
  template <typename Fn>
  void guarded(const std::string& what, Fn&& fn) {
    try {
      fn();
    } catch (...) {
      throw rendezvous::StoreError("store " + url_.text + ": " + what +
                                       " failed: " + describe_error(std::current_exception()),
                                   url_.text);
    }
  }

  void wait_until(const std::vector<std::string>& keys, Clock::time_point until) {
    while (!has(keys)) {
      if (Clock::now() >= until) {
        std::string names;
        for (const auto& key : keys) names += (names.empty() ? "" : ", ") + key;
        throw StoreTimeout("waiting for " + names);
      }
      std::this_thread::sleep_for(kStorePoll);
    }
  }

  static constexpr std::chrono::milliseconds kStorePoll{10};

  const GlooStoreUrl url_;
  const std::string job_;
  std::mutex mu_;
  std::unique_ptr<FileStore> file_;
  std::unique_ptr<gloo::rendezvous::RedisStore> redis_;
  std::shared_ptr<rendezvous::KeyValueStore> kv_;
  Clock::time_point deadline_ = Clock::time_point::max();
};

}  // namespace replicator::detail
