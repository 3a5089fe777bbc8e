// `replicator launch -n P [--local-replicas L] [--store URL] [--host ADDR] -- prog args...`:
// starts P processes of a gloo job on this machine and watches them.
//
// Each child gets REPLICATOR_ENGINE=gloo, REPLICATOR_RANK, REPLICATOR_WORLD_SIZE and
// REPLICATOR_STORE (by default a fresh file:// folder, removed at the end), plus
// REPLICATOR_LOCAL_REPLICAS and REPLICATOR_HOST when given. With --store, every launch also
// sets a fresh REPLICATOR_JOB (unless the environment has one), so that runs sharing one
// Redis do not meet each other's keys.
//
// One thread watches everything with poll(): a signalfd for SIGCHLD, SIGINT and SIGTERM
// (blocked in the launcher), and the stdout and stderr pipes of every child. Output is
// printed line by line, each line prefixed with "[rank i] " and written with one write(2),
// so that lines of different ranks never interleave. The first child to exit non-zero or
// die by a signal is reported in one line; the others get SIGTERM, then SIGKILL 2 s later.
// SIGINT and SIGTERM sent to the launcher are forwarded to every child.
//
// Each child runs in its own process group, so that signals reach the processes it starts
// too (a shell's children, for one) and a Ctrl-C at the terminal reaches the children only
// through the launcher; children read stdin from /dev/null, except rank 0 when the launcher's
// stdin is not a terminal (a pipe or a file is handed to rank 0).
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/command.h"
#include "replicator/errors.h"

extern char** environ;

namespace replicator::apps {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kKillGrace = std::chrono::seconds(2);
// After the last child exited, how long output of processes it left behind is still read.
constexpr auto kDrainGrace = std::chrono::seconds(1);
// A line longer than this is printed in pieces rather than held in memory.
constexpr std::size_t kMaxLine = std::size_t{1} << 20;

struct LaunchFlags {
  int processes = 0;
  std::optional<int> local_replicas;
  std::string store;
  std::string host;
  std::vector<std::string> command;
};

// Writes all of `text` to `fd`; gives up quietly if the reader went away.
void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

void say(const std::string& line) { write_all(STDERR_FILENO, "replicator launch: " + line + "\n"); }

std::string errno_text(int error) { return std::strerror(error); }

// One output pipe of a child: its read end and the part of a line not yet printed.
struct Stream {
  int fd = -1;
  int out = STDOUT_FILENO;  // where its lines go
  std::string pending;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // as waitpid reports it, once it has exited
  Stream streams[2];
};

// Prints the complete lines of `data` (after what `stream` holds), prefixed; keeps the rest.
// At end of file (`eof`) the rest is printed as a line too.
void emit(Stream& stream, const std::string& prefix, std::string_view data, bool eof) {
  stream.pending.append(data);
  std::string out;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = stream.pending.find('\n', begin);
    if (end == std::string::npos) break;
    out += prefix;
    out.append(stream.pending, begin, end + 1 - begin);
    begin = end + 1;
  }
  stream.pending.erase(0, begin);
  if ((eof && !stream.pending.empty()) || stream.pending.size() >= kMaxLine) {
    out += prefix;
    out += stream.pending;
    out += '\n';
    stream.pending.clear();
  }
  if (!out.empty()) write_all(stream.out, out);
}

