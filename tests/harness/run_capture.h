// A child process run to its end with its stdout and stderr captured apart, for the tests
// that run a program and read what it said (the launcher, the gloo transport's Redis case).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace replicator::harness {

struct Ran {
  int status = -1;  // as waitpid reports it
  std::string out;
  std::string err;
  double ms = 0;
};

// Runs `argv` (argv[0] looked up in PATH) with `extra_env` added to this process's
// environment; BLOCKS until it exits. Never throws: a child that cannot start leaves
// `status` -1 and says why in `err`.
inline Ran run_capture(const std::vector<std::string>& argv,
                       const std::vector<std::string>& extra_env = {}) {
  Ran ran;
  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return ran;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& e : extra_env) env.push_back(e);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  close(err[1]);
  if (rc == 0) {
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&ran.out, &ran.err};
    int open = 2;
    while (open > 0) {
      if (poll(fds, 2, -1) < 0) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char buffer[4096];
        const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
        if (n <= 0) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open;
        } else {
          sinks[i]->append(buffer, static_cast<std::size_t>(n));
        }
      }
    }
    waitpid(pid, &ran.status, 0);
  } else {
    close(out[0]);
    close(err[0]);
    ran.err = "cannot start " + argv[0] + ": " + std::strerror(rc);
  }
  ran.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return ran;
}

// The exit status a waitpid status says, or -1 for a child that did not exit (a signal).
inline int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

}  // namespace replicator::harness
