// gpu_check: the device path on a real GPU, as scripts/gpu_check.sh runs it on a machine with
// one (no GoogleTest there). The checks of tests/harness/device_checks.h on CUDA memory
// (bits equal to the host's for every dtype, op, size and R; every collective; mismatch,
// deadline and release on device buffers), then the speed of the device all-reduce beside
// the GPU's own copy bandwidth. Prints one line per check that fails, one summary line, and
// writes the results as JSON.
//
//   gpu_check [--json FILE] [--quick]
//   gpu_check --processes P [--devices cuda|fake] [--json FILE] [--quick]
//
// With --processes, P processes of this host (this one and P-1 it starts), 2 replicas each on
// the devices (default cuda: every replica on the GPUs it sees, several sharing one), talking
// through shared memory alone: the all-reduce of device buffers moves between the processes
// in the device (CUDA IPC), and its bits, the other collectives and the all-reduce's speed
// are checked as above. `--devices fake` runs the same on the fake device (a test of the
// build without a GPU).
//
// Exit status: 0 every check passed; 1 a check failed; 77 this process sees no CUDA device
// (what CTest reads as skipped).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "replicator/device.h"
#include "replicator/replicator.h"
#include "src/engines/shm/shm_mesh.h"
#include "src/engines/shm/shm_transport.h"
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

// ---- processes of one host ------------------------------------------------------------------

// This process's part of a job of `processes` on this host that meet in folder `meet`: each
// writes its shared-memory offer there and attaches to the others'. Throws Error when a peer's
// offer does not come within 60 s or cannot be attached.
std::unique_ptr<Replicator> join(int rank, int processes, const std::string& meet,
                                 const Config& config) {
  namespace fs = std::filesystem;
  auto mesh = replicator::detail::ShmMesh::try_make(rank, processes, config.local_replicas);
  if (!mesh) throw replicator::Error("no shared memory between processes here");
  const fs::path mine = fs::path(meet) / ("offer." + std::to_string(rank));
  std::ofstream(mine.string() + ".tmp") << mesh->offer();
  fs::rename(mine.string() + ".tmp", mine);
  std::vector<std::string> offers(static_cast<std::size_t>(processes));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int q = 0; q < processes; ++q) {
    const fs::path path = fs::path(meet) / ("offer." + std::to_string(q));
    while (!fs::exists(path)) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw replicator::Error("process " + std::to_string(q) + " never offered its memory");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    offers[static_cast<std::size_t>(q)] = text.str();
  }
  if (!mesh->attach_offers(offers)) throw replicator::Error("could not attach to the peers");
  replicator::detail::ShmMesh* attached = mesh.get();
  auto repl = replicator::detail::make_replicator(
      config, replicator::detail::make_shm_transport(std::move(mesh), {}));
  repl->run([](ReplicaContext& ctx) { ctx.barrier(); });  // every peer has attached
  attached->unlink();
  return repl;
}

// One process's checks and speed rows in the job of `processes`.
void across_processes(Results& results, Replicator& repl, bool cuda, bool quick) {
  const std::vector<std::size_t> counts =
      quick ? std::vector<std::size_t>{1, 1023}
            : std::vector<std::size_t>{0, 1, 1023, (std::size_t{1} << 20) + 3};
  for (const std::size_t count : counts) {
    for (const DType dtype : checks::kDtypes) {
      for (const ReduceOp op : checks::kOps) {
        results.check("all_reduce bits across processes",
                      checks::all_reduce_bits(repl, count, dtype, op));
      }
    }
  }
  results.check("fused all_reduce bits across processes", checks::fused_all_reduce_bits(repl));
  results.check("every collective across processes", checks::every_collective(repl));
  if (!cuda) return;
  const int R = repl.num_replicas();
  for (const std::size_t bytes :
       quick ? std::vector<std::size_t>{std::size_t{16} << 20}
             : std::vector<std::size_t>{std::size_t{16} << 20, std::size_t{64} << 20}) {
    const auto seconds = repl.run([&](ReplicaContext& ctx) {
      replicator::DeviceMemory memory(ctx.device(), bytes);
      std::vector<std::byte> zeros(bytes);
      replicator::copy_bytes(ctx.device(), memory.data(), replicator::Device{}, zeros.data(),
                             bytes);
      const Buffer b{
          .data = memory.data(), .count = bytes / 4, .dtype = DType::kF32, .device = ctx.device()};
      for (int i = 0; i < 3; ++i) ctx.all_reduce(std::span<const Buffer>(&b, 1));
      ctx.barrier();
      const int iterations = quick ? 5 : 20;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) ctx.all_reduce(std::span<const Buffer>(&b, 1));
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
             iterations;
    });
    const double s = *std::max_element(seconds.begin(), seconds.end());
    const double busbw = static_cast<double>(bytes) / s / 1e9 * 2.0 * (R - 1) / R;
    std::printf("across processes: R %d, %zu bytes: %.1f us, busbw %.2f GB/s\n", R, bytes, s * 1e6,
                busbw);
    results.rows.push_back("{\"R\": " + std::to_string(R) + ", \"processes\": true, \"bytes\": " +
                           std::to_string(bytes) + ", \"seconds\": " + std::to_string(s) +
                           ", \"busbw_GBps\": " + std::to_string(busbw) + "}");
  }
}

