// The rendezvous store: where the processes and agents of a job meet, on a folder every host
// sees or on a Redis server. The elastic agent (replicator/launch/elastic.h) keeps a job's
// generations in it and workers beat their heartbeats through it; a program can keep its own
// keys there too.
//
// A URL names a root inside the store:
//   file:///shared/folder/job   key "a/b" is the file folder/job/a/b (written to a
//                               temporary file, then renamed)
//   redis://host[:port]/job     key "a/b" is the Redis key "job/a/b" (port 6379 by default;
//                               [IPv6]:port accepted)
// Roots and keys are names of letters, digits, '.', '_' and '-' joined by '/' (no empty
// name, no "." or ".."). Unlike the write-once stores of Gloo and c10d, keys may be
// overwritten, counted atomically and deleted a whole tree at a time, so that each
// generation of a job gets a fresh key space and the old ones go away.
//
// Errors: a URL that cannot name a store is a ConfigError (showing the URL, what is wrong
// and the accepted forms); a store that cannot be reached or fails an operation is a
// StoreError naming the store and the operation; an invalid key is an InvalidArgument.
//
// Thread-compatible: one Store per thread (a Redis connection is not shared). Processes and
// hosts may use the same store at once: every operation is atomic among them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "replicator/errors.h"

namespace replicator::rendezvous {

// The store could not be reached, or an operation on it failed. `url()` is the store's URL
// as given.
class StoreError : public Error {
 public:
  StoreError(const std::string& message, std::string url) : Error(message), url_(std::move(url)) {}
  const std::string& url() const { return url_; }

 private:
  std::string url_;
};

struct StoreUrl {
  bool redis = false;
  std::string folder;  // file: the root folder (absolute, no trailing slash)
  std::string host;    // redis
  int port = 6379;
  std::string prefix;  // redis: the root, without a trailing slash
  std::string text;    // as given
};

// Parses a store URL (trailing slashes of the root are dropped). Throws ConfigError showing
// the URL, what is wrong and the accepted forms. Never blocks.
StoreUrl parse_store_url(const std::string& url);

// The URL of the tree `name` ("gen3") under the root of `url`, in the same form. Never
// blocks; throws nothing but std::bad_alloc.
std::string child_url(const StoreUrl& url, std::string_view name);

// The last name of the root: the job's name ("job" in redis://h:6379/team/job). Never
// blocks; throws nothing but std::bad_alloc.
std::string root_name(const StoreUrl& url);

class Store {
 public:
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const StoreUrl& url() const { return url_; }
  // The URL of the tree `name` under this store's root (see child_url).
  std::string child(std::string_view name) const { return child_url(url_, name); }

  // Sets `key` to `value`, replacing what it held; readers see the old or the new value,
  // never a mix. Blocks for one store round trip. Throws StoreError on a store failure,
  // InvalidArgument on an invalid key (as do all below).
  virtual void put(const std::string& key, std::string_view value) = 0;
  // Sets `key` only if it is not set yet; returns whether this call set it. Of several
  // callers at once, on any hosts, exactly one wins. Blocks for one round trip.
  virtual bool create(const std::string& key, std::string_view value) = 0;
  // The value of `key`, or nothing when it is not set. Blocks for one round trip; never
  // waits for the key.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  // Adds `delta` to the counter `key` (0 when not set) and returns the new value; atomic
  // among all processes and hosts that use the store. Blocks while another adds to the same
  // key.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Deletes `key` and every key below it ("gen3" deletes "gen3/x" and "gen3/y/z"). Keys
  // written meanwhile may survive. Blocks for a round trip per key on Redis.
  virtual void remove_tree(const std::string& key) = 0;

 protected:
  explicit Store(StoreUrl url) : url_(std::move(url)) {}

 private:
  const StoreUrl url_;
};

// Opens the store at `url`: makes the root folder, or connects to Redis (waiting at most
// 5 s; each later command at most 30 s). Throws ConfigError for a URL that names no store
// (the string form) or a Redis store in a build without hiredis, StoreError when the store
// cannot be used (a folder that cannot be made, a Redis server that does not answer).
std::unique_ptr<Store> open_store(const StoreUrl& url);
std::unique_ptr<Store> open_store(const std::string& url);

}  // namespace replicator::rendezvous
