// The rendezvous store on Redis: SET, SET NX, GET, INCRBY, and DEL over a SCAN of the tree.
// Built when hiredis is found (REPLICATOR_HAVE_REDIS); otherwise open_store refuses
// redis:// URLs with a ConfigError.
#include "src/rendezvous/backends.h"

#if defined(REPLICATOR_HAVE_REDIS)
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <vector>
#endif

namespace replicator::rendezvous::detail {

#if defined(REPLICATOR_HAVE_REDIS)
namespace {

using Reply = std::unique_ptr<redisReply, void (*)(void*)>;

class RedisStore final : public Store {
 public:
  explicit RedisStore(const StoreUrl& url) : Store(url) {
    const timeval connect_timeout{5, 0};
    context_ = redisConnectWithTimeout(url.host.c_str(), url.port, connect_timeout);
    if (context_ == nullptr || context_->err != 0) {
      const std::string why = context_ != nullptr ? context_->errstr : "out of memory";
      if (context_ != nullptr) redisFree(context_);
      throw StoreError("rendezvous store: cannot reach the Redis server at " + url.host + ":" +
                           std::to_string(url.port) + " (" + why +
                           "); start redis-server there, or fix the URL '" + url.text + "'",
                       url.text);
    }
    const timeval command_timeout{30, 0};
    redisSetTimeout(context_, command_timeout);
  }
  ~RedisStore() override { redisFree(context_); }

  void put(const std::string& key, std::string_view value) override {
    command({"SET", redis_key(key), std::string(value)});
  }

  bool create(const std::string& key, std::string_view value) override {
    return command({"SET", redis_key(key), std::string(value), "NX"})->type == REDIS_REPLY_STATUS;
  }

  std::optional<std::string> get(const std::string& key) override {
    Reply reply = command({"GET", redis_key(key)});
    if (reply->type != REDIS_REPLY_STRING) return std::nullopt;
    return std::string(reply->str, reply->len);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return command({"INCRBY", redis_key(key), std::to_string(delta)})->integer;
  }

  void remove_tree(const std::string& key) override {
    const std::string root = redis_key(key);
    command({"DEL", root});
    std::string cursor = "0";
    do {
      Reply reply = command({"SCAN", cursor, "MATCH", root + "/*", "COUNT", "1000"});
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) break;
      cursor.assign(reply->element[0]->str, reply->element[0]->len);
      const redisReply* keys = reply->element[1];
      for (std::size_t i = 0; i < keys->elements; ++i) {
        command({"DEL", std::string(keys->element[i]->str, keys->element[i]->len)});
      }
    } while (cursor != "0");
  }

 private:
  std::string redis_key(const std::string& key) const {
    return url().prefix + "/" + checked_key(key);
  }

  // Runs one command; throws StoreError naming the store and the command on failure.
  Reply command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const std::string& arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    void* raw =
        redisCommandArgv(context_, static_cast<int>(args.size()), argv.data(), lengths.data());
    if (raw == nullptr) {
      throw StoreError("rendezvous store " + url().text + ": " + args[0] + " failed: " +
                           (context_->errstr[0] != '\0' ? context_->errstr : "connection lost"),
                       url().text);
    }
    Reply reply(static_cast<redisReply*>(raw), freeReplyObject);
    if (reply->type == REDIS_REPLY_ERROR) {
      throw StoreError("rendezvous store " + url().text + ": " + args[0] +
                           " failed: " + std::string(reply->str, reply->len),
                       url().text);
    }
    return reply;
  }

  redisContext* context_ = nullptr;
};

}  // namespace

std::unique_ptr<Store> open_redis_store(const StoreUrl& url) {
  return std::make_unique<RedisStore>(url);
}
#else
std::unique_ptr<Store> open_redis_store(const StoreUrl& url) {
  throw ConfigError("rendezvous store " + url.text +
                    ": this build has no Redis client (hiredis was not found when it was "
                    "configured); use a file:///shared/folder/job store");
}
#endif

}  // namespace replicator::rendezvous::detail
