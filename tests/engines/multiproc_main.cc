// A program for the multi-process tests: started as several processes by mpirun or by
// `replicator launch` (or by hand, for the kill tests), on the engine Config::from_env()
// picks. Scenarios:
//   digest     all_reduce of the same random data per replica id; prints one line
//              "digest R=<R> <hex>" (same bits whatever the layout) from process 0
//   mismatch   process 0's replicas reduce 4 floats, the others 5: expects
//              CollectiveMismatch everywhere; prints "mismatch ok"
//   signature  as mismatch, with equal counts but different signatures (what tensor
//              collectives pass for their shapes)
//   throw      replica 1 throws in its step: every other replica must be released with
//              Aborted (or its own error); prints "released ok" (exit 0) per process
//   local-mismatch  (2 processes x 2 replicas) the last replica calls another collective,
//              count, dtype, root or reduce op, skips one, adds one, fuses, or barriers,
//              each on a fresh Replicator: every replica of every process must raise
//              CollectiveMismatch (none Aborted); prints "<case>: mismatch ok" per case
//   stop       the last process SIGSTOPs itself in the middle of a stream of
//              all_reduces; the others print "stop detected: <error>" (whose flight
//              recorder summary names the stopped replica) and exit 1 (a failed job),
//              which must end the whole job
//   straggler  (2 processes x 2 replicas) process 1's first replica stops its process
//              (SIGSTOP) after a barrier, 0.6 s in: process 0's straggler watch names it
//              (the test resumes it); prints "straggler ok" per process
//   slow       as straggler, the replica sleeping 2.5 s instead: named as in compute
//   native-deadline  (mpi) process 0 runs the engine's own all-reduce alone, with a 2 s
//              deadline: it must end the job (MPI cannot cancel it)
//   kill       the last process SIGKILLs itself in the middle of a stream of
//              all_reduces; the others print "peer-lost after <ms> ms" and exit 0 if
//              they get PeerLost (or Aborted, naming the lost process), 1 otherwise
// Exit 0 when the scenario's expectation held, 1 otherwise.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "replicator/device.h"
#include "replicator/replicator.h"
#include "replicator/shards.h"
#include "src/engines/device/device_backend.h"
#include "src/engines/make_transport.h"
#include "src/engines/native.h"
#include "tests/harness/device_checks.h"
#include "tests/harness/harness.h"

using namespace replicator;