std::string describe_status(int rank, int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = strsignal(signal);
    return "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(signal) +
           " (" + (name != nullptr ? name : "unknown") + ")";
  }
  return "rank " + std::to_string(rank) + " exited with status " +
         std::to_string(WEXITSTATUS(status));
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// Removes the default store folder at the end, whatever happens.
struct TempDir {
  std::filesystem::path path;
  ~TempDir() {
    if (path.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Blocks the signals the launcher watches and restores the mask on exit.
struct SignalGuard {
  sigset_t old_mask{};
  struct sigaction old_pipe {};
  int fd = -1;
  SignalGuard() {
    sigset_t watched;
    sigemptyset(&watched);
    sigaddset(&watched, SIGCHLD);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    sigprocmask(SIG_BLOCK, &watched, &old_mask);
    fd = signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) throw Error("launch: signalfd failed: " + errno_text(errno));
    // A closed stdout (`| head`) must not kill the launcher while children still run.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old_pipe);
  }
  ~SignalGuard() {
    // Consume what arrived after the last look, so that unblocking does not act on it.
    signalfd_siginfo info;
    while (fd >= 0 && ::read(fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    }
    if (fd >= 0) ::close(fd);
    sigaction(SIGPIPE, &old_pipe, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  }
};

class Launcher {
 public:
  explicit Launcher(const LaunchFlags& flags) : flags_(flags) {}
  ~Launcher() {
    for (Child& child : children_) {
      for (Stream& s : child.streams) {
        if (s.fd >= 0) ::close(s.fd);
      }
    }
  }

  int run();

 private:
  std::vector<std::string> environment(int rank) const;
  // Starts rank `rank`; returns the error of posix_spawn (0 on success).
  int spawn(int rank, const std::vector<std::string>& env);
  void reap();
  void signal_all(int signal);
  void handle_signals(int fd);
  void read_stream(Child& child, Stream& stream);
  bool any_running() const;
  bool any_open() const;

  const LaunchFlags& flags_;
  std::string store_;
  std::string job_;
  std::vector<Child> children_;
  std::optional<int> failure_;  // index of the first child that failed
  std::optional<Clock::time_point> kill_at_;
  bool killed_ = false;
};

std::vector<std::string> Launcher::environment(int rank) const {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"REPLICATOR_ENGINE", "gloo"},
      {"REPLICATOR_RANK", std::to_string(rank)},
      {"REPLICATOR_WORLD_SIZE", std::to_string(flags_.processes)},
      {"REPLICATOR_STORE", store_},
  };
  if (flags_.local_replicas) {
    ours.emplace_back("REPLICATOR_LOCAL_REPLICAS", std::to_string(*flags_.local_replicas));
  }
  if (!flags_.host.empty()) ours.emplace_back("REPLICATOR_HOST", flags_.host);
  ours.emplace_back("REPLICATOR_HOST_PROCESSES", std::to_string(flags_.processes));
  if (!job_.empty()) ours.emplace_back("REPLICATOR_JOB", job_);

  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry = *e;
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [ours_name, value] : ours) replaced = replaced || name == ours_name;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  return env;
}

int Launcher::spawn(int rank, const std::vector<std::string>& env) {
  Child& child = children_[rank];
  child.rank = rank;
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  for (auto& p : pipes) {
    if (pipe2(p, O_CLOEXEC) != 0) return errno;
  }
  child.streams[0] = {pipes[0][0], STDOUT_FILENO, {}};
  child.streams[1] = {pipes[1][0], STDERR_FILENO, {}};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const bool pass_stdin = rank == 0 && !isatty(STDIN_FILENO);
  if (!pass_stdin) {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, pipes[0][1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipes[1][1], STDERR_FILENO);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGPIPE}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<char*> argv;
  for (const std::string& arg : flags_.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  pid_t pid = -1;
  const int error = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(pipes[0][1]);
  ::close(pipes[1][1]);
  if (error != 0) return error;
  child.pid = pid;
  child.running = true;
  return 0;
}

void Launcher::reap() {
  for (Child& child : children_) {
    if (!child.running) continue;
    int status = 0;
    const pid_t pid = waitpid(child.pid, &status, WNOHANG);
    if (pid != child.pid) continue;
    child.running = false;
    child.status = status;
    if (failed(status) && !failure_) {
      failure_ = child.rank;
      say(describe_status(child.rank, status));
      signal_all(SIGTERM);
      kill_at_ = Clock::now() + kKillGrace;
    }
  }
}

// Signals the process group of every child: those still running and, once one has failed,
// what the exited ones left behind.
void Launcher::signal_all(int signal) {
  for (const Child& child : children_) {
    if (child.pid <= 0) continue;
    if (child.running || failure_) ::kill(-child.pid, signal);
  }
}

void Launcher::handle_signals(int fd) {
  signalfd_siginfo info;
  while (::read(fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int signal = static_cast<int>(info.ssi_signo);
    if (signal == SIGCHLD) {
      reap();
    } else {
      signal_all(signal);  // SIGINT, SIGTERM: forwarded
    }
  }
}

void Launcher::read_stream(Child& child, Stream& stream) {
  char buffer[65536];
  const std::string prefix = "[rank " + std::to_string(child.rank) + "] ";
  const ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    emit(stream, prefix, {}, true);
    ::close(stream.fd);
    stream.fd = -1;
    return;
  }
  emit(stream, prefix, std::string_view(buffer, static_cast<std::size_t>(n)), false);
}

bool Launcher::any_running() const {
  for (const Child& child : children_) {
    if (child.running) return true;
  }
  return false;
}

bool Launcher::any_open() const {
  for (const Child& child : children_) {
    for (const Stream& s : child.streams) {
      if (s.fd >= 0) return true;
    }
  }
  return false;
}

int Launcher::run() {
  TempDir temp;
  store_ = flags_.store;
  if (store_.empty()) {
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    std::string pattern =
        ((ec ? std::filesystem::path("/tmp") : base) / "replicator-launch-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw Error("launch: cannot create the store folder " + pattern + ": " + errno_text(errno));
    }
    temp.path = pattern;
    store_ = "file://" + pattern;
  } else if (const char* job = std::getenv("REPLICATOR_JOB"); job == nullptr || *job == '\0') {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    job_ = "launch-" + std::string(host) + "-" + std::to_string(getpid()) + "-" +
           std::to_string(std::time(nullptr));
  }

  SignalGuard signals;
  children_.resize(static_cast<std::size_t>(flags_.processes));
  for (int rank = 0; rank < flags_.processes; ++rank) {
    const int error = spawn(rank, environment(rank));
    if (error != 0) {
      say("cannot start '" + flags_.command[0] + "' as rank " + std::to_string(rank) + ": " +
          errno_text(error));
      failure_ = rank;
      signal_all(SIGKILL);
      while (any_running()) {
        for (Child& child : children_) {
          if (child.running && waitpid(child.pid, &child.status, 0) == child.pid) {
            child.running = false;
          }
        }
      }
      return 2;
    }
  }

  std::optional<Clock::time_point> drain_until;
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;  // streams[i] is polled at fds[i + 1]
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (kill_at_ && !killed_ && now >= *kill_at_) {
      signal_all(SIGKILL);
      killed_ = true;
    }
    if (!any_running()) {
      if (!drain_until) drain_until = now + kDrainGrace;
      if (!any_open() || now >= *drain_until) break;
    }

    fds.clear();
    streams.clear();
    fds.push_back({signals.fd, POLLIN, 0});
    std::vector<Child*> owners;
    for (Child& child : children_) {
      for (Stream& s : child.streams) {
        if (s.fd < 0) continue;
        fds.push_back({s.fd, POLLIN, 0});
        streams.push_back(&s);
        owners.push_back(&child);
      }
    }
    int timeout_ms = -1;
    auto bound = [&](Clock::time_point until) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
      const int ms = static_cast<int>(std::max<long long>(left, 0));
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    };
    if (kill_at_ && !killed_) bound(*kill_at_);
    if (drain_until) bound(*drain_until);

    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw Error("launch: poll failed: " + errno_text(errno));
    }
    if (fds[0].revents != 0) handle_signals(signals.fd);
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*owners[i - 1], *streams[i - 1]);
    }
  }
  // Print what is left of lines whose writer is gone, and close the rest.
  for (Child& child : children_) {
    const std::string prefix = "[rank " + std::to_string(child.rank) + "] ";
    for (Stream& s : child.streams) {
      if (s.fd < 0) continue;
      emit(s, prefix, {}, true);
      ::close(s.fd);
      s.fd = -1;
    }
  }
  return failure_ ? 1 : 0;
}

}  // namespace

