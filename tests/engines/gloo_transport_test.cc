// Multi-process tests of the gloo transport (`replicator launch` itself: tests/launch/
// launcher_test.cc).
//
// One program, three roles, chosen by its first argument:
//   (none)                  a worker: one of P processes started by the launcher
//                           (`replicator launch -n P -- gloo_transport_test`); reads
//                           REPLICATOR_RANK, REPLICATOR_WORLD_SIZE, REPLICATOR_STORE (and
//                           REPLICATOR_JOB) and runs the Worker tests: exchanges on 2 lanes from
//                           2 threads, sizes 0, 1, 4099 and 3 MiB, ring shift and all-to-all,
//                           Timeout, abort, rendezvous errors, gloo::allreduce (what they cost is
//                           bench/compare_engines.sh's), point-to-point messages beside them;
//   --redis LAUNCHER        starts redis-server on a free port, runs the workers through the
//                           launcher with the Redis store, then checks the error once Redis is
//                           down (exit 77, "skipped", when redis-server is not installed);
//   --peer-lost             starts 2 processes itself (a launcher would stop rank 0 as soon as
//                           rank 1 dies): rank 1 kills itself with SIGKILL in the middle of an
//                           exchange, rank 0 must get PeerLost naming rank 1 (prints how fast).
//
// Built a second time as gloo_transport_torch_test (REPLICATOR_TEST_WITH_TORCH), linked with
// LibTorch, whose libtorch_cpu.so carries a gloo of its own: every role first runs a torch
// operation, and the worker suite must pass as in the plain build
// (tests/engines/gloo_bindings.sh checks which gloo each reference reached).
#include "src/engines/gloo/gloo_transport.h"

#ifdef REPLICATOR_TEST_WITH_TORCH
#include <torch/torch.h>
#endif

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "replicator/rendezvous/store.h"
#include "src/base/launch_env.h"
#include "tests/harness/harness.h"
#include "tests/harness/run_capture.h"

extern char** environ;

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;
using std::chrono::milliseconds;

// ---- shared helpers -------------------------------------------------------------------

std::string self_exe() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = env(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

using harness::Ran;
using harness::run_capture;

// ---- worker ---------------------------------------------------------------------------

struct World {
  int rank = 0;
  int size = 1;
  std::string store;
  std::string job;
};

World& world() {
  static World w;
  return w;
}

std::unique_ptr<Transport> make(const std::string& job_suffix, int lanes,
                                milliseconds timeout = std::chrono::seconds(60),
                                std::optional<int> size = std::nullopt) {
  GlooOptions options;
  options.rank = world().rank;
  options.size = size.value_or(world().size);
  options.store = world().store;
  options.job = world().job + "-" + job_suffix;
  options.lanes = lanes;
  options.timeout = timeout;
  options.shared_memory = env_or("REPLICATOR_SHARED_MEMORY", "on") != "off";
  return make_gloo_transport(options);
}

std::uint8_t pattern(int src, int dst, int lane, int round, std::size_t i) {
  return static_cast<std::uint8_t>(src * 37 + dst * 11 + lane * 101 + round * 7 + i * 13 +
                                   (i >> 9));
}

void fill(std::vector<std::uint8_t>& buffer, int src, int dst, int lane, int round) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = pattern(src, dst, lane, round, i);
}

// The first byte of `buffer` that differs from what `src` sent, as a message; empty if none.
std::string check(const std::vector<std::uint8_t>& buffer, int src, int dst, int lane, int round) {
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (buffer[i] != pattern(src, dst, lane, round, i)) {
      return "lane " + std::to_string(lane) + " round " + std::to_string(round) + ": " +
             std::to_string(buffer.size()) + "-byte message from " + std::to_string(src) +
             " differs at byte " + std::to_string(i);
    }
  }
  return {};
}

constexpr std::size_t kSizes[] = {0, 1, 4099, 3u << 20};

// Each process sends one message to its right neighbour and receives one from its left.
std::string ring_shift(Transport& t, int lane, int round, std::size_t bytes) {
  const int p = t.size();
  const int right = (t.rank() + 1) % p;
  const int left = (t.rank() + p - 1) % p;
  std::vector<std::uint8_t> out(bytes);
  std::vector<std::uint8_t> in(bytes, 0xee);
  fill(out, t.rank(), right, lane, round);
  const SendOp send{right, out.data(), bytes};
  const RecvOp recv{left, in.data(), bytes};
  t.exchange(lane, {&send, 1}, {&recv, 1}, Clock::now() + std::chrono::seconds(30));
  return check(in, left, t.rank(), lane, round);
}

