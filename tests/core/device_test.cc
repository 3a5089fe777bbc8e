// The device path on the fake device (replicator/device.h): the kernels' arithmetic against
// the CPU kernel bit for bit; collectives on device buffers against the same collectives on
// host buffers, bit for bit, for every dtype, op and R; the checks (mismatch of memory
// kinds on every replica, deadline, release on failure, bad input) on device buffers; and
// across (fake) processes, through the host.
#include "replicator/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "replicator/replicator.h"
#include "src/collectives/reduce_kernel.h"
#include "src/engines/device/element_reduce.h"
#include "tests/collectives/fake_transport.h"
#include "tests/harness/device_checks.h"
#include "tests/harness/harness.h"

#define EXPECT_HAS_SUBSTR(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

namespace replicator {
namespace {

using std::chrono::milliseconds;

using device_checks::host_buffer;
using device_checks::kDtypes;
using device_checks::kOps;
using device_checks::OnDevice;
using device_checks::random_elements;

// ---- the kernels' arithmetic --------------------------------------------------------------

// An element's bytes in hex, most significant first.
std::string hex(const std::byte* p, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  for (std::size_t k = size; k-- > 0;) {
    const auto b = static_cast<unsigned>(p[k]);
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

// Whether two elements have the same bits, or are both NaN: which NaN an addition of two NaNs
// returns (sign and payload) is the compiler's choice of operand order, on the host as on a
// GPU, and no part of the promise.
bool same_element(DType dtype, const std::byte* a, const std::byte* b) {
  const std::size_t size = dtype_size(dtype);
  if (std::memcmp(a, b, size) == 0) return true;
  const auto nan = [&](const std::byte* p) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, p, size);
    switch (dtype) {
      case DType::kF32:
        return (bits & 0x7fffffffu) > 0x7f800000u;
      case DType::kF64:
        return (bits & 0x7fffffffffffffffu) > 0x7ff0000000000000u;
      case DType::kBF16:
        return (bits & 0x7fffu) > 0x7f80u;
      case DType::kF16:
        return (bits & 0x7fffu) > 0x7c00u;
      default:
        return false;
    }
  };
  return nan(a) && nan(b);
}

// reduce_element (what the CUDA kernel and the fake device run) gives the CPU kernel's bits
// for every dtype, op and input count up to its limit, on every bit pattern.
TEST(ElementReduce, SameBitsAsTheCpuKernel) {
  constexpr std::size_t kCount = 257;
  for (const int n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 64}) {
    for (const DType dtype : kDtypes) {
      std::vector<std::vector<std::byte>> inputs;
      std::vector<const void*> pointers;
      for (int j = 0; j < n; ++j) {
        inputs.push_back(random_elements(dtype, kCount, 100u * n + j, true));
        pointers.push_back(inputs.back().data());
      }
      for (const ReduceOp op : kOps) {
        std::vector<std::byte> cpu(kCount * dtype_size(dtype));
        void* out = cpu.data();
        detail::ReduceScratch scratch(n);
        detail::tree_reduce(op, dtype, pointers.data(), n, &out, 1, kCount,
                            static_cast<std::size_t>(n), scratch);
        std::vector<std::byte> element(cpu.size());
        detail::elementwise::dispatch(dtype, op, [&]<typename Kind>(Kind) {
          using T = typename Kind::Type;
          using Storage = typename detail::elementwise::Element<T, Kind::kOp>::Storage;
          for (std::size_t i = 0; i < kCount; ++i) {
            const Storage r = detail::elementwise::reduce_element<T, Kind::kOp>(
                pointers.data(), n, i, static_cast<std::size_t>(n));
            std::memcpy(element.data() + i * sizeof(Storage), &r, sizeof(Storage));
          }
        });
        const std::size_t size = dtype_size(dtype);
        for (std::size_t i = 0; i < kCount; ++i) {
          ASSERT_TRUE(same_element(dtype, element.data() + i * size, cpu.data() + i * size))
              << "n=" << n << " " << to_string(dtype) << " " << to_string(op) << " element " << i
              << ": " << hex(element.data() + i * size, size) << " against the CPU kernel's "
              << hex(cpu.data() + i * size, size);
        }
      }
    }
  }
}

// ---- device memory ------------------------------------------------------------------------

TEST(DeviceMemory, FakeMemoryIsNotHostAddressableAndCopiesBothWays) {
  const Device device{MemoryKind::kFake, 3};
  DeviceMemory memory(device, 1000);
  EXPECT_EQ(memory.device(), device);
  EXPECT_EQ(memory.bytes(), 1000u);
  // Bit 62 set: not a canonical x86-64 address, so a host access faults.
  EXPECT_NE(reinterpret_cast<std::uintptr_t>(memory.data()) & (std::uintptr_t{1} << 62), 0u);
  std::vector<std::uint8_t> in(1000), out(1000, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 7);
  copy_bytes(device, memory.data(), Device{}, in.data(), in.size());
  copy_bytes(Device{}, out.data(), device, memory.data(), out.size());
  EXPECT_EQ(in, out);

  DeviceMemory moved = std::move(memory);
  EXPECT_EQ(memory.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved.bytes(), 1000u);
}

TEST(DeviceMemory, BadDevicesAreInvalidArguments) {
  EXPECT_THROW(DeviceMemory(Device{MemoryKind::kFake, 64}, 8), InvalidArgument);
  EXPECT_THROW(DeviceMemory(Device{MemoryKind::kFake, -1}, 8), InvalidArgument);
  EXPECT_THROW(DeviceMemory(Device{}, 8), InvalidArgument);
  EXPECT_EQ(device_count(MemoryKind::kHost), 1);
  EXPECT_EQ(device_count(MemoryKind::kFake), 64);
  if (device_count(MemoryKind::kCuda) == 0) {
    try {
      const DeviceMemory memory(Device{MemoryKind::kCuda, 0}, 8);
      FAIL() << "cuda:0 allocated without a GPU";
    } catch (const InvalidArgument& e) {
      EXPECT_HAS_SUBSTR(e.what(), "cuda:0 does not exist");
    }
  }
}

TEST(DeviceConfig, ParsesDevicesAndRefusesWhatIsMissing) {
  EXPECT_EQ(parse_devices("host").kind, MemoryKind::kHost);
  EXPECT_EQ(parse_devices("fake:4").count, 4);
  EXPECT_EQ(parse_devices("cuda").count, 0);
  EXPECT_EQ(parse_devices("cuda:2").kind, MemoryKind::kCuda);
  for (const char* bad : {"gpu", "fake", "fake:0", "fake:65", "cuda:x", "fake:2x"}) {
    EXPECT_THROW(parse_devices(bad), ConfigError) << bad;
  }
  Config config;
  EXPECT_THROW(config.set("devices", "tpu:1"), ConfigError);
  config.set("devices", "fake:2");
  EXPECT_EQ(config.devices, "fake:2");
  if (device_count(MemoryKind::kCuda) == 0) {
    config.devices = "cuda";
    try {
      Replicator repl(config);
      FAIL() << "a Replicator on cuda without a GPU";
    } catch (const ConfigError& e) {
      EXPECT_HAS_SUBSTR(e.what(), "devices 'cuda'");
    }
  }
}

// Replica r is bound to device r mod N.
TEST(DeviceConfig, ReplicasAreBoundToDevicesInTurn) {
  Config config;
  config.local_replicas = 5;
  config.devices = "fake:2";
  Replicator repl(config);
  const auto devices = repl.run([](ReplicaContext& ctx) { return ctx.device(); });
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(devices[r], (Device{MemoryKind::kFake, static_cast<std::int16_t>(r % 2)}));
  }
  config.devices = "host";
  Replicator host(config);
  EXPECT_TRUE(host.run([](ReplicaContext& ctx) { return ctx.device().is_host(); })[4]);
}

