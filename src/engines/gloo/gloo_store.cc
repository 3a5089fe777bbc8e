#include "src/engines/gloo/gloo_store.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include "src/base/text.h"
#include "src/engines/gloo/gloo.h"
#include "src/rendezvous/redis_address.h"

namespace replicator::detail {
namespace {

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  throw ConfigError("store URL " + detail::quoted(url) + " is not valid (" + why +
                    "); expected file:///absolute/folder or redis://host:port");
}

}  // namespace

void reach_redis(const std::string& host, int port) {
  const timeval connect_timeout{.tv_sec = 2, .tv_usec = 0};
  redisContext* context = redisConnectWithTimeout(host.c_str(), port, connect_timeout);
  if (context == nullptr) throw std::runtime_error("cannot allocate a Redis context");
  const std::string why = context->err != 0 ? context->errstr : "";
  redisFree(context);
  if (!why.empty()) throw std::runtime_error("connecting to Redis: " + why);
}

GlooStoreUrl parse_gloo_store_url(const std::string& url) {
  GlooStoreUrl parsed;
  parsed.text = url;
  constexpr std::string_view kFile = "file://";
  constexpr std::string_view kRedis = "redis://";
  const std::string_view text = url;
  if (text.starts_with(kFile)) {
    parsed.path = std::string(text.substr(kFile.size()));
    if (parsed.path.empty() || parsed.path[0] != '/') {
      bad_url(url, "a file store names an absolute folder, with three slashes: file:///dir");
    }
    if (detail::has_control(parsed.path)) bad_url(url, "the folder holds a control character");
    return parsed;
  }
  if (!text.starts_with(kRedis)) {
    bad_url(url, url.empty() ? "it is empty" : "unknown scheme");
  }
  parsed.redis = true;
  std::string_view rest = text.substr(kRedis.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (const auto why = read_redis_address(rest, parsed.host, parsed.port)) bad_url(url, *why);
  return parsed;
}

std::string describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const gloo::EnforceNotMet& e) {
    return e.msg();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace replicator::detail