// Each process sends a distinct message to every process, itself included.
std::string all_to_all(Transport& t, int lane, int round, std::size_t bytes) {
  const int p = t.size();
  std::vector<std::vector<std::uint8_t>> out(p, std::vector<std::uint8_t>(bytes));
  std::vector<std::vector<std::uint8_t>> in(p, std::vector<std::uint8_t>(bytes, 0xee));
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (int peer = 0; peer < p; ++peer) {
    fill(out[peer], t.rank(), peer, lane, round);
    sends.push_back({peer, out[peer].data(), bytes});
    recvs.push_back({peer, in[peer].data(), bytes});
  }
  t.exchange(lane, sends, recvs, Clock::now() + std::chrono::seconds(30));
  for (int peer = 0; peer < p; ++peer) {
    std::string error = check(in[peer], peer, t.rank(), lane, round);
    if (!error.empty()) return error;
  }
  return {};
}

TEST(Worker, RingShiftAndAllToAllOnTwoLanesFromTwoThreads) {
  auto t = make("lanes", 2);
  ASSERT_EQ(t->name(), "gloo");
  ASSERT_EQ(t->rank(), world().rank);
  // Every process runs on this host: shared memory unless it is turned off (its traits
  // tell: only it takes a message shorter than its receive).
  EXPECT_EQ(t->traits().receives_shorter, env_or("REPLICATOR_SHARED_MEMORY", "on") != "off");
  // With it, the cores of the replica threads of the host; Gloo's own all-reduce is never
  // offered to the chooser.
  EXPECT_EQ(t->traits().host_cores != nullptr, t->traits().receives_shorter);
  EXPECT_EQ(t->traits().native_sum_dtypes, 0u);
  ASSERT_EQ(t->size(), world().size);
  ASSERT_EQ(t->num_lanes(), 2);
  std::string errors[2];
  auto drive = [&](int lane) {
    try {
      for (int round = 0; round < 3; ++round) {
        for (const std::size_t bytes : kSizes) {
          // The two lanes run the two patterns in opposite orders, at the same time.
          std::string e1 =
              lane == 0 ? ring_shift(*t, lane, round, bytes) : all_to_all(*t, lane, round, bytes);
          std::string e2 =
              lane == 0 ? all_to_all(*t, lane, round, bytes) : ring_shift(*t, lane, round, bytes);
          if (!e1.empty() || !e2.empty()) {
            errors[lane] = e1.empty() ? e2 : e1;
            return;
          }
        }
      }
    } catch (const std::exception& e) {
      errors[lane] = std::string("lane ") + std::to_string(lane) + " threw: " + e.what();
    }
  };
  std::thread lane1(drive, 1);
  drive(0);
  lane1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(Worker, MessagesBetweenTwoProcessesArriveInOrder) {
  auto t = make("order", 1);
  const int p = t->size();
  const int right = (t->rank() + 1) % p;
  const int left = (t->rank() + p - 1) % p;
  // Several messages to one peer in one exchange, and across exchanges, of mixed sizes.
  const std::size_t sizes[] = {5, 0, 70000, 1, 3u << 20, 17};
  std::vector<std::vector<std::uint8_t>> out, in;
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    out.emplace_back(sizes[k]);
    in.emplace_back(sizes[k], 0xee);
    fill(out.back(), t->rank(), right, 0, static_cast<int>(k));
  }
  for (std::size_t k = 0; k < std::size(sizes); ++k) {
    sends.push_back({right, out[k].data(), sizes[k]});
    recvs.push_back({left, in[k].data(), sizes[k]});
  }
  for (int round = 0; round < 3; ++round) {
    t->exchange(0, sends, recvs, Clock::now() + std::chrono::seconds(30));
    for (std::size_t k = 0; k < std::size(sizes); ++k) {
      EXPECT_EQ(check(in[k], left, t->rank(), 0, static_cast<int>(k)), "");
    }
  }
  // An exchange of nothing, and of zero-byte messages only, returns at once.
  t->exchange(0, {}, {}, Clock::now() + std::chrono::seconds(1));
  const SendOp empty_send{right, nullptr, 0};
  const RecvOp empty_recv{left, nullptr, 0};
  t->exchange(0, {&empty_send, 1}, {&empty_recv, 1}, Clock::now() + std::chrono::seconds(1));
}