Command add_launch(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "Start P processes of a gloo job on this machine: replicator launch -n P -- prog args...");
  sub->add_option("-n,--processes", flags->processes, "Number of processes P")->required();
  sub->add_option("--local-replicas", flags->local_replicas,
                  "Replicas (threads) per process; sets REPLICATOR_LOCAL_REPLICAS");
  sub->add_option("--store", flags->store,
                  "Rendezvous store, file:///dir or redis://host:port (default: a fresh "
                  "temporary folder, removed at the end)");
  sub->add_option("--host", flags->host,
                  "Address the other processes reach each process at; sets REPLICATOR_HOST");
  sub->add_option("command", flags->command,
                  "The program and its arguments, after --: every process runs it");
  sub->footer(
      "Each line a process prints is shown prefixed with [rank i]. If a process exits non-zero "
      "or dies by a signal, the others are stopped (SIGTERM, then SIGKILL after 2 s) and the "
      "launcher exits 1.");
  return {sub, [flags]() -> int {
            if (flags->processes < 1) {
              throw ConfigError("launch: -n must be at least 1, got " +
                                std::to_string(flags->processes));
            }
            if (flags->local_replicas && *flags->local_replicas < 1) {
              throw ConfigError("launch: --local-replicas must be at least 1, got " +
                                std::to_string(*flags->local_replicas));
            }
            if (flags->command.empty()) {
              throw ConfigError(
                  "launch: no program to run; usage: replicator launch -n P [--local-replicas "
                  "L] [--store URL] [--host ADDR] -- prog args...");
            }
            Launcher launcher(*flags);
            return launcher.run();
          }};
}

}  // namespace replicator::apps
