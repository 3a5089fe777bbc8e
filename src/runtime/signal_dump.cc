#include "src/runtime/signal_dump.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace replicator::detail {
namespace {

// A signal handler is process-wide, so this state is too (the one exception to "no global
// state"): the pipe's write end for the handler, the disposition to chain to and restore.
std::atomic<int> pipe_write_fd{-1};
struct sigaction previous_action;  // written before the handler is installed

void on_sigusr1(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const int fd = pipe_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char byte = 'd';
    [[maybe_unused]] const ssize_t n = write(fd, &byte, 1);
  }
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction) previous_action.sa_sigaction(sig, info, context);
  } else if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN) {
    previous_action.sa_handler(sig);
  }
  errno = saved_errno;
}

struct Registry {
  std::mutex lifecycle;  // add/remove, start/stop
  std::mutex dumps_mu;   // the list; held while the thread runs the dumps
  std::vector<const std::function<void()>*> dumps;
  int pipe_read = -1;
  std::thread thread;

  void loop() {
    SignalDump::block_in_this_thread();  // unblocked below: this thread takes SIGUSR1
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
    char bytes[64];
    for (;;) {
      const ssize_t n = read(pipe_read, bytes, sizeof bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      if (std::find(bytes, bytes + n, 'q') != bytes + n) return;
      std::lock_guard lock(dumps_mu);
      for (const auto* dump : dumps) (*dump)();
    }
  }

  void start() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "SIGUSR1 dump: pipe");
    }
    // The handler must never block on a full pipe.
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    pipe_read = fds[0];
    pipe_write_fd.store(fds[1], std::memory_order_relaxed);
    thread = std::thread([this] { loop(); });
    struct sigaction action {};
    action.sa_sigaction = on_sigusr1;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGUSR1, nullptr, &previous_action);
    sigaction(SIGUSR1, &action, nullptr);
  }

  void stop() {
    struct sigaction current {};
    sigaction(SIGUSR1, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigusr1) {
      sigaction(SIGUSR1, &previous_action, nullptr);
    }
    const int fd = pipe_write_fd.exchange(-1, std::memory_order_relaxed);
    const char quit = 'q';
    while (write(fd, &quit, 1) < 0 && errno == EINTR) {
    }
    thread.join();
    close(fd);
    close(pipe_read);
    pipe_read = -1;
  }
};

// Never destroyed: a program may exit while a Replicator still lives (a Python process that
// never destroys its process group, one that calls exit()), and destroying a joinable thread
// would terminate it.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

SignalDump::SignalDump(std::function<void()> dump) : dump_(std::move(dump)) {
  Registry& r = registry();
  std::lock_guard lifecycle(r.lifecycle);
  bool first = false;
  {
    std::lock_guard lock(r.dumps_mu);
    first = r.dumps.empty();
  }
  if (first) r.start();
  std::lock_guard lock(r.dumps_mu);
  r.dumps.push_back(&dump_);
}

SignalDump::~SignalDump() {
  Registry& r = registry();
  std::lock_guard lifecycle(r.lifecycle);
  bool last = false;
  {
    std::lock_guard lock(r.dumps_mu);
    r.dumps.erase(std::find(r.dumps.begin(), r.dumps.end(), &dump_));
    last = r.dumps.empty();
  }
  if (last) r.stop();
}

void SignalDump::block_in_this_thread() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
}

}  // namespace replicator::detail