TEST(Worker, BadArgumentsAreInvalidArgument) {
  auto t = make("bad-arguments", 1);
  std::uint8_t byte = 0;
  const SendOp send{t->size(), &byte, 1};
  EXPECT_THROW(t->exchange(0, {&send, 1}, {}, Clock::now() + std::chrono::seconds(1)),
               InvalidArgument);
  EXPECT_THROW(t->exchange(1, {}, {}, Clock::now() + std::chrono::seconds(1)), InvalidArgument);
  const SendOp to_self{t->rank(), &byte, 1};
  EXPECT_THROW(t->exchange(0, {&to_self, 1}, {}, Clock::now() + std::chrono::seconds(1)),
               InvalidArgument);
}

TEST(Worker, NativeAllReduceSums) {
  auto t = make("allreduce", 1);
  const int p = t->size();
  for (const std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    std::vector<float> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<float>((t->rank() + 1) * (i % 7));
    native_of(*t).native_all_reduce_f32(data.data(), count);
    const float ranks = static_cast<float>(p * (p + 1)) / 2;
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(data[i], ranks * static_cast<float>(i % 7)) << "count " << count << " at " << i;
    }
  }
}

TEST(Worker, ReceiveThatNeverComesTimesOutNamingThePeer) {
  auto t = make("timeout", 1);
  std::uint8_t byte = 0;
  if (t->rank() == 0) {
    const RecvOp recv{1, &byte, 1};
    const auto start = Clock::now();
    try {
      t->exchange(0, {}, {&recv, 1}, start + milliseconds(300));
      ADD_FAILURE() << "no Timeout";
    } catch (const Timeout& e) {
      const double waited = ms_since(start);
      EXPECT_EQ(e.missing(), std::vector<int>{1}) << e.what();
      EXPECT_EQ(e.op(), "exchange");
      EXPECT_GE(waited, 299.0);
      EXPECT_LT(waited, 2000.0);
      EXPECT_NE(std::string(e.what()).find("process 1"), std::string::npos) << e.what();
      std::printf("Timeout after %.0f ms: %s\n", waited, e.what());
    }
    // Poisoned: every later call throws Aborted.
    EXPECT_THROW(t->exchange(0, {}, {&recv, 1}, Clock::now() + std::chrono::seconds(5)), Aborted);
    float value = 1;
    EXPECT_THROW(native_of(*t).native_all_reduce_f32(&value, 1), Aborted);
  } else if (t->rank() == 1) {
    // Rank 0 gives up on us and announces it: we are released with Aborted, not a hang
    // (the 20 s deadline would have raised Timeout).
    const RecvOp recv{0, &byte, 1};
    try {
      t->exchange(0, {}, {&recv, 1}, Clock::now() + std::chrono::seconds(20));
      ADD_FAILURE() << "no error";
    } catch (const Aborted& e) {
      EXPECT_NE(std::string(e.what()).find("process 0 failed"), std::string::npos) << e.what();
    }
  }
}

TEST(Worker, AbortReleasesLocalWaitersAndPeers) {
  auto t = make("abort", 2);
  std::uint8_t byte = 0;
  if (t->rank() == 1) {
    // A thread waits on lane 1 for a message nobody sends; abort() must release it with
    // Aborted (its 20 s deadline would have raised Timeout).
    const RecvOp recv{0, &byte, 1};
    const harness::Interrupted waited = harness::interrupt_when_blocked(
        [&] {
          return t->post(1, {}, {&recv, 1});
        },
        [&](Transport::Ticket ticket) {
          t->wait(1, ticket, Clock::now() + std::chrono::seconds(20));
        },
        [&] { t->abort("the step of the test failed on purpose", std::nullopt); });
    EXPECT_TRUE(waited.started) << "post() did not return";
    const auto aborted = harness::caught_as<Aborted>(waited.ended_with);
    ASSERT_TRUE(aborted) << "the wait ended with " << harness::describe(waited.ended_with);
    EXPECT_NE(std::string(aborted->what()).find("the step of the test failed on purpose"),
              std::string::npos)
        << aborted->what();
  } else {
    // Every other process waits for rank 1 and hears of its failure (Aborted: the 20 s
    // deadline would have raised Timeout).
    const RecvOp recv{1, &byte, 1};
    try {
      t->exchange(0, {}, {&recv, 1}, Clock::now() + std::chrono::seconds(20));
      ADD_FAILURE() << "no error";
    } catch (const Aborted& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("process 1 failed: the step of the test failed on purpose"),
                std::string::npos)
          << what;
    }
  }
}

