#include "replicator/launch/workers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "replicator/errors.h"
#include "src/launch/common.h"

extern char** environ;

namespace replicator::launch {
namespace {

// A line longer than this is printed in pieces rather than held in memory.
constexpr std::size_t kMaxLine = std::size_t{1} << 20;

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

// Prints the complete lines of `data` (after what `pending` holds), prefixed; keeps the
// rest. At end of file (`eof`) the rest is printed as a line too.
void emit(std::string& pending, int out_fd, const std::string& prefix, std::string_view data,
          bool eof) {
  pending.append(data);
  std::string out;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = pending.find('\n', begin);
    if (end == std::string::npos) break;
    out += prefix;
    out.append(pending, begin, end + 1 - begin);
    begin = end + 1;
  }
  pending.erase(0, begin);
  if ((eof && !pending.empty()) || pending.size() >= kMaxLine) {
    out += prefix;
    out += pending;
    out += '\n';
    pending.clear();
  }
  if (!out.empty()) detail::write_all(out_fd, out);
}

std::string prefix_of(const std::string& name) { return "[" + name + "] "; }

}  // namespace

void detail::write_all(int fd, std::string_view text) noexcept {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& ours) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry = *e;
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [ours_name, value] : ours) replaced = replaced || name == ours_name;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : ours) {
    std::string entry = name;
    entry += '=';
    entry += value;
    env.push_back(std::move(entry));
  }
  return env;
}

void TempFolder::make() {
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  std::string pattern =
      ((ec ? std::filesystem::path("/tmp") : base) / "replicator-launch-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw Error("launch: cannot create the folder " + pattern + ": " + errno_text(errno));
  }
  path = pattern;
}

TempFolder::~TempFolder() {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

void detail::check_job(int processes, const std::optional<int>& local_replicas,
                       const std::vector<std::string>& command) {
  if (command.empty()) {
    throw ConfigError(
        "launch: no program to run; usage: replicator launch -n P [--local-replicas L] "
        "[--store URL] [--host ADDR] -- prog args...");
  }
  if (processes < 1) {
    throw ConfigError("launch: -n must be at least 1, got " + std::to_string(processes));
  }
  if (local_replicas && *local_replicas < 1) {
    throw ConfigError("launch: --local-replicas must be at least 1, got " +
                      std::to_string(*local_replicas));
  }
}

void detail::say(const std::string& line) {
  detail::write_all(STDERR_FILENO, "replicator launch: " + line + "\n");
}

std::string Workers::describe(const Exit& exit) {
  if (WIFSIGNALED(exit.status)) {
    const int signal = WTERMSIG(exit.status);
    const char* name = sigdescr_np(signal);  // thread-safe, unlike strsignal
    return exit.name + " was killed by signal " + std::to_string(signal) + " (" +
           (name != nullptr ? name : "unknown") + ")";
  }
  return exit.name + " exited with status " + std::to_string(WEXITSTATUS(exit.status));
}

bool Workers::failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

Workers::Workers() {
  sigset_t watched;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  sigaddset(&watched, SIGINT);
  sigaddset(&watched, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &watched, &old_mask_);
  signal_fd_ = signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) {
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    throw Error("launch: signalfd failed: " + errno_text(errno));
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &old_pipe_);
}

Workers::~Workers() {
  for (Child& child : children_) {
    if (child.running) {
      ::kill(-child.pid, SIGKILL);
      int status = 0;
      waitpid(child.pid, &status, 0);
    }
  }
  clear();
  // Consume what arrived after the last look, so that unblocking does not act on it.
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
  }
  ::close(signal_fd_);
  sigaction(SIGPIPE, &old_pipe_, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void Workers::start(int rank, const std::vector<std::string>& command,
                    const std::vector<std::string>& env, const std::string& name) {
  const std::string shown = name.empty() ? "rank " + std::to_string(rank) : name;
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int report[2] = {-1, -1};  // the child writes errno here if exec fails
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) {
    const int error = errno;
    for (int fd : {out[0], out[1], err[0], err[1], report[0], report[1]}) {
      if (fd >= 0) ::close(fd);
    }
    throw Error("launch: cannot make pipes for " + shown + ": " + errno_text(error));
  }
  // Everything the child needs is made before fork: it only calls async-signal-safe code.
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const bool pass_stdin = rank == 0 && !isatty(STDIN_FILENO);
  const pid_t parent = getpid();
  sigset_t none;
  sigemptyset(&none);

  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    for (int fd : {out[0], out[1], err[0], err[1], report[0], report[1]}) ::close(fd);
    throw Error("launch: fork failed: " + errno_text(error));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the launcher died before prctl
    if (!pass_stdin) {
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    }
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGPIPE}) signal(s, SIG_DFL);
    // In the forked child (one thread), where sigprocmask is async-signal-safe.
    sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe)
    execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    (void)!::write(report[1], &error, sizeof(error));
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ::close(report[1]);
  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = ::read(report[0], &exec_error, sizeof(exec_error));
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof(exec_error))) {
    int status = 0;
    waitpid(pid, &status, 0);
    ::close(out[0]);
    ::close(err[0]);
    throw Error("launch: cannot start '" + command[0] + "' as " + shown + ": " +
                errno_text(exec_error));
  }
  Child child;
  child.rank = rank;
  child.name = shown;
  child.pid = pid;
  child.running = true;
  child.streams[0] = {out[0], STDOUT_FILENO, {}};
  child.streams[1] = {err[0], STDERR_FILENO, {}};
  children_.push_back(std::move(child));
}

