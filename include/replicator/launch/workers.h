// Workers: the processes a launcher starts on this host, and their output. The plain
// launcher (launcher.h) and the elastic agent (elastic.h) are built on it; a program of its
// own can supervise processes with it the same way.
//
// Each child runs in its own process group (signals reach what it starts too) and dies with
// the launcher (PR_SET_PDEATHSIG: a killed launcher leaves no worker behind). Its output
// is printed line by line, each line prefixed with "[rank i] " (or "[<name>] ") and written
// with one write(2), so that lines of different children never interleave. Children read stdin from
// /dev/null, except rank 0 when the launcher's stdin is not a terminal.
//
// Signals: while a Workers lives, SIGCHLD, SIGINT and SIGTERM are blocked and read through a
// signalfd; SIGINT and SIGTERM are forwarded to every child and remembered (interrupted()).
// SIGPIPE is ignored (a closed stdout must not kill the launcher).
//
// Single-threaded: one thread drives it through pump().
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace replicator::launch {

class Workers {
 public:
  using Clock = std::chrono::steady_clock;

  struct Exit {
    int rank = 0;
    int status = 0;    // as waitpid reports it
    std::string name;  // as start() was given it
  };

  // Throws Error when the signalfd cannot be made.
  Workers();
  // Kills (SIGKILL) and reaps the children still running; restores the signal mask.
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  // Starts `command` as rank `rank` with environment `env` (NAME=value entries); its lines
  // and its exit are shown under `name` ("rank <rank>" when empty). A rank may be started
  // again once its process exited. Throws Error naming the program when it cannot be started
  // (not found, not executable).
  void start(int rank, const std::vector<std::string>& command, const std::vector<std::string>& env,
             const std::string& name = {});

  // Waits up to `timeout` for output, exits and signals, and handles what came: prints
  // output, reaps children, forwards SIGINT/SIGTERM, sends SIGKILL to what is left once the
  // grace of stop() has passed. Blocks at most `timeout`. Throws Error if poll fails.
  // Exits are found at every call, also in a process whose other threads (started before
  // this object, with SIGCHLD not blocked) take the signals; SIGINT and SIGTERM are
  // forwarded only when they reach the signalfd, so such threads should block them.
  void pump(std::chrono::milliseconds timeout);

  // The children that exited since the last call, in the order seen.
  std::vector<Exit> take_exits();
  // Sends SIGTERM to every child's process group, and SIGKILL `grace` later (through pump).
  // Idempotent. Never blocks.
  void stop(std::chrono::milliseconds grace);
  // Sends SIGKILL to the process group of `rank` at once.
  void kill_rank(int rank);
  // Whether a child still runs; whether a child's output is still open.
  bool any_running() const;
  bool any_open() const;
  // SIGINT or SIGTERM reached the launcher (the number of the first), or 0.
  int interrupted() const { return interrupted_; }
  // Prints what is left of unfinished lines, closes every pipe and forgets the children.
  void clear();

  // "rank 1 exited with status 3" / "rank 1 was killed by signal 9 (Killed)" (the exit's name
  // in place of "rank 1").
  static std::string describe(const Exit& exit);
  static bool failed(int status);

 private:
  struct Stream {
    int fd = -1;
    int out = 1;  // where its lines go
    std::string pending;
  };
  struct Child {
    int rank = 0;
    std::string name;
    pid_t pid = -1;
    bool running = false;
    std::array<Stream, 2> streams;  // stdout, stderr
  };

  void reap();
  void signal_all(int signal);
  void read_stream(Child& child, Stream& stream);
  void handle_signals();

  std::vector<Child> children_;
  std::vector<Exit> exits_;
  std::optional<Clock::time_point> kill_at_;
  bool stopping_ = false;
  int interrupted_ = 0;
  int signal_fd_ = -1;
  sigset_t old_mask_{};
  struct sigaction old_pipe_ {};
};

// The launcher's environment with `ours` added, replacing entries of the same names. Never
// blocks; throws nothing but std::bad_alloc.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& ours);

// A fresh folder under the temporary directory (make()), removed with all it holds at the
// end, whatever happens.
struct TempFolder {
  std::filesystem::path path;
  // Throws Error when the folder cannot be made.
  void make();
  ~TempFolder();
};

}  // namespace replicator::launch
