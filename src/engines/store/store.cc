#include "src/engines/store/store.h"

#include <gloo/common/error.h>

#include <charconv>

#include "src/base/text.h"

namespace replicator::detail {
namespace {

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  throw ConfigError("store URL " + detail::quoted(url) + " is not valid (" + why +
                    "); expected file:///absolute/folder or redis://host:port");
}

}  // namespace

StoreUrl parse_store_url(const std::string& url) {
  StoreUrl parsed;
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
  std::string_view port;
  if (rest.starts_with('[')) {  // [IPv6]:port
    const auto close = rest.find(']');
    if (close == std::string_view::npos) bad_url(url, "unclosed '[' in the host");
    parsed.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') bad_url(url, "expected ':port' after the host");
      port = rest.substr(1);
      if (port.empty()) bad_url(url, "empty port");
    }
  } else {
    const auto colon = rest.find(':');
    parsed.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = rest.substr(colon + 1);
      if (port.empty()) bad_url(url, "empty port");
      // "redis://::1" would otherwise read as host "::", port 1.
      if (port.find(':') != std::string_view::npos) {
        bad_url(url, "an IPv6 address goes in brackets, as redis://[::1]:6379");
      }
    }
  }
  if (parsed.host.empty()) bad_url(url, "no host");
  if (parsed.host.find_first_of("[]") != std::string::npos) {
    bad_url(url, "a '[' or ']' inside the host; only an IPv6 address is bracketed, whole");
  }
  if (detail::has_control(parsed.host) || parsed.host.find(' ') != std::string::npos) {
    bad_url(url, "the host holds a space or a control character");
  }
  if (parsed.host.find_first_of("/?#@") != std::string::npos) {
    bad_url(url,
            "the host holds '/', '?', '#' or '@'; paths, queries and passwords are not "
            "supported");
  }
  if (!port.empty()) {
    int value = 0;
    const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || ptr != port.data() + port.size() || value < 1 || value > 65535) {
      bad_url(url, "the port must be a number from 1 to 65535, got " + detail::quoted(port));
    }
    parsed.port = value;
  }
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