namespace {

std::vector<float> data_of(int replica, std::size_t n) {
  return harness::mixed_magnitudes(4242 + static_cast<unsigned>(replica), n);
}

std::uint64_t fnv(const void* data, std::size_t bytes, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Every replica of every process must hold the same hash: compare within the process, then
// through max/min across processes; replica 0 prints "<label> <hash>".
int expect_agreed(Replicator& repl, const PerReplica<std::int64_t>& hashes,
                  const std::string& label) {
  for (const auto h : hashes) {
    if (h != hashes[0]) {
      std::fprintf(stderr, "local replicas disagree\n");
      return 1;
    }
  }
  const auto lo = repl.reduce(ReduceOp::kMin, hashes);
  const auto hi = repl.reduce(ReduceOp::kMax, hashes);
  if (lo != hi) {
    std::fprintf(stderr, "processes disagree\n");
    return 1;
  }
  if (repl.num_replicas() > 0 &&
      repl.run([](ReplicaContext& ctx) { return ctx.replica_id(); })[0] == 0) {
    std::printf("%s %016llx\n", label.c_str(), static_cast<unsigned long long>(hashes[0]));
  }
  return 0;
}

int digest(Replicator& repl) {
  auto hashes = repl.run([&](ReplicaContext& ctx) {
    std::uint64_t h = 0;
    // The largest is cut into several pipeline steps on both engines (parts over 4 MiB on
    // gloo at 2x2, 4x1 and 3x1).
    for (const std::size_t n : {1ul, 37ul, 100003ul, 5000011ul}) {
      auto v = data_of(ctx.replica_id(), n);
      ctx.all_reduce(v);
      h = fnv(v.data(), v.size() * sizeof(float), h ^ n);
      std::vector<bfloat16> b;
      for (float x : data_of(ctx.replica_id(), n)) b.emplace_back(x);
      ctx.all_reduce(b, {.op = ReduceOp::kMean});
      h = fnv(b.data(), b.size() * sizeof(bfloat16), h);
    }
    return static_cast<std::int64_t>(h);
  });
  return expect_agreed(repl, hashes, "digest R=" + std::to_string(repl.num_replicas()));
}

// Logical shards: 8 shards' values (shard s: data_of(s)) reduced by ShardReduce, f32 sums
// and bf16 means. The hash, printed as "shards S=8 <hash>", must not depend on R or layout.
int shards(Replicator& repl) {
  constexpr int kShards = 8;
  auto hashes = repl.run([&](ReplicaContext& ctx) {
    std::uint64_t h = 0;
    for (const std::size_t n : {1ul, 37ul, 100003ul}) {
      ShardReduce sum(ctx, kShards, DType::kF32, n);
      ShardReduce mean(ctx, kShards, DType::kBF16, n, ReduceOp::kMean);
      for (int s = sum.range().first; s < sum.range().last; ++s) {
        std::vector<float> v = data_of(s, n);
        sum.add(s, Buffer::of(std::span<float>(v)));
        std::vector<bfloat16> b(v.begin(), v.end());
        mean.add(s, Buffer::of(std::span<bfloat16>(b)));
      }
      std::vector<float> out(n);
      sum.all_reduce(Buffer::of(std::span<float>(out)));
      h = fnv(out.data(), n * sizeof(float), h ^ n);
      std::vector<bfloat16> b(n);
      mean.all_reduce(Buffer::of(std::span<bfloat16>(b)));
      h = fnv(b.data(), n * sizeof(bfloat16), h);
    }
    return static_cast<std::int64_t>(h);
  });
  return expect_agreed(repl, hashes, "shards S=" + std::to_string(kShards));
}

// Prints what `error` is, to stdout as "<ok>: <describe>" if it is one of Expected (the
// first of them that matches), else to stderr as "unexpected: <describe>"; returns the
// exit status (0 when expected).
template <typename... Expected>
int report(const std::exception_ptr& error, const char* ok) {
  if (!error) {
    std::fprintf(stderr, "no error\n");
    return 1;
  }
  if ((harness::caught_as<Expected>(error) || ...)) {
    std::printf("%s: %s\n", ok, harness::describe(error).c_str());
    return 0;
  }
  std::fprintf(stderr, "unexpected: %s\n", harness::describe(error).c_str());
  return 1;
}

// Process 0's replicas and the others call from different lines: the message every replica
// gets names both ("at multiproc_main.cc:<line>").
int mismatch(Replicator& repl, bool by_signature) {
  const int L = repl.num_local_replicas();
  std::atomic<int> lines[2] = {0, 0};
  const std::exception_ptr error = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      const bool first = ctx.replica_id() < L;
      std::vector<float> v(by_signature || first ? 4 : 5, 1.f);
      const std::uint64_t signature = by_signature && first ? 5u : 7u;
      if (first) {
        lines[0] = __LINE__ + 1;
        ctx.all_reduce(v, {.signature = signature});
      } else {
        lines[1] = __LINE__ + 1;
        ctx.all_reduce(v, {.signature = signature});
      }
    });
  });
  const int status = report<CollectiveMismatch>(error, "mismatch ok");
  if (status != 0) return status;
  const std::string message = harness::describe(error);
  // This process's replicas took one branch; the other branch's call is 3 lines below the
  // first's.
  const int first_line = lines[0] != 0 ? lines[0].load() : lines[1].load() - 3;
  for (const int line : {first_line, first_line + 3}) {
    const std::string site = "at multiproc_main.cc:" + std::to_string(line);
    if (message.find(site) == std::string::npos) {
      std::fprintf(stderr, "the message does not name %s: %s\n", site.c_str(), message.c_str());
      return 1;
    }
  }
  std::printf("both call sites named\n");
  return 0;
}