// ---- point-to-point messages -------------------------------------------------------------

PointToPoint::Call call_of(std::size_t bytes, const char* text) {
  return {.bytes = bytes, .kind = 7, .text = text};
}

TEST(Worker, PointToPointMatchesByTagBesideTheLanes) {
  auto t = make("p2p", 1);
  PointToPoint* p2p = t->point_to_point();
  ASSERT_NE(p2p, nullptr);
  const int p = t->size();
  const int right = (t->rank() + 1) % p;
  const int left = (t->rank() + p - 1) % p;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  // Per size, a send to the right and a receive from the left, each tag on its own thread;
  // the receives are made in the reverse order of the sends' tags.
  std::vector<std::vector<std::uint8_t>> out, in;
  for (std::size_t k = 0; k < std::size(kSizes); ++k) {
    out.emplace_back(kSizes[k]);
    in.emplace_back(kSizes[k], 0xee);
    fill(out.back(), t->rank(), right, 9, static_cast<int>(k));
  }
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2 * std::size(kSizes));
  for (std::size_t k = 0; k < std::size(kSizes); ++k) {
    threads.emplace_back([&, k] {
      try {
        p2p->send(right, k, call_of(kSizes[k], "send"), out[k].data(), deadline);
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    });
  }
  for (std::size_t k = std::size(kSizes); k-- > 0;) {
    threads.emplace_back([&, k] {
      try {
        p2p->recv(left, k, call_of(kSizes[k], "recv"), in[k].data(), deadline);
      } catch (const std::exception& e) {
        errors[std::size(kSizes) + k] = e.what();
      }
    });
  }
  // The lane goes on meanwhile.
  for (int round = 0; round < 3; ++round) EXPECT_EQ(ring_shift(*t, 0, round, 4099), "");
  for (std::thread& thread : threads) thread.join();
  for (const std::string& error : errors) EXPECT_EQ(error, "");
  for (std::size_t k = 0; k < std::size(kSizes); ++k) {
    EXPECT_EQ(check(in[k], left, t->rank(), 9, static_cast<int>(k)), "");
  }
  std::uint8_t byte = 0;
  EXPECT_THROW(p2p->send(t->rank(), 0, call_of(1, "send"), &byte, deadline), InvalidArgument);
  EXPECT_THROW(p2p->recv(p, 0, call_of(1, "recv"), &byte, deadline), InvalidArgument);
  EXPECT_THROW(p2p->recv(-1, 0, call_of(1, "recv"), &byte, deadline), InvalidArgument);
}

TEST(Worker, PointToPointMismatchThrowsOnBothSides) {
  auto t = make("p2p-mismatch", 1);
  if (t->rank() > 1) return;
  std::vector<std::uint8_t> data(16, 1);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  try {
    if (t->rank() == 0) {
      t->point_to_point()->send(1, 4, call_of(8, "send(8 bytes) at a.py:1"), data.data(), deadline);
    } else {
      t->point_to_point()->recv(0, 4, call_of(16, "recv(16 bytes) at a.py:2"), data.data(),
                                deadline);
    }
    ADD_FAILURE() << "no CollectiveMismatch";
  } catch (const CollectiveMismatch& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("process 0 called send(8 bytes) at a.py:1; process 1 called recv(16 "
                        "bytes) at a.py:2"),
              std::string::npos)
        << what;
  }
  // Poisoned: the lanes refuse too.
  EXPECT_THROW(ring_shift(*t, 0, 0, 1), Aborted);
}

