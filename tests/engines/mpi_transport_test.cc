// Tests of the mpi transport. Run under `mpirun -np N` (N >= 2): every process runs every
// test, and the tests pair the processes up themselves. Only rank 0 prints gtest's usual
// output; the other ranks print their failures, prefixed with their rank.
//
// The latency comparison with MPI_Sendrecv is a disabled test:
//   mpirun -np 2 mpi_transport_test --gtest_also_run_disabled_tests --gtest_filter='*Latency*'
#include "src/engines/mpi/mpi_transport.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "replicator/errors.h"
#include "src/base/launch_env.h"
#include "src/engines/native.h"
#include "tests/harness/harness.h"

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;
using std::chrono::milliseconds;

constexpr milliseconds kLong(20000);  // deadline of exchanges that should succeed

Clock::time_point after(milliseconds ms) { return Clock::now() + ms; }

// The byte `i` of the message `src` sends `dst` in a given lane, size and round.
std::uint8_t pattern(int src, int dst, int lane, std::size_t size, int round, std::size_t i) {
  std::uint64_t x = ((static_cast<std::uint64_t>(src) * 1000003 + dst) * 7919 + lane) * 104729 +
                    size * 31 + static_cast<std::uint64_t>(round) * 17 + i;
  x ^= x >> 29;
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<std::uint8_t>(x >> 56);
}

std::vector<std::uint8_t> message(int src, int dst, int lane, std::size_t size, int round) {
  std::vector<std::uint8_t> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = pattern(src, dst, lane, size, round, i);
  return out;
}

// Number of bytes of `got` that differ from what `src` should have sent.
long mismatches(const std::vector<std::uint8_t>& got, int src, int dst, int lane, int round) {
  long bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    bad += got[i] != pattern(src, dst, lane, got.size(), round, i);
  }
  return bad;
}

// The transport under test: small messages through shared memory unless
// REPLICATOR_SHARED_MEMORY=off (the test runs both ways).
std::unique_ptr<Transport> make(int lanes, std::size_t max_message = kMpiMaxMessage) {
  const char* shared = env("REPLICATOR_SHARED_MEMORY");
  return make_mpi_transport(
      {.lanes = lanes,
       .max_message_bytes = max_message,
       .shared_memory = shared == nullptr || std::string_view(shared) != "off"});
}

const std::vector<std::size_t> kSizes = {0, 1, 4099, std::size_t{3} << 20};

TEST(MpiTransport, Basics) {
  auto t = make(2);
  int world_rank = -1;
  int world_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  EXPECT_EQ(t->name(), "mpi");
  EXPECT_EQ(t->rank(), world_rank);
  EXPECT_EQ(t->size(), world_size);
  EXPECT_EQ(t->num_lanes(), 2);
  EXPECT_TRUE(launched_by_mpi());
  ASSERT_GE(t->size(), 2) << "run this test under mpirun -np 2 or more";
  // What MPI_Allreduce sums is data on the traits, and the call holds to it.
  const TransportTraits traits = t->traits();
  EXPECT_TRUE(traits.native_sums(DType::kF32));
  EXPECT_TRUE(traits.native_sums(DType::kI64));
  EXPECT_FALSE(traits.native_sums(DType::kBF16));
  std::uint16_t half = 0;
  EXPECT_THROW(
      native_of(*t).native_all_reduce(0, &half, 1, DType::kBF16, ReduceOp::kSum, after(kLong)),
      InvalidArgument);
  float one = 1;
  EXPECT_THROW(
      native_of(*t).native_all_reduce(0, &one, 1, DType::kF32, ReduceOp::kMax, after(kLong)),
      InvalidArgument);
  // Where the processes share this host's memory, the cores of their threads too.
  const char* shared = env("REPLICATOR_SHARED_MEMORY");
  const bool rings = shared == nullptr || std::string_view(shared) != "off";
  EXPECT_EQ(traits.host_cores != nullptr, rings);
  EXPECT_EQ(traits.shared_step_bytes > 0, rings);
  if (traits.host_cores != nullptr) {
    EXPECT_EQ(traits.host_cores->rank(), world_rank);
    EXPECT_EQ(traits.host_cores->size(), world_size);
    EXPECT_EQ(traits.host_cores->lanes(), 2);
  }
}