// Aborted on the others, ReplicaFailed (replica 1's own error) on its process; every
// Aborted, in any process, names replica 1 as its cause.
int throw_in_step(Replicator& repl) {
  std::vector<std::string> wrong_cause(static_cast<std::size_t>(repl.num_local_replicas()));
  const std::exception_ptr error = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      if (ctx.replica_id() == 1) throw std::runtime_error("replica 1 gives up");
      std::vector<float> v(1000, 1.f);
      try {
        for (int i = 0; i < 100; ++i) ctx.all_reduce(v);
      } catch (const Aborted& e) {
        if (e.cause_replica() != 1) {
          wrong_cause[static_cast<std::size_t>(ctx.local_replica_id())] = e.what();
        }
        throw;
      }
    });
  });
  for (const std::string& what : wrong_cause) {
    if (!what.empty()) {
      std::fprintf(stderr, "Aborted without replica 1 as its cause: %s\n", what.c_str());
      return 1;
    }
  }
  return report<Aborted, ReplicaFailed>(error, "released ok");
}

// Each case: what every replica calls, given whether it is the last (odd) replica.
using Case = std::pair<const char*, std::function<void(ReplicaContext&, bool odd)>>;

std::vector<Case> mismatch_cases() {
  const auto reduce = [](ReplicaContext& ctx, std::size_t n) {
    std::vector<float> v(n, 1.f);
    ctx.all_reduce(v);
  };
  return {
      {"op",
       [=](ReplicaContext& ctx, bool odd) {
         std::vector<float> in(4, 1.f), out(4 * static_cast<std::size_t>(ctx.num_replicas()));
         if (odd) {
           ctx.all_gather(in, out);
         } else {
           ctx.all_reduce(in);
         }
       }},
      {"count", [=](ReplicaContext& ctx, bool odd) { reduce(ctx, odd ? 5 : 4); }},
      {"large-count", [=](ReplicaContext& ctx, bool odd) { reduce(ctx, odd ? 300001 : 300000); }},
      {"dtype",
       [=](ReplicaContext& ctx, bool odd) {
         if (odd) {
           std::vector<double> v(4, 1.0);
           ctx.all_reduce(v);
         } else {
           reduce(ctx, 4);
         }
       }},
      {"root",
       [](ReplicaContext& ctx, bool odd) {
         std::vector<float> v(4, 1.f);
         ctx.broadcast(v, {.root = odd ? 1 : 0});
       }},
      {"reduce-op",
       [](ReplicaContext& ctx, bool odd) {
         std::vector<float> v(4, 1.f);
         ctx.all_reduce(v, {.op = odd ? ReduceOp::kMax : ReduceOp::kSum});
       }},
      {"skips",
       [=](ReplicaContext& ctx, bool odd) {
         if (!odd) reduce(ctx, 4);
       }},
      {"adds",
       [=](ReplicaContext& ctx, bool odd) {
         reduce(ctx, 4);
         if (odd) reduce(ctx, 4);
       }},
      {"fuses",
       [](ReplicaContext& ctx, bool odd) {
         std::vector<float> a(2, 1.f), b(2, 1.f);
         const Buffer both[] = {Buffer::of(std::span<float>(a)), Buffer::of(std::span<float>(b))};
         if (odd) {
           ctx.all_reduce(std::span<const Buffer>(both));
         } else {
           std::vector<float> v(4, 1.f);
           ctx.all_reduce(v);
         }
       }},
      // The last replica's buffer is in (fake) device memory, the others' on the host.
      {"memory",
       [=](ReplicaContext& ctx, bool odd) {
         if (!odd) return reduce(ctx, 4);
         const std::vector<float> host(4, 1.f);
         const Device fake{MemoryKind::kFake, 0};
         DeviceMemory memory(fake, sizeof(float) * host.size());
         copy_bytes(fake, memory.data(), Device{}, host.data(), sizeof(float) * host.size());
         const Buffer b{.data = memory.data(), .count = 4, .dtype = DType::kF32, .device = fake};
         ctx.all_reduce(std::span<const Buffer>(&b, 1));
       }},
      {"barriers",
       [=](ReplicaContext& ctx, bool odd) {
         if (odd) {
           ctx.barrier();
         } else {
           reduce(ctx, 4);
         }
       }},
  };
}

