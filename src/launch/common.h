// What the plain launcher and the elastic agent share: their own lines on stderr, and the
// checks of the options they both take.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace replicator::launch::detail {

// Writes all of `text` to `fd` (retrying short writes and EINTR); gives up quietly if the
// reader went away. Never throws.
void write_all(int fd, std::string_view text) noexcept;
// Prints "replicator launch: <line>" on stderr with one write(2).
void say(const std::string& line);

// Throws ConfigError, naming the flag of `replicator launch`, when `command` is empty,
// `processes` is below 1 or `local_replicas` below 1.
void check_job(int processes, const std::optional<int>& local_replicas,
               const std::vector<std::string>& command);

}  // namespace replicator::launch::detail