// Lane 0 shifts a ring while lane 1, driven by another thread, runs an all-to-all (self
// included), over every size and a few rounds.
TEST(MpiTransport, TwoLanesConcurrently) {
  auto t = make(2);
  const int me = t->rank();
  const int n = t->size();
  std::exception_ptr errors[2];
  std::atomic<long> bad[2] = {0, 0};

  std::thread ring([&] {
    try {
      const int next = (me + 1) % n;
      const int prev = (me + n - 1) % n;
      for (int round = 0; round < 3; ++round) {
        for (std::size_t size : kSizes) {
          const auto out = message(me, next, 0, size, round);
          std::vector<std::uint8_t> in(size, 0xAA);
          const SendOp send{next, out.data(), size};
          const RecvOp recv{prev, in.data(), size};
          t->exchange(0, {&send, 1}, {&recv, 1}, after(kLong));
          bad[0] += mismatches(in, prev, me, 0, round);
        }
      }
    } catch (...) {
      errors[0] = std::current_exception();
    }
  });
  std::thread all_to_all([&] {
    try {
      for (int round = 0; round < 3; ++round) {
        for (std::size_t size : kSizes) {
          std::vector<std::vector<std::uint8_t>> out(n);
          std::vector<std::vector<std::uint8_t>> in(n, std::vector<std::uint8_t>(size, 0x55));
          std::vector<SendOp> sends;
          std::vector<RecvOp> recvs;
          for (int q = 0; q < n; ++q) {
            out[q] = message(me, q, 1, size, round);
            sends.push_back({q, out[q].data(), size});
            recvs.push_back({q, in[q].data(), size});
          }
          t->exchange(1, sends, recvs, after(kLong));
          for (int q = 0; q < n; ++q) bad[1] += mismatches(in[q], q, me, 1, round);
        }
      }
    } catch (...) {
      errors[1] = std::current_exception();
    }
  });
  ring.join();
  all_to_all.join();
  for (const auto& error : errors) {
    if (!error) continue;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "exchange threw: " << e.what();
    }
  }
  EXPECT_EQ(bad[0].load(), 0) << "ring shift on lane 0 delivered wrong bytes";
  EXPECT_EQ(bad[1].load(), 0) << "all-to-all on lane 1 delivered wrong bytes";
}

// Several messages to one peer in one exchange arrive in order; messages longer than the
// transport's largest MPI message are split and put back together.
TEST(MpiTransport, OrderAndSplitMessages) {
  auto t = make(1, 1000);
  const int me = t->rank();
  const int n = t->size();
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  const std::vector<std::size_t> sizes = {5, 0, 4099, 1000, 1, 3000};
  std::vector<std::vector<std::uint8_t>> out;
  std::vector<std::vector<std::uint8_t>> in;
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    out.push_back(message(me, next, 0, sizes[k], static_cast<int>(k)));
    in.emplace_back(sizes[k], 0xEE);
  }
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    sends.push_back({next, out[k].data(), sizes[k]});
    recvs.push_back({prev, in[k].data(), sizes[k]});
  }
  t->exchange(0, sends, recvs, after(kLong));
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(mismatches(in[k], prev, me, 0, static_cast<int>(k)), 0) << "message " << k;
  }
}

TEST(MpiTransport, NativeAllReduce) {
  auto t = make(1);
  const int n = t->size();
  std::vector<float> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(t->rank() + i);
  native_of(*t).native_all_reduce_f32(data.data(), data.size());
  for (std::size_t i = 0; i < data.size(); ++i) {
    ASSERT_EQ(data[i], static_cast<float>(n * i) + static_cast<float>(n * (n - 1)) / 2)
        << "element " << i;
  }
  native_of(*t).native_all_reduce_f32(nullptr, 0);
}

TEST(MpiTransport, BadArguments) {
  auto t = make(1);
  std::uint8_t byte = 0;
  const SendOp to_nobody{t->size(), &byte, 1};
  const RecvOp from_nobody{-1, &byte, 1};
  EXPECT_THROW(t->exchange(1, {}, {}, after(kLong)), InvalidArgument);
  EXPECT_THROW(t->exchange(0, {&to_nobody, 1}, {}, after(kLong)), InvalidArgument);
  EXPECT_THROW(t->exchange(0, {}, {&from_nobody, 1}, after(kLong)), InvalidArgument);
  t->exchange(0, {}, {}, after(kLong));  // nothing to do: fine, and not poisoned
}

TEST(MpiTransport, DifferentLaneCountsFailEverywhere) {
  int rank = 0;
  auto probe = make(1);
  rank = probe->rank();
  EXPECT_THROW(make(rank == 0 ? 1 : 2), ConfigError);
  EXPECT_THROW(make(0), InvalidArgument);
}