void Workers::reap() {
  for (Child& child : children_) {
    if (!child.running) continue;
    int status = 0;
    if (waitpid(child.pid, &status, WNOHANG) != child.pid) continue;
    child.running = false;
    exits_.push_back({child.rank, status, child.name});
  }
}

// Signals the process group of every child: those still running and, once stopping, what
// the exited ones left behind.
void Workers::signal_all(int signal) {
  for (const Child& child : children_) {
    if (child.pid <= 0) continue;
    if (child.running || stopping_) ::kill(-child.pid, signal);
  }
}

void Workers::stop(std::chrono::milliseconds grace) {
  if (stopping_) return;
  stopping_ = true;
  signal_all(SIGTERM);
  kill_at_ = Clock::now() + grace;
}

void Workers::kill_rank(int rank) {
  for (const Child& child : children_) {
    if (child.rank == rank && child.pid > 0) ::kill(-child.pid, SIGKILL);
  }
}

void Workers::handle_signals() {
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int signal = static_cast<int>(info.ssi_signo);
    if (signal == SIGCHLD) {
      reap();
    } else {
      if (interrupted_ == 0) interrupted_ = signal;
      signal_all(signal);  // SIGINT, SIGTERM: forwarded
    }
  }
}

void Workers::read_stream(Child& child, Stream& stream) {
  char buffer[65536];
  const ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    emit(stream.pending, stream.out, prefix_of(child.name), {}, true);
    ::close(stream.fd);
    stream.fd = -1;
    return;
  }
  emit(stream.pending, stream.out, prefix_of(child.name),
       std::string_view(buffer, static_cast<std::size_t>(n)), false);
}

bool Workers::any_running() const {
  for (const Child& child : children_) {
    if (child.running) return true;
  }
  return false;
}

bool Workers::any_open() const {
  for (const Child& child : children_) {
    for (const Stream& s : child.streams) {
      if (s.fd >= 0) return true;
    }
  }
  return false;
}

void Workers::pump(std::chrono::milliseconds timeout) {
  Clock::time_point now = Clock::now();
  if (kill_at_ && now >= *kill_at_) {
    signal_all(SIGKILL);
    kill_at_.reset();
  }
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, Stream*>> owners;  // owners[i] is polled at fds[i + 1]
  fds.push_back({signal_fd_, POLLIN, 0});
  for (Child& child : children_) {
    for (Stream& s : child.streams) {
      if (s.fd < 0) continue;
      fds.push_back({s.fd, POLLIN, 0});
      owners.emplace_back(&child, &s);
    }
  }
  auto wait = timeout;
  if (kill_at_) {
    wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(*kill_at_ - now));
  }
  const int ready =
      ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait.count(), 0)));
  if (ready < 0) {
    if (errno == EINTR) return;
    throw Error("launch: poll failed: " + errno_text(errno));
  }
  if (fds[0].revents != 0) handle_signals();
  for (std::size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_stream(*owners[i - 1].first, *owners[i - 1].second);
  }
  // A thread of the process that does not block SIGCHLD (one started before this object:
  // LibTorch's OpenMP pool, a user's) may take the signal instead of the signalfd: look for
  // exits every time, not only when the signal arrives here.
  reap();
}

std::vector<Workers::Exit> Workers::take_exits() {
  std::vector<Exit> exits;
  exits.swap(exits_);
  return exits;
}

void Workers::clear() {
  for (Child& child : children_) {
    for (Stream& s : child.streams) {
      if (s.fd < 0) continue;
      emit(s.pending, s.out, prefix_of(child.name), {}, true);
      ::close(s.fd);
      s.fd = -1;
    }
  }
  children_.erase(
      std::remove_if(children_.begin(), children_.end(), [](const Child& c) { return !c.running; }),
      children_.end());
  if (children_.empty()) {
    stopping_ = false;
    kill_at_.reset();
  }
}

}  // namespace replicator::launch