TEST(Worker, PointToPointReceiveThatNeverComesTimesOutNamingThePeer) {
  auto t = make("p2p-timeout", 1);
  if (t->rank() != 0) return;  // the others keep their connections open until rank 0 fails
  std::uint8_t byte = 0;
  const auto start = Clock::now();
  try {
    t->point_to_point()->recv(1, 0, call_of(1, "recv"), &byte, start + milliseconds(300));
    ADD_FAILURE() << "no Timeout";
  } catch (const Timeout& e) {
    EXPECT_EQ(e.missing(), std::vector<int>{1}) << e.what();
    EXPECT_EQ(e.op(), "recv");
    EXPECT_GE(ms_since(start), 299.0);
    EXPECT_NE(std::string(e.what()).find("process 1 did not make the matching send"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ring_shift(*t, 0, 0, 1), Aborted);
}

TEST(Worker, AbortReleasesAPointToPointReceive) {
  auto t = make("p2p-abort", 1);
  if (t->rank() != 1) return;
  // A receive that would wait 20 s is released by abort() at once.
  std::uint8_t byte = 0;
  const harness::Interrupted waited = harness::interrupt_when_blocked(
      [] { return 0; },
      [&](int) {
        t->point_to_point()->recv(0, 5, call_of(1, "recv"), &byte,
                                  Clock::now() + std::chrono::seconds(20));
      },
      [&] { t->abort("the step of the test failed on purpose", std::nullopt); });
  const auto aborted = harness::caught_as<Aborted>(waited.ended_with);
  ASSERT_TRUE(aborted) << "the receive ended with " << harness::describe(waited.ended_with);
}

TEST(Worker, RendezvousTimeoutSaysWhoJoined) {
  const int p = world().size;
  const auto start = Clock::now();
  try {
    make("missing-one", 1, milliseconds(1500), p + 1);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    const std::string joined =
        std::to_string(p) + " of " + std::to_string(p + 1) + " processes joined";
    EXPECT_NE(what.find(joined), std::string::npos) << what;
    EXPECT_NE(what.find("missing: rank " + std::to_string(p)), std::string::npos) << what;
    EXPECT_LT(ms_since(start), 10000.0);
    if (world().rank == 0) std::printf("rendezvous timeout: %s\n", what.c_str());
  }
}

// Bad URLs are ConfigErrors; a store that cannot be reached is a StoreError naming it.
TEST(Worker, BadStoresAreConfigOrStoreErrors) {
  GlooOptions options;
  options.rank = 0;
  options.size = 1;
  for (const std::string url :
       {"", "file://relative/dir", "http://example.com", "redis://", "redis://host:99999",
        "redis://host:", "redis://[::1", "redis://::1", "redis://a]:1", "redis://h st:1"}) {
    options.store = url;
    try {
      make_gloo_transport(options);
      ADD_FAILURE() << "no error for " << url;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + url + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("file:///"), std::string::npos) << what;
      EXPECT_NE(what.find("redis://host:port"), std::string::npos) << what;
    }
  }
  // Nobody listens on port 1: the message names the Redis it tried.
  options.store = "redis://127.0.0.1:1";
  try {
    make_gloo_transport(options);
    ADD_FAILURE() << "no error";
  } catch (const rendezvous::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:1 "), std::string::npos) << e.what();
    EXPECT_EQ(e.url(), options.store);
  }
  // A process of size 1 needs nobody else.
  options.store = world().store;
  options.job = world().job + "-alone-" + std::to_string(world().rank);
  auto alone = make_gloo_transport(options);
  std::uint8_t in = 0;
  const std::uint8_t out = 42;
  const SendOp send{0, &out, 1};
  const RecvOp recv{0, &in, 1};
  alone->exchange(0, {&send, 1}, {&recv, 1}, Clock::now() + std::chrono::seconds(1));
  EXPECT_EQ(in, 42);
  // The same job again finds its keys: refused, with a hint.
  try {
    make_gloo_transport(options);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("earlier run"), std::string::npos) << e.what();
  }
}