// replicas_on_device(): how many of the process's replicas share the replica's device.
TEST(DeviceConfig, CountsTheReplicasSharingADevice) {
  const auto sharing = [](const char* devices) {
    Config config;
    config.local_replicas = 5;
    config.devices = devices;
    const auto counts =
        Replicator(config).run([](ReplicaContext& ctx) { return ctx.replicas_on_device(); });
    return std::vector<int>(counts.begin(), counts.end());
  };
  // fake:2: device 0 holds replicas 0, 2, 4, device 1 replicas 1, 3.
  EXPECT_EQ(sharing("fake:2"), (std::vector<int>{3, 2, 3, 2, 3}));
  EXPECT_EQ(sharing("fake:5"), std::vector<int>(5, 1));
  EXPECT_EQ(sharing("host"), std::vector<int>(5, 5));
}

// ---- collectives on device buffers --------------------------------------------------------

// The checks of tests/harness/device_checks.h on the fake device, and on CUDA where this
// process sees a GPU (skipped otherwise).
class DeviceCollectives : public ::testing::TestWithParam<MemoryKind> {
 protected:
  void SetUp() override {
    if (device_count(GetParam()) == 0) GTEST_SKIP() << "no " << to_string(GetParam()) << " device";
  }
};

// all_reduce of every dtype and op on device buffers gives the host's bits, for R from 1 to
// 8 (replicas sharing devices too) and sizes 0, 1, odd and past one slice per replica.
TEST_P(DeviceCollectives, AllReduceGivesTheHostBits) {
  for (const int R : {1, 2, 3, 4, 5, 8}) {
    Replicator repl(device_checks::config_for(GetParam(), R, R == 8 ? 3 : R));
    for (const std::size_t count : {0, 1, 1023, 70001}) {
      for (const DType dtype : kDtypes) {
        for (const ReduceOp op : kOps) {
          ASSERT_EQ(device_checks::all_reduce_bits(repl, count, dtype, op), "");
        }
      }
    }
  }
}