// Every case on a fresh Replicator (a job of its own in the store for gloo).
int local_mismatch(const Config& config) {
  int failures = 0;
  int index = 0;
  for (const auto& [name, its_call] : mismatch_cases()) {
    const auto& call = its_call;  // a variable, not a binding: the lambdas below capture it
    Config c = config;
    c.gloo.job = config.gloo.job + "-mismatch-" + std::to_string(index++);
    Replicator repl(c);
    const int last = repl.num_replicas() - 1;
    // What each local replica caught in its step (empty: nothing, as a replica whose
    // mismatch comes at the end of its step).
    std::vector<std::string> other(static_cast<std::size_t>(repl.num_local_replicas()));
    const std::exception_ptr error = harness::capture([&] {
      repl.run([&](ReplicaContext& ctx) {
        try {
          call(ctx, ctx.replica_id() == last);
        } catch (const CollectiveMismatch&) {
          throw;
        } catch (...) {
          other[static_cast<std::size_t>(ctx.local_replica_id())] =
              harness::describe(std::current_exception());
          throw;
        }
      });
    });
    std::string bad;
    for (std::size_t l = 0; l < other.size(); ++l) {
      if (!other[l].empty()) bad += " local replica " + std::to_string(l) + ": " + other[l];
    }
    const std::string label = std::string(name) + ": mismatch ok";
    if (!bad.empty()) {
      std::fprintf(stderr, "%s: not every replica raised CollectiveMismatch:%s\n", name,
                   bad.c_str());
      ++failures;
    } else if (report<CollectiveMismatch>(error, label.c_str()) != 0) {
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

// Timeout (or Aborted, released by a process that timed out first) on the others.
int stop_one(Replicator& repl, int rank, int processes) {
  const std::exception_ptr error = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      std::vector<float> v(1 << 10, 1.f);
      for (int i = 0;; ++i) {
        if (rank == processes - 1 && i == 100 && ctx.local_replica_id() == 0) raise(SIGSTOP);
        ctx.all_reduce(v);
      }
    });
  });
  report<Timeout, Aborted, PeerLost>(error, "stop detected");
  return 1;  // a failed job, whatever was detected
}

// Process 1's first replica is slow after the barrier: it sleeps `pause` and then, when
// `stop`, SIGSTOPs its process (the test sends SIGCONT once process 0 has named it). The
// straggler watch of process 0 must name it; the job then ends normally. Prints
// "straggler ok" per process.
int straggler(Replicator& repl, std::chrono::milliseconds pause, bool stop) {
  repl.run([&](ReplicaContext& ctx) {
    ctx.barrier();
    if (ctx.replica_id() == ctx.num_local_replicas()) {
      std::this_thread::sleep_for(pause);
      if (stop) raise(SIGSTOP);
    }
    std::vector<float> v(4, 1.f);
    ctx.all_reduce(v);
  });
  std::printf("straggler ok\n");
  return 0;
}

