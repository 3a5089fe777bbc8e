#include "src/rendezvous/redis_address.h"

#include <charconv>

#include "src/base/text.h"

namespace replicator::detail {

std::optional<std::string> read_redis_address(std::string_view address, std::string& host,
                                              int& port) {
  std::string_view port_text;
  bool has_port = false;
  if (address.starts_with('[')) {  // [IPv6]:port
    const auto close = address.find(']');
    if (close == std::string_view::npos) return "unclosed '[' in the host";
    host = std::string(address.substr(1, close - 1));
    const std::string_view after = address.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return "expected ':port' after the host";
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    const auto colon = address.find(':');
    host = std::string(address.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = address.substr(colon + 1);
      has_port = true;
      // "redis://::1" would otherwise read as host "::", port 1.
      if (port_text.find(':') != std::string_view::npos) {
        return "an IPv6 address goes in brackets, as redis://[::1]:6379";
      }
    }
  }
  if (has_port && port_text.empty()) return "empty port";
  if (host.empty()) return "no host";
  if (host.find_first_of("[]") != std::string::npos) {
    return "a '[' or ']' inside the host; only an IPv6 address is bracketed, whole";
  }
  if (has_control(host) || host.find(' ') != std::string::npos) {
    return "the host holds a space or a control character";
  }
  if (host.find_first_of("/?#@") != std::string::npos) {
    return "the host holds '/', '?', '#' or '@'; paths, queries and passwords are not "
           "supported";
  }
  if (has_port) {
    int value = 0;
    const auto [ptr, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || value < 1 ||
        value > 65535) {
      return "the port must be a number from 1 to 65535, got " + quoted(port_text);
    }
    port = value;
  }
  return std::nullopt;
}

}  // namespace replicator::detail