TEST_P(DeviceCollectives, FusedAllReduceGivesTheHostBits) {
  Replicator repl(device_checks::config_for(GetParam(), 3, 2));
  EXPECT_EQ(device_checks::fused_all_reduce_bits(repl), "");
}

TEST_P(DeviceCollectives, EveryCollectiveGivesTheHostResults) {
  for (const int R : {1, 3, 4}) {
    Replicator repl(device_checks::config_for(GetParam(), R, 2));
    EXPECT_EQ(device_checks::every_collective(repl), "") << "R=" << R;
  }
}

TEST_P(DeviceCollectives, HostAgainstDeviceIsAMismatchOnEveryReplica) {
  Replicator repl(device_checks::config_for(GetParam(), 3, 3));
  EXPECT_EQ(device_checks::host_against_device_mismatch(repl), "");
}

TEST_P(DeviceCollectives, DeadlinesAndFailuresReleaseDeviceCollectives) {
  Config config = device_checks::config_for(GetParam(), 3, 2);
  config.timeout = milliseconds(300);
  Replicator repl(config);
  EXPECT_EQ(device_checks::late_replica_timeout(repl), "");
  EXPECT_EQ(device_checks::failure_releases(repl), "");
}

INSTANTIATE_TEST_SUITE_P(Kinds, DeviceCollectives,
                         ::testing::Values(MemoryKind::kFake, MemoryKind::kCuda),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Buffers of two kinds of memory in one call are refused before any communication.
TEST(DeviceCollectivesOnFake, MixedMemoryInOneCallIsAnInvalidArgument) {
  Replicator repl(device_checks::config_for(MemoryKind::kFake, 1, 1));
  repl.run([&](ReplicaContext& ctx) {
    std::vector<std::byte> host(64);
    OnDevice device(ctx.device(), host, DType::kF32);
    const Buffer buffers[] = {device.buffer(), host_buffer(host, DType::kF32)};
    try {
      ctx.all_reduce(buffers);
      ADD_FAILURE() << "mixed memory accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_HAS_SUBSTR(std::string(e.what()), "got fake:0 and host");
    }
    EXPECT_EQ(ctx.sequence(), 0u);  // refused before it took a number
  });
}

// Across processes (the fake network): device buffers go through the host, and an all_reduce
// of P x L replicas gives the bits of one process of P·L replicas.
TEST(DeviceCollectivesOnFake, AcrossProcessesGivesTheOneProcessBits) {
  constexpr int kP = 2, kL = 2;
  constexpr std::size_t kCount = 5000;
  const auto step_result = [&](ReplicaContext& ctx) {
    std::vector<std::byte> host =
        random_elements(DType::kBF16, kCount, static_cast<std::uint32_t>(ctx.replica_id()));
    if (ctx.device().is_host()) {
      const Buffer b = host_buffer(host, DType::kBF16);
      ctx.all_reduce(std::span<const Buffer>(&b, 1), {.op = ReduceOp::kMean});
      return host;
    }
    OnDevice device(ctx.device(), host, DType::kBF16);
    const Buffer b = device.buffer();
    ctx.all_reduce(std::span<const Buffer>(&b, 1), {.op = ReduceOp::kMean});
    return device.read();
  };
  Config one;
  one.local_replicas = kP * kL;
  const auto expected = Replicator(one).run(step_result)[0];

  auto network = std::make_shared<testing::FakeNetwork>(kP);
  std::vector<std::vector<std::byte>> got(static_cast<std::size_t>(kP) * kL);
  const auto errors = harness::run_threads(kP, [&](int rank) {
    Config config = device_checks::config_for(MemoryKind::kFake, kL, 2);
    config.transport.calibration = "off";
    auto repl = detail::make_replicator(config, network->endpoint(rank, kL));
    const auto results = repl->run(step_result);
    for (int l = 0; l < kL; ++l)
      got[(static_cast<std::size_t>(rank) * kL) + static_cast<std::size_t>(l)] = results[l];
  });
  for (const auto& e : errors) ASSERT_FALSE(e) << harness::describe(e);
  for (int r = 0; r < kP * kL; ++r) EXPECT_EQ(got[r], expected) << "replica " << r;
}

}  // namespace
}  // namespace replicator