// PeerLost, or Aborted (released by a process that got PeerLost first, naming the lost one).
int kill_one(Replicator& repl, int rank, int processes) {
  const auto start = std::chrono::steady_clock::now();
  const std::exception_ptr error = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      std::vector<float> v(1 << 16, 1.f);
      for (int i = 0;; ++i) {
        if (rank == processes - 1 && i == 200) raise(SIGKILL);
        ctx.all_reduce(v);
      }
    });
  });
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  const std::string after = "peer-lost after " + std::to_string(ms) + " ms";
  return report<PeerLost, Aborted>(error, after.c_str());
}

}  // namespace

// The engine's own all-reduce, which MPI cannot cancel, past its deadline: process 0 calls it
// on a transport of its own with a 2 s deadline, the others never do; process 0 must end
// the job, saying what it waited for.
int native_deadline(const Config& config, int rank) {
  auto transport = detail::make_transport(config);
  std::vector<float> v(1 << 18, 1.f);
  if (rank != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::fprintf(stderr, "process %d: the job was not ended\n", rank);
    return 1;
  }
  detail::native_of(*transport)
      .native_all_reduce(0, v.data(), v.size(), DType::kF32, ReduceOp::kSum,
                         std::chrono::steady_clock::now() + std::chrono::seconds(2));
  std::fprintf(stderr, "process 0: the all-reduce returned without its peer\n");
  return 1;
}

// Collectives on (fake) device buffers, run with REPLICATOR_DEVICES=fake:N: the device path's
// checks against the host's bits, every dtype and op of the all-reduce. Prints how many waits
// for another process's event the fake streams ran: above 0 where the all-reduces stayed in the
// device between the processes (one host, shared memory on), 0 where they went through the host.
int devices(Replicator& repl, int rank) {
  namespace checks = device_checks;
  const std::uint64_t waits_before = detail::fake_event_waits();
  std::string out;
  for (const DType dtype : checks::kDtypes) {
    for (const ReduceOp op : checks::kOps) out += checks::all_reduce_bits(repl, 1003, dtype, op);
  }
  for (const std::size_t n : {1ul, 70001ul, 1ul << 20}) {
    out += checks::all_reduce_bits(repl, n, DType::kF32, ReduceOp::kSum);
    out += checks::all_reduce_bits(repl, n, DType::kBF16, ReduceOp::kMean);
  }
  out += checks::fused_all_reduce_bits(repl);
  out += checks::every_collective(repl);
  if (!out.empty()) {
    std::fprintf(stderr, "process %d: %s\n", rank, out.c_str());
    return 1;
  }
  std::printf("devices ok: process %d, waits %llu\n", rank,
              static_cast<unsigned long long>(detail::fake_event_waits() - waits_before));
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s "
                 "digest|shards|mismatch|signature|local-mismatch|throw|stop|straggler|slow|native-"
                 "deadline|kill|devices\n",
                 argv[0]);
    return 2;
  }
  const std::string scenario = argv[1];
  Config config = Config::from_env();
  Replicator repl(config);
  const int processes = repl.num_replicas() / repl.num_local_replicas();
  const int rank =
      repl.run([](ReplicaContext& ctx) { return ctx.replica_id(); })[0] / repl.num_local_replicas();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (scenario == "digest") return digest(repl);
  if (scenario == "shards") return shards(repl);
  if (scenario == "mismatch") return mismatch(repl, false);
  if (scenario == "signature") return mismatch(repl, true);
  if (scenario == "throw") return throw_in_step(repl);
  if (scenario == "kill") return kill_one(repl, rank, processes);
  if (scenario == "local-mismatch") return local_mismatch(config);
  if (scenario == "stop") return stop_one(repl, rank, processes);
  if (scenario == "straggler") return straggler(repl, std::chrono::milliseconds(600), true);
  if (scenario == "slow") return straggler(repl, std::chrono::milliseconds(2500), false);
  if (scenario == "native-deadline") return native_deadline(config, rank);
  if (scenario == "devices") return devices(repl, rank);
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
  return 2;
}
