// The "host[:port]" part of a redis:// URL, read the same way by the gloo store
// (redis://host:port) and the elastic store (redis://host:port/job).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace replicator::detail {

// Reads `address` ("host", "host:port", "[v6]" or "[v6]:port") into `host` and `port` (left
// as it is when the address names none). Returns why it is not valid (a phrase for an error
// message: no host, an IPv6 address outside brackets, a port outside 1..65535, a space,
// control byte, '/', '?', '#' or '@' in the host), or nothing when it is. Never throws but
// std::bad_alloc.
std::optional<std::string> read_redis_address(std::string_view address, std::string& host,
                                              int& port);

}  // namespace replicator::detail