int run_worker() {
  const char* rank = env("REPLICATOR_RANK");
  const char* size = env("REPLICATOR_WORLD_SIZE");
  const char* store = env("REPLICATOR_STORE");
  if (rank == nullptr || size == nullptr || store == nullptr) {
    std::fprintf(stderr,
                 "gloo_transport_test: REPLICATOR_RANK, REPLICATOR_WORLD_SIZE and "
                 "REPLICATOR_STORE are not set; run it as `replicator launch -n 2 -- "
                 "gloo_transport_test`\n");
    return 2;
  }
  world().rank = std::atoi(rank);
  world().size = std::atoi(size);
  world().store = store;
  world().job = env_or("REPLICATOR_JOB", "gloo-test");
  if (world().size < 2) {
    std::fprintf(stderr, "gloo_transport_test: needs at least 2 processes\n");
    return 2;
  }
  // Every process must run the same tests in the same order: only --gtest_filter, given to
  // all of them alike, narrows them.
  if (GTEST_FLAG_GET(filter) == "*") GTEST_FLAG_SET(filter, "Worker.*");
  return RUN_ALL_TESTS();
}

// ---- peer lost ------------------------------------------------------------------------

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Rank 1 dies by SIGKILL in the middle of an exchange; rank 0 must get PeerLost naming it.
int run_peer_lost_worker() {
  world().rank = std::atoi(env_or("REPLICATOR_RANK", "0").c_str());
  world().size = 2;
  world().store = env_or("REPLICATOR_STORE", "");
  world().job = "peer-lost";
  auto t = make("main", 1);
  if (t->rank() == 1) {
    // The kill time goes to rank 0 first (steady_clock is CLOCK_MONOTONIC: one clock for
    // every process of the machine), then a thread kills this process at that time while
    // the main thread is inside an exchange.
    const std::int64_t kill_at = steady_ns() + 300'000'000;
    const SendOp send{0, &kill_at, sizeof(kill_at)};
    t->exchange(0, {&send, 1}, {}, Clock::now() + std::chrono::seconds(30));
    std::thread killer([kill_at] {
      std::this_thread::sleep_until(Clock::time_point(std::chrono::nanoseconds(kill_at)));
      raise(SIGKILL);
    });
    killer.detach();
    std::vector<std::uint8_t> big(3u << 20);
    const RecvOp recv{0, big.data(), big.size()};
    t->exchange(0, {}, {&recv, 1}, Clock::now() + std::chrono::seconds(30));
    std::fprintf(stderr, "rank 1: the exchange returned, but it should never complete\n");
    return 1;
  }
  std::int64_t kill_at = 0;
  const RecvOp first{1, &kill_at, sizeof(kill_at)};
  t->exchange(0, {}, {&first, 1}, Clock::now() + std::chrono::seconds(30));
  std::vector<std::uint8_t> big(3u << 20);
  const RecvOp recv{1, big.data(), big.size()};
  try {
    // Both processes wait for each other: rank 1 dies while both are inside an exchange.
    t->exchange(0, {}, {&recv, 1}, Clock::now() + std::chrono::seconds(30));
    std::fprintf(stderr, "rank 0: FAILED: the exchange completed\n");
    return 1;
  } catch (const PeerLost& e) {
    const double after_ms = static_cast<double>(steady_ns() - kill_at) / 1e6;
    std::printf("rank 0: PeerLost %.1f ms after rank 1 was killed: %s\n", after_ms, e.what());
    if (e.peer() != 1 || std::string(e.what()).find("process 1") == std::string::npos) {
      std::fprintf(stderr, "rank 0: FAILED: PeerLost names peer %d\n", e.peer());
      return 1;
    }
    if (after_ms > 30000) {
      std::fprintf(stderr, "rank 0: FAILED: PeerLost came after the 30 s deadline\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank 0: FAILED: expected PeerLost, got: %s\n", e.what());
    return 1;
  }
  try {
    const std::uint8_t byte = 1;
    const SendOp send{1, &byte, 1};
    t->exchange(0, {&send, 1}, {}, Clock::now() + std::chrono::seconds(1));
    std::fprintf(stderr, "rank 0: FAILED: a poisoned transport exchanged\n");
    return 1;
  } catch (const Aborted&) {
  }
  std::printf("rank 0: ok\n");
  return 0;
}

TEST(PeerLost, KilledProcessIsReportedToItsPeer) {
  char dir[] = "/tmp/gloo-peer-lost-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string exe = self_exe();
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back("REPLICATOR_RANK=" + std::to_string(rank));
    env.push_back(std::string("REPLICATOR_STORE=file://") + dir);
    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string arg = "--peer-lost-worker";
    char* argv[] = {const_cast<char*>(exe.c_str()), arg.data(), nullptr};
    ASSERT_EQ(posix_spawn(&pids[rank], exe.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  }
  int status[2];
  for (int rank = 0; rank < 2; ++rank) waitpid(pids[rank], &status[rank], 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  EXPECT_TRUE(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0) << "rank 0 status " << status[0];
  EXPECT_TRUE(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL)
      << "rank 1 status " << status[1];
}

// ---- redis ----------------------------------------------------------------------------

std::string g_launcher;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

bool accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

TEST(Redis, WorkersMeetThroughRedisAndItsLossIsAClearError) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string port_text = std::to_string(port);
  // redis-server --port P --save '' --daemonize no, its output to /dev/null.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {"redis-server", "--port",      port_text, "--bind",
                                   "127.0.0.1",    "--save",      "",        "--appendonly",
                                   "no",           "--daemonize", "no"};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t redis = -1;
  ASSERT_EQ(posix_spawnp(&redis, "redis-server", &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  const bool up = harness::poll_until([&] { return accepts(port); }, std::chrono::seconds(10),
                                      milliseconds(20));
  if (up) {
    const std::string store = "redis://127.0.0.1:" + port_text;
    const Ran ran =
        run_capture({g_launcher, "launch", "-n", "2", "--store", store, "--", self_exe()});
    std::fwrite(ran.out.data(), 1, ran.out.size(), stdout);
    std::fwrite(ran.err.data(), 1, ran.err.size(), stderr);
    EXPECT_TRUE(WIFEXITED(ran.status) && WEXITSTATUS(ran.status) == 0) << ran.status;
  }
  kill(redis, SIGTERM);
  int status = 0;
  waitpid(redis, &status, 0);
  ASSERT_TRUE(up) << "redis-server did not listen on port " << port << " within 10 s";

  // Redis is down now: the error names it.
  GlooOptions options;
  options.store = "redis://127.0.0.1:" + port_text;
  try {
    make_gloo_transport(options);
    ADD_FAILURE() << "no error";
  } catch (const rendezvous::StoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + port_text), std::string::npos) << what;
    std::printf("with Redis down: %s\n", what.c_str());
  }
}

bool on_path(const std::string& program) {
  const std::string path = env_or("PATH", "/usr/bin:/bin");
  std::size_t begin = 0;
  while (begin <= path.size()) {
    const std::size_t end = std::min(path.find(':', begin), path.size());
    const std::string candidate = path.substr(begin, end - begin) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace
}  // namespace replicator::detail

#ifdef REPLICATOR_TEST_WITH_TORCH
// A matrix product and a gradient through LibTorch, checked in closed form: x = [[0,1,2],
// [3,4,5]], sum(x x^T) = 5 + 14 + 14 + 50 = 83, d/dx sum(x x^T) = 2 (column sums of x) per row.
bool torch_op_is_right() {
  auto x = torch::arange(6, torch::kFloat).reshape({2, 3}).requires_grad_();
  auto y = x.matmul(x.t()).sum();
  y.backward();
  const auto want_grad = torch::tensor({6.0f, 10.0f, 14.0f}).repeat({2, 1});
  return y.item<float>() == 83.0f && torch::equal(x.grad(), want_grad);
}
#endif

int main(int argc, char** argv) {
  using namespace replicator::detail;
  testing::InitGoogleTest(&argc, argv);
#ifdef REPLICATOR_TEST_WITH_TORCH
  if (!torch_op_is_right()) {
    std::fprintf(stderr, "FAIL: a LibTorch operation gave a wrong result\n");
    return 1;
  }
#endif
  const std::string mode = argc >= 2 ? argv[1] : "";
  if (mode == "--peer-lost-worker") return run_peer_lost_worker();
  if (mode == "--peer-lost") {
    GTEST_FLAG_SET(filter, "PeerLost.*");
    return RUN_ALL_TESTS();
  }
  if (mode == "--redis") {
    if (argc < 3) {
      std::fprintf(stderr, "usage: gloo_transport_test --redis PATH_TO_REPLICATOR\n");
      return 2;
    }
    g_launcher = argv[2];
    if (!on_path("redis-server")) {
      std::printf("SKIPPED: redis-server is not installed (Debian package redis-server)\n");
      return 77;
    }
    GTEST_FLAG_SET(filter, "Redis.*");
    return RUN_ALL_TESTS();
  }
  return run_worker();
}
