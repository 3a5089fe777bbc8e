// Child processes a program starts for itself, apart from a job's workers (workers.h): a
// command run to its end with its stdout captured (a benchmark's peer, a job of our own), a
// program kept running in the background for as long as an object lives (an env server, a
// remote actor), free ports on the loopback for them, and this program's own path, to run
// itself again or exec itself with a changed environment.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace replicator::launch {

// The path of this program (/proc/self/exe). Throws std::filesystem errors if unreadable.
std::string self_path();

// Replaces this process with this program again, with `argv` and the current environment,
// through the program's real path, so that it keeps its name in ps and top (not "exe").
// Does not return when the exec succeeds; returns when it fails. Never blocks; never
// throws.
void exec_self(char** argv) noexcept;

// `s` quoted for the shell (single quotes).
std::string quote(const std::string& s);

// Runs `command` through the shell and returns its stdout; its stderr goes to a temporary
// file. BLOCKS until it exits. Throws Error if it cannot start or exits non-zero (the message
// names the command, its status and the last lines of its stderr).
std::string run_capture(const std::string& command);

// The first of `count` consecutive TCP ports on 127.0.0.1 that are free now, from the
// kernel's ephemeral range. Another program may still take one before the caller's server
// binds it (which then fails naming the address). Never blocks. Throws Error when none is
// found.
int free_loopback_ports(int count = 1);

// A program run in the background for as long as this object lives (an env server, a
// remote actor), its stdout and stderr sent to /dev/null. When the object goes, the child
// is given `grace` to exit by itself, then SIGTERM, then 3 s more, then SIGKILL.
class BackgroundChild {
 public:
  // Starts `args` (args[0] is looked up in PATH). Never blocks. Throws Error naming the
  // program when it cannot be started.
  explicit BackgroundChild(const std::vector<std::string>& args,
                           std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  // BLOCKS until the child has exited: at most `grace` + 3 s. Never throws.
  ~BackgroundChild();
  BackgroundChild(const BackgroundChild&) = delete;
  BackgroundChild& operator=(const BackgroundChild&) = delete;

 private:
  // Whether the child has exited by `deadline` (reaps it if so).
  bool exited_by(std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  std::chrono::milliseconds grace_;
};

}  // namespace replicator::launch
