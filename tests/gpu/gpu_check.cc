// gpu_check: the device path on a real GPU, as scripts/gpu_check.sh runs it on a machine with
// one (no GoogleTest there). The checks of tests/harness/device_checks.h on CUDA memory
// (bits equal to the host's for every dtype, op, size and R; every collective; mismatch,
// deadline and release on device buffers), then the speed of the device all-reduce beside
// the GPU's own copy bandwidth. Prints one line per check that fails, one summary line, and
// writes the results as JSON.
//
//   gpu_check [--json FILE] [--quick]
//
// Exit status: 0 every check passed; 1 a check failed; 77 this process sees no CUDA device
// (what CTest reads as skipped).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "replicator/device.h"
#include "replicator/replicator.h"
#include "tests/gpu/results.h"
#include "tests/harness/device_checks.h"

namespace {

using replicator::Buffer;
using replicator::Config;
using replicator::DType;
using replicator::MemoryKind;
using replicator::ReduceOp;
using replicator::ReplicaContext;
using replicator::Replicator;
namespace checks = replicator::device_checks;

using replicator::gpu::Results;

void correctness(Results& results, bool quick) {
  const std::vector<int> replicas = quick ? std::vector<int>{2} : std::vector<int>{1, 2, 4};
  const std::vector<std::size_t> counts =
      quick ? std::vector<std::size_t>{1, 1023}
            : std::vector<std::size_t>{0, 1, 1023, (std::size_t{1} << 20) + 3};
  for (const int R : replicas) {
    Replicator repl(checks::config_for(MemoryKind::kCuda, R, R));
    for (const std::size_t count : counts) {
      for (const DType dtype : checks::kDtypes) {
        for (const ReduceOp op : checks::kOps) {
          results.check("all_reduce bits", checks::all_reduce_bits(repl, count, dtype, op));
        }
      }
    }
    results.check("fused all_reduce bits R=" + std::to_string(R),
                  checks::fused_all_reduce_bits(repl));
    results.check("every collective R=" + std::to_string(R), checks::every_collective(repl));
  }
  Config config = checks::config_for(MemoryKind::kCuda, 3, 3);
  config.timeout = std::chrono::milliseconds(300);
  Replicator repl(config);
  results.check("host against device mismatch", checks::host_against_device_mismatch(repl));
  results.check("late replica timeout", checks::late_replica_timeout(repl));
  results.check("failure releases", checks::failure_releases(repl));
}

// Seconds per all_reduce of `bytes` of f32 over R replicas sharing the GPUs (the slowest
// replica's mean over `iterations`, after warm-up).
double all_reduce_seconds(int R, std::size_t bytes, int iterations) {
  Replicator repl(checks::config_for(MemoryKind::kCuda, R, R));
  const auto seconds = repl.run([&](ReplicaContext& ctx) {
    replicator::DeviceMemory memory(ctx.device(), bytes);
    std::vector<std::byte> zeros(bytes);
    replicator::copy_bytes(ctx.device(), memory.data(), replicator::Device{}, zeros.data(), bytes);
    const Buffer b{
        .data = memory.data(), .count = bytes / 4, .dtype = DType::kF32, .device = ctx.device()};
    for (int i = 0; i < 3; ++i) ctx.all_reduce(std::span<const Buffer>(&b, 1));
    ctx.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) ctx.all_reduce(std::span<const Buffer>(&b, 1));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
           iterations;
  });
  double worst = 0;
  for (int r = 0; r < R; ++r) worst = std::max(worst, seconds[r]);
  return worst;
}

// The GPU's own device-to-device copy bandwidth, GB/s (bytes read plus written).
double copy_bandwidth(std::size_t bytes) {
  const replicator::Device gpu{MemoryKind::kCuda, 0};
  replicator::DeviceMemory a(gpu, bytes), b(gpu, bytes);
  replicator::copy_bytes(gpu, b.data(), gpu, a.data(), bytes);
  constexpr int kIterations = 10;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) replicator::copy_bytes(gpu, b.data(), gpu, a.data(), bytes);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kIterations;
  return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

void speed(Results& results, bool quick) {
  const double copy = copy_bandwidth(std::size_t{256} << 20);
  std::printf("device copy bandwidth: %.1f GB/s (read + write)\n", copy);
  std::printf("%4s %10s %10s %10s %10s %12s\n", "R", "bytes", "time_us", "algbw", "busbw",
              "memory_GB/s");
  const std::vector<std::size_t> sizes =
      quick ? std::vector<std::size_t>{std::size_t{16} << 20}
            : std::vector<std::size_t>{std::size_t{16} << 20, std::size_t{64} << 20,
                                       std::size_t{256} << 20};
  for (const int R : {2, 4}) {
    for (const std::size_t bytes : sizes) {
      const double s = all_reduce_seconds(R, bytes, quick ? 5 : 20);
      const double algbw = static_cast<double>(bytes) / s / 1e9;
      const double busbw = algbw * 2.0 * (R - 1) / R;
      // Replicas sharing one GPU: its memory carries every replica's read and write.
      const double memory = 2.0 * R * static_cast<double>(bytes) / s / 1e9;
      std::printf("%4d %10zu %10.1f %10.2f %10.2f %12.1f\n", R, bytes, s * 1e6, algbw, busbw,
                  memory);
      results.rows.push_back(
          "{\"R\": " + std::to_string(R) + ", \"bytes\": " + std::to_string(bytes) +
          ", \"seconds\": " + std::to_string(s) + ", \"busbw_GBps\": " + std::to_string(busbw) +
          ", \"memory_GBps\": " + std::to_string(memory) +
          ", \"copy_GBps\": " + std::to_string(copy) + "}");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (arg == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: gpu_check [--json FILE] [--quick]\n");
      return 2;
    }
  }
  if (replicator::device_count(MemoryKind::kCuda) == 0) {
    std::printf("gpu_check: no CUDA device visible%s; nothing checked\n",
                replicator::built_with_cuda() ? "" : " (a build without CUDA)");
    return 77;
  }
  Results results;
  try {
    correctness(results, quick);
    speed(results, quick);
  } catch (const std::exception& e) {
    results.check("gpu_check", std::string("stopped: ") + e.what());
  }
  if (!json.empty()) replicator::gpu::write_json(json, results, "all_reduce");
  std::printf("gpu_check: %s, %d checks passed, %zu failed, on %d GPU%s\n",
              results.failed.empty() ? "PASS" : "FAIL", results.passed, results.failed.size(),
              replicator::device_count(MemoryKind::kCuda),
              replicator::device_count(MemoryKind::kCuda) == 1 ? "" : "s");
  return results.failed.empty() ? 0 : 1;
}
