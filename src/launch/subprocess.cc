#include "replicator/launch/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "replicator/errors.h"

namespace replicator::launch {

std::string self_path() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

void exec_self(char** argv) noexcept {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    ::execv(self, argv);
  }
  ::execv("/proc/self/exe", argv);
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {

// The last `limit` bytes of the file at `path`, from a line's start where one falls inside.
std::string file_tail(const std::string& path, std::size_t limit) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return {};
  std::string text;
  std::array<char, 4096> chunk;
  std::size_t n = 0;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), f)) > 0) {
    text.append(chunk.data(), n);
    if (text.size() > 2 * limit) text.erase(0, text.size() - limit);
  }
  std::fclose(f);
  if (text.size() > limit) {
    text.erase(0, text.size() - limit);
    const std::size_t line = text.find('\n');
    if (line != std::string::npos) text.erase(0, line + 1);
  }
  return text;
}

}  // namespace

std::string run_capture(const std::string& command) {
  char stderr_path[] = "/tmp/replicator-stderr-XXXXXX";
  const int fd = ::mkstemp(stderr_path);
  if (fd < 0)
    throw Error("cannot make a file for stderr: " + std::generic_category().message(errno));
  ::close(fd);
  const std::string shell = "(" + command + ") 2>" + quote(stderr_path);
  FILE* pipe = ::popen(shell.c_str(), "r");
  if (pipe == nullptr) {
    ::unlink(stderr_path);
    throw Error("cannot start: " + command);
  }
  std::string out;
  std::array<char, 4096> chunk;
  while (std::fgets(chunk.data(), chunk.size(), pipe) != nullptr) out += chunk.data();
  const int status = ::pclose(pipe);
  const std::string err = status != 0 ? file_tail(stderr_path, 3000) : std::string();
  ::unlink(stderr_path);
  if (status != 0) {
    throw Error("benchmark run failed (exit status " + std::to_string(WEXITSTATUS(status)) +
                "): " + command + (err.empty() ? "" : "\nits stderr ended with:\n" + err));
  }
  return out;
}

namespace {

// Whether a TCP socket can be bound to 127.0.0.1:`port` now.
bool port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int free_loopback_ports(int count) {
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    int base = -1;
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      base = ntohs(address.sin_port);
    }
    ::close(fd);
    if (base < 0 || base + count > 65535) continue;
    bool all = true;
    for (int p = base; p < base + count && all; ++p) all = port_free(p);
    if (all) return base;
  }
  throw Error("cannot find " + std::to_string(count) + " free consecutive ports");
}

BackgroundChild::BackgroundChild(const std::vector<std::string>& args,
                                 std::chrono::milliseconds grace)
    : grace_(grace) {
  if (args.empty()) throw Error("BackgroundChild: no program to start");
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  const int error = ::posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0)
    throw Error("cannot start " + args[0] + ": " + std::generic_category().message(error));
}

bool BackgroundChild::exited_by(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    const pid_t done = ::waitpid(pid_, nullptr, WNOHANG);
    if (done == pid_ || (done < 0 && errno != EINTR)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

BackgroundChild::~BackgroundChild() {
  using std::chrono::steady_clock;
  if (exited_by(steady_clock::now() + grace_)) return;
  ::kill(pid_, SIGTERM);
  if (exited_by(steady_clock::now() + std::chrono::seconds(3))) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace replicator::launch
