// The store URL parser (parse_gloo_store_url) on any text.
//
// Promises: ConfigError showing the URL (control bytes escaped), or a URL a process can use: a file
// store names an absolute folder; a Redis store names a host (no path, query, password, space) and
// a port in 1..65535; and written back in its plain form (file://DIR, redis://HOST:PORT, an IPv6
// host in brackets) it parses to the same store.
#include <string>

#include "replicator/errors.h"
#include "src/base/text.h"
#include "src/engines/gloo/gloo_store.h"
#include "tests/fuzz/fuzz.h"

namespace rd = replicator::detail;
using replicator::fuzz::require;

namespace {

// The URL of `url`'s store in its plain form.
std::string plain(const rd::GlooStoreUrl& url) {
  if (!url.redis) return "file://" + url.path;
  const bool ipv6 = url.host.find(':') != std::string::npos;
  return "redis://" + (ipv6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  rd::GlooStoreUrl url;
  try {
    url = rd::parse_gloo_store_url(text);
  } catch (const replicator::ConfigError& e) {
    require(std::string(e.what()).find(rd::quoted(text)) != std::string::npos,
            "the error shows the URL, control bytes escaped");
    return 0;
  }
  require(url.text == text, "the URL is kept as given");
  if (url.redis) {
    require(!url.host.empty(), "a Redis store names a host");
    require(url.host.find_first_of("/?#@ ") == std::string::npos && !rd::has_control(url.host),
            "a Redis host holds no path, query, password, space or control byte");
    require(url.port >= 1 && url.port <= 65535, "a Redis port is in 1..65535");
  } else {
    require(!url.path.empty() && url.path[0] == '/', "a file store names an absolute folder");
    require(!rd::has_control(url.path), "a file store's folder holds no control byte");
  }
  rd::GlooStoreUrl again;
  try {
    again = rd::parse_gloo_store_url(plain(url));
  } catch (const replicator::ConfigError& e) {
    require(false, "'" + text + "' parses, but its plain form does not: " + e.what());
  }
  require(again.redis == url.redis && again.path == url.path && again.host == url.host &&
              again.port == url.port,
          "'" + text + "' and its plain form '" + plain(url) + "' name the same store");
  return 0;
}
