// ElasticStore: what the agents of an elastic job (`replicator launch --nnodes`) and the
// heartbeats of their workers keep in the rendezvous store. Unlike Gloo's stores, whose keys
// are written once, it overwrites keys, counts atomically, and deletes a whole tree of keys,
// so that each generation of a job gets a fresh key space and the old ones go away.
//
// URLs name a root inside the store:
//   file:///shared/folder/job   a folder every host sees; key "a/b" is the file
//                               folder/job/a/b (written to a temporary file, then renamed)
//   redis://host[:port]/job     key "a/b" is the Redis key "job/a/b"
// `child(name)` is the URL of the tree `name` under the root, in the same form.
//
// Thread-compatible: one object per thread (the Redis connection is not shared).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace replicator::detail {

struct ElasticUrl {
  bool redis = false;
  std::string folder;  // file: the root folder (absolute)
  std::string host;    // redis
  int port = 6379;
  std::string prefix;  // redis: the root, without a trailing slash
  std::string text;    // as given
};

// Parses an elastic store URL. The root (the job's folder or name) must not be empty and
// may hold letters, digits, '.', '_', '-' and '/' (no "..", no empty component). Throws
// ConfigError showing the URL, what is wrong and the accepted forms. Never blocks.
ElasticUrl parse_elastic_url(const std::string& url);

// The URL of the tree `name` ("gen3") under the root of `url`. Never blocks or throws.
std::string child_url(const ElasticUrl& url, std::string_view name);

// The last component of the root: the job's name ("job" in redis://h:6379/team/job).
std::string root_name(const ElasticUrl& url);

class ElasticStore {
 public:
  // Opens the store: makes the folder, or connects to Redis (waits at most 5 s). Throws
  // ConfigError naming the store when it cannot be used.
  explicit ElasticStore(ElasticUrl url);
  ~ElasticStore();
  ElasticStore(const ElasticStore&) = delete;
  ElasticStore& operator=(const ElasticStore&) = delete;

  const ElasticUrl& url() const { return url_; }

  // Sets `key` to `value`, replacing what it held; readers see the old or the new value,
  // never a mix. Blocks for one store round trip. Throws ConfigError on a store failure.
  void put(const std::string& key, std::string_view value);
  // Sets `key` only if it is not set yet; returns whether this call set it. Of several
  // callers at once exactly one wins. Throws ConfigError on a store failure.
  bool create(const std::string& key, std::string_view value);
  // The value of `key`, or nothing when it is not set. Throws ConfigError.
  std::optional<std::string> get(const std::string& key);
  // Adds `delta` to the counter `key` (0 when not set) and returns the new value; atomic
  // among all processes and hosts that use the store. Throws ConfigError.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Deletes `key` and every key below it ("gen3" deletes "gen3/x" and "gen3/y/z"). Keys
  // written meanwhile may survive. Throws ConfigError.
  void remove_tree(const std::string& key);

 private:
  struct Redis;
  std::string path(const std::string& key) const;
  std::string redis_key(const std::string& key) const;

  ElasticUrl url_;
  std::unique_ptr<Redis> redis_;
};

}  // namespace replicator::detail