// Rank 1 fails; every other rank waits on a message from it and is released with the
// failure's text: Aborted, where the deadline would have raised Timeout.
TEST(MpiTransport, AbortReleasesPeers) {
  auto t = make(1);
  std::uint8_t byte = 0;
  if (t->rank() == 1) {
    t->abort("boom", std::nullopt);
    t->abort("second call is harmless", std::nullopt);
  } else {
    const RecvOp recv{1, &byte, 1};
    try {
      t->exchange(0, {}, {&recv, 1}, after(milliseconds(30000)));
      ADD_FAILURE() << "exchange returned, expected Aborted";
    } catch (const Aborted& e) {
      EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("process 1"), std::string::npos) << e.what();
      EXPECT_FALSE(e.cause_replica().has_value());
    }
  }
  // Poisoned from now on, on every rank.
  try {
    t->exchange(0, {}, {}, after(kLong));
    ADD_FAILURE() << "a poisoned transport accepted an exchange";
  } catch (const Aborted& e) {
    EXPECT_NE(std::string(e.what()).find("poisoned"), std::string::npos) << e.what();
  }
}

// abort() from one thread releases this process's other lanes: the waiting call ends with
// Aborted (its 30 s deadline would have raised Timeout).
TEST(MpiTransport, AbortReleasesOtherLanes) {
  auto t = make(2);
  const int next = (t->rank() + 1) % t->size();
  std::uint8_t byte = 0;
  const RecvOp recv{next, &byte, 1};  // never sent
  const harness::Interrupted waited = harness::interrupt_when_blocked(
      [&] {
        return t->post(1, {}, {&recv, 1});
      },
      [&](Transport::Ticket ticket) { t->wait(1, ticket, after(milliseconds(30000))); },
      [&] { t->abort("local failure", std::nullopt); });
  EXPECT_TRUE(waited.started) << "post() did not return";
  EXPECT_TRUE(harness::caught_as<Aborted>(waited.ended_with))
      << "the wait ended with " << harness::describe(waited.ended_with);
}

// Rank 0 waits for a message rank 1 never sends: Timeout after 300 ms naming rank 1.
TEST(MpiTransport, TimeoutNamesMissingPeer) {
  auto t = make(1);
  if (t->rank() != 0) return;
  std::uint8_t byte = 0;
  const RecvOp recv{1, &byte, 1};
  const auto start = Clock::now();
  try {
    t->exchange(0, {}, {&recv, 1}, start + milliseconds(300));
    ADD_FAILURE() << "exchange returned, expected Timeout";
  } catch (const Timeout& e) {
    EXPECT_EQ(e.missing(), std::vector<int>{1});
    EXPECT_EQ(e.op(), "exchange");
    EXPECT_EQ(e.deadline(), milliseconds(300));
    EXPECT_NE(std::string(e.what()).find("300 ms"), std::string::npos) << e.what();
  }
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_LT(waited, milliseconds(3000));
  EXPECT_THROW(t->exchange(0, {}, {}, after(kLong)), Aborted);
}

double median_ns(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Median time of a 4-byte exchange between ranks 0 and 1 on one lane, next to MPI_Sendrecv
// on a communicator of its own, in alternating blocks.
TEST(MpiTransport, DISABLED_LatencyVsSendrecv) {
  auto t = make(1);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int me = t->rank();
  constexpr int kBlocks = 10;
  constexpr int kPerBlock = 10000;
  std::vector<double> ours;
  std::vector<double> theirs;
  if (me < 2) {
    const int peer = 1 - me;
    std::uint32_t out = me;
    std::uint32_t in = 0;
    const SendOp send{peer, &out, sizeof(out)};
    const RecvOp recv{peer, &in, sizeof(in)};
    auto time_block = [&](bool mine, std::vector<double>& into, int count) {
      MPI_Barrier(comm);
      for (int i = 0; i < count; ++i) {
        const auto t0 = Clock::now();
        if (mine) {
          t->exchange(0, {&send, 1}, {&recv, 1}, after(kLong));
        } else {
          MPI_Sendrecv(&out, 4, MPI_BYTE, peer, 0, &in, 4, MPI_BYTE, peer, 0, comm,
                       MPI_STATUS_IGNORE);
        }
        into.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
      }
    };
    std::vector<double> warm;
    time_block(true, warm, 2000);
    time_block(false, warm, 2000);
    for (int b = 0; b < kBlocks; ++b) {
      time_block(true, ours, kPerBlock);
      time_block(false, theirs, kPerBlock);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&comm);
  if (me == 0) {
    std::printf(
        "4-byte exchange, 2 processes, %d round trips each: transport %.0f ns, "
        "MPI_Sendrecv %.0f ns (medians)\n",
        kBlocks * kPerBlock, median_ns(ours), median_ns(theirs));
  }
}

int rank_from_env() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* value = env(name)) return std::atoi(value);
  }
  return 0;
}

// The output of ranks other than 0: failures only, each line tagged with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n[rank %d] %s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(), rank_,
                 result.message());
    std::fflush(stderr);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace replicator::detail

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // These tests make transports time out on purpose, with every process alive.
  replicator::detail::set_abort_job_at_exit(false);
  const int rank = replicator::detail::rank_from_env();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new replicator::detail::FailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
