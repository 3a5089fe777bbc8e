// Running the benchmarks' peers and our own jobs as child processes, and reading the JSON
// result line they print.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace replicator::apps {

// The path of this program (/proc/self/exe). Throws std::filesystem errors if unreadable.
std::string self_path();

// `s` quoted for the shell (single quotes).
std::string quote(const std::string& s);

// Runs `command` through the shell and returns its stdout. BLOCKS until it exits. Throws Error
// if it cannot start or exits non-zero (the message names the command and its status).
std::string run_capture(const std::string& command);

// The last JSON object printed in `output` (a line, possibly behind a "[rank N] " prefix)
// that has the field `field`. Throws Error naming `command` when there is none.
nlohmann::ordered_json result_with(const std::string& output, const std::string& field,
                                   const std::string& command);

// The first of `count` consecutive TCP ports on 127.0.0.1 that are free now, from the
// kernel's ephemeral range. Another program may still take one before the caller's server
// binds it (which then fails naming the address). Never blocks. Throws Error when none is
// found.
int free_loopback_ports(int count = 1);

}  // namespace replicator::apps