// Process `rank` of the job: meets the others in `meet`, checks, reports.
int process_main(int rank, int processes, const std::string& meet, const std::string& devices,
                 const std::string& json, bool quick) {
  const bool cuda = devices == "cuda";
  const MemoryKind kind = cuda ? MemoryKind::kCuda : MemoryKind::kFake;
  if (replicator::device_count(kind) == 0) {
    std::printf("gpu_check: no CUDA device visible; nothing checked\n");
    return 77;
  }
  Results results;
  try {
    Config config = checks::config_for(kind, 2, cuda ? replicator::device_count(kind) : 2);
    config.transport.calibration = "off";
    const auto repl = join(rank, processes, meet, config);
    across_processes(results, *repl, cuda, quick);
  } catch (const std::exception& e) {
    results.check("gpu_check across processes", std::string("stopped: ") + e.what());
  }
  if (rank == 0 && !json.empty()) replicator::gpu::write_json(json, results, "all_reduce");
  std::printf("gpu_check: process %d of %d on %s: %s, %d checks passed, %zu failed\n", rank,
              processes, devices.c_str(), results.failed.empty() ? "PASS" : "FAIL", results.passed,
              results.failed.size());
  return results.failed.empty() ? 0 : 1;
}

// Starts processes 1..P-1 as this program (before this one touches a device: CUDA does not
// survive a fork), runs process 0 here, and waits for the others. Returns the exit status.
int run_processes(int processes, const std::string& devices, const std::string& json, bool quick,
                  const char* self) {
  namespace fs = std::filesystem;
  // Children exec this program anew, so asking CUDA here before the fork is safe.
  if (replicator::device_count(devices == "cuda" ? MemoryKind::kCuda : MemoryKind::kFake) == 0) {
    std::printf("gpu_check: no CUDA device visible; nothing checked\n");
    return 77;
  }
  char folder[] = "/tmp/gpu_check_meet.XXXXXX";
  if (mkdtemp(folder) == nullptr) return 2;
  std::vector<pid_t> children;
  for (int rank = 1; rank < processes; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string r = std::to_string(rank), p = std::to_string(processes);
      std::vector<const char*> args = {self,     "--rank", r.c_str(),   "--processes",  p.c_str(),
                                       "--meet", folder,   "--devices", devices.c_str()};
      if (quick) args.push_back("--quick");
      args.push_back(nullptr);
      execv(self, const_cast<char* const*>(args.data()));
      _exit(127);
    }
    children.push_back(pid);
  }
  int status = process_main(0, processes, folder, devices, json, quick);
  for (const pid_t pid : children) {
    int child = 0;
    if (waitpid(pid, &child, 0) != pid || !WIFEXITED(child) || WEXITSTATUS(child) != 0) {
      std::printf("gpu_check: process %d failed (status %d)\n", static_cast<int>(pid), child);
      status = 1;
    }
  }
  fs::remove_all(folder);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  int processes = 0;
  int rank = -1;
  std::string meet;
  std::string devices = "cuda";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--processes" && i + 1 < argc) {
      processes = std::atoi(argv[++i]);
    } else if (arg == "--rank" && i + 1 < argc) {
      rank = std::atoi(argv[++i]);
    } else if (arg == "--meet" && i + 1 < argc) {
      meet = argv[++i];
    } else if (arg == "--devices" && i + 1 < argc) {
      devices = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: gpu_check [--json FILE] [--quick] "
                   "[--processes P [--devices cuda|fake]]\n");
      return 2;
    }
  }
  if (processes > 1 || rank >= 0) {
    if (processes < 2 || (devices != "cuda" && devices != "fake")) {
      std::fprintf(stderr, "gpu_check: --processes takes 2 or more; --devices cuda or fake\n");
      return 2;
    }
    if (rank >= 0) return process_main(rank, processes, meet, devices, json, quick);
    return run_processes(processes, devices, json, quick, argv[0]);
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
