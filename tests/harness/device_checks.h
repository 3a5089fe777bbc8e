// The device path's checks, on any kind of device memory: the unit tests run them on the fake
// device (tests/core/device_test.cc) and scripts/gpu_check.sh on a GPU (tests/gpu/gpu_check.cc).
// Each returns an empty string when the check holds, else what went wrong. Header-only; needs
// neither GoogleTest nor LibTorch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "replicator/device.h"
#include "replicator/replicator.h"
#include "tests/harness/harness.h"

namespace replicator::device_checks {

inline constexpr DType kDtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                    DType::kI32, DType::kI64, DType::kU8};
inline constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kProd};

// Random elements of `dtype`: every bit pattern (NaN, infinities and subnormals among the
// floats) when `any_bits`, else finite values of mixed magnitudes (integers: any bits).
inline std::vector<std::byte> random_elements(DType dtype, std::size_t count, std::uint32_t seed,
                                              bool any_bits = false) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(count * dtype_size(dtype));
  if (any_bits || dtype == DType::kI32 || dtype == DType::kI64 || dtype == DType::kU8) {
    for (auto& b : v) b = static_cast<std::byte>(rng());
    return v;
  }
  const std::vector<float> f = harness::mixed_magnitudes(seed, count);
  for (std::size_t i = 0; i < count; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(v.data() + 4 * i, &f[i], 4);
    } else if (dtype == DType::kF64) {
      const double d = f[i];
      std::memcpy(v.data() + 8 * i, &d, 8);
    } else {
      const std::uint16_t h = dtype == DType::kBF16 ? bfloat16(f[i]).bits : float16(f[i]).bits;
      std::memcpy(v.data() + 2 * i, &h, 2);
    }
  }
  return v;
}

// Device memory holding a copy of `host`.
struct OnDevice {
  OnDevice(Device device, const std::vector<std::byte>& host, DType dtype)
      : memory(device, host.size()), dtype(dtype), count(host.size() / dtype_size(dtype)) {
    copy_bytes(device, memory.data(), Device{}, host.data(), host.size());
  }
  Buffer buffer() const {
    return Buffer{.data = memory.data(), .count = count, .dtype = dtype, .device = memory.device()};
  }
  std::vector<std::byte> read() const {
    std::vector<std::byte> out(memory.bytes());
    copy_bytes(Device{}, out.data(), memory.device(), memory.data(), out.size());
    return out;
  }
  DeviceMemory memory;
  DType dtype;
  std::size_t count;
};

inline Buffer host_buffer(std::vector<std::byte>& v, DType dtype) {
  return Buffer{.data = v.data(), .count = v.size() / dtype_size(dtype), .dtype = dtype};
}

// A Config of `replicas` local replicas on `devices` devices of `kind` (at most as many as the
// process has: replicas share them).
inline Config config_for(MemoryKind kind, int replicas, int devices) {
  Config config;
  config.local_replicas = replicas;
  config.devices = std::string(to_string(kind)) + ":" +
                   std::to_string(std::max(1, std::min(devices, device_count(kind))));
  config.timeout = std::chrono::seconds(30);
  return config;
}

// Joins the failures of the replicas ("replica 2: ...").
inline std::string failures(const std::vector<std::string>& per_replica) {
  std::string all;
  for (std::size_t r = 0; r < per_replica.size(); ++r) {
    if (per_replica[r].empty()) continue;
    all += (all.empty() ? "" : "; ") + std::string("replica ") + std::to_string(r) + ": " +
           per_replica[r];
  }
  return all;
}

// all_reduce of `count` elements of `dtype` with `op` on device buffers gives the bits of the
// same all_reduce on host buffers, on every replica of `repl`.
inline std::string all_reduce_bits(Replicator& repl, std::size_t count, DType dtype, ReduceOp op) {
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const auto seed = static_cast<std::uint32_t>(ctx.replica_id() * 131 + count);
    std::vector<std::byte> host = random_elements(dtype, count, seed);
    OnDevice device(ctx.device(), host, dtype);
    const Buffer hb = host_buffer(host, dtype);
    ctx.all_reduce(std::span<const Buffer>(&hb, 1), {.op = op});
    const Buffer db = device.buffer();
    ctx.all_reduce(std::span<const Buffer>(&db, 1), {.op = op});
    return device.read() == host ? std::string() : std::string("bits differ from the host's");
  });
  std::vector<std::string> per(results.begin(), results.end());
  const std::string all = failures(per);
  if (all.empty()) return all;
  return "all_reduce(" + std::string(to_string(dtype)) + " x " + std::to_string(count) +
         ", op=" + std::string(to_string(op)) + ") of R=" + std::to_string(repl.num_replicas()) +
         ": " + all;
}

// A fused all_reduce over device buffers of different dtypes, one of them empty.
inline std::string fused_all_reduce_bits(Replicator& repl) {
  const auto results = repl.run([&](ReplicaContext& ctx) {
    const auto seed = static_cast<std::uint32_t>(ctx.replica_id());
    std::vector<std::byte> a = random_elements(DType::kBF16, 3000, seed);
    std::vector<std::byte> b;
    std::vector<std::byte> c = random_elements(DType::kF64, 517, seed + 50);
    const OnDevice da(ctx.device(), a, DType::kBF16), dc(ctx.device(), c, DType::kF64);
    const Buffer host[] = {host_buffer(a, DType::kBF16), host_buffer(b, DType::kI32),
                           host_buffer(c, DType::kF64)};
    const Buffer device[] = {da.buffer(), Buffer{.dtype = DType::kI32, .device = ctx.device()},
                             dc.buffer()};
    ctx.all_reduce(host, {.op = ReduceOp::kMean});
    ctx.all_reduce(device, {.op = ReduceOp::kMean});
    return da.read() == a && dc.read() == c ? std::string() : std::string("bits differ");
  });
  return failures(std::vector<std::string>(results.begin(), results.end()));
}

// Every other collective on device buffers gives the host's results; an in-place all_gather
// keeps its aliasing; a gather leaves the others' outputs as they were.
inline std::string every_collective(Replicator& repl) {
  const int R = repl.num_replicas();
  const std::size_t n = 12 * 7 * 16;  // a multiple of every R up to 4, and of 7
  std::string all;
  const auto check = [&](const std::function<void(ReplicaContext&, Buffer, Buffer)>& call,
                         std::size_t in_count, std::size_t out_count, const char* what) {
    const auto results = repl.run([&](ReplicaContext& ctx) {
      const auto seed = static_cast<std::uint32_t>(ctx.replica_id() + 7);
      std::vector<std::byte> in = random_elements(DType::kF32, in_count, seed);
      std::vector<std::byte> out = random_elements(DType::kF32, out_count, seed + 99);
      const OnDevice din(ctx.device(), in, DType::kF32), dout(ctx.device(), out, DType::kF32);
      call(ctx, host_buffer(in, DType::kF32), host_buffer(out, DType::kF32));
      call(ctx, din.buffer(), dout.buffer());
      return dout.read() == out && din.read() == in ? std::string() : std::string("differs");
    });
    const std::string f = failures(std::vector<std::string>(results.begin(), results.end()));
    if (!f.empty()) all += (all.empty() ? "" : "; ") + std::string(what) + ": " + f;
  };
  const auto Rs = static_cast<std::size_t>(R);
  check([](ReplicaContext& c, Buffer in, Buffer out) { c.all_gather(in, out); }, n, n * Rs,
        "all_gather");
  check([](ReplicaContext& c, Buffer in, Buffer out) { c.gather(in, out, {.root = 0}); }, n, n * Rs,
        "gather");
  check([](ReplicaContext& c, Buffer in, Buffer out) { c.reduce_scatter(in, out); }, n, n / Rs,
        "reduce_scatter");
  check([](ReplicaContext& c, Buffer in, Buffer out) { c.all_to_all(in, out); }, n, n,
        "all_to_all");
  check(
      [R](ReplicaContext& c, Buffer in, Buffer out) {
        const PermutePair pairs[] = {{0, R - 1}};
        c.permute(in, out, pairs);
      },
      n, n, "permute");
  check(
      [](ReplicaContext& c, Buffer in, Buffer) {
        c.broadcast(std::span<const Buffer>(&in, 1), {.root = c.num_replicas() - 1});
      },
      n, 0, "broadcast");
  check(
      [](ReplicaContext& c, Buffer, Buffer out) {
        Buffer block = out;  // the input is this replica's block of the output
        block.count = out.count / static_cast<std::size_t>(c.num_replicas());
        block.data = static_cast<std::byte*>(out.data) +
                     block.bytes() * static_cast<std::size_t>(c.replica_id());
        c.all_gather(block, out);
      },
      0, n * Rs, "all_gather in place");
  return all;
}

// One replica (1) passes host memory where the others pass device memory: every replica
// raises CollectiveMismatch naming the kinds of memory. `repl` has at least 2 replicas.
inline std::string host_against_device_mismatch(Replicator& repl) {
  const int R = repl.num_replicas();
  std::vector<std::exception_ptr> caught(static_cast<std::size_t>(R));
  MemoryKind kind = MemoryKind::kHost;
  const std::exception_ptr from_run = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      if (ctx.replica_id() == 0) kind = ctx.device().kind;
      harness::keep_and_rethrow(caught[static_cast<std::size_t>(ctx.replica_id())], [&] {
        std::vector<std::byte> host = random_elements(DType::kF32, 64, 1);
        const OnDevice device(ctx.device(), host, DType::kF32);
        const Buffer b = ctx.replica_id() == 1 ? host_buffer(host, DType::kF32) : device.buffer();
        ctx.all_reduce(std::span<const Buffer>(&b, 1));
      });
    });
  });
  if (!harness::caught_as<CollectiveMismatch>(from_run)) {
    return "run threw " + harness::describe(from_run);
  }
  const std::string device_call = "all_reduce(f32 x 64 on " + std::string(to_string(kind));
  std::vector<std::string> per(static_cast<std::size_t>(R));
  for (std::size_t r = 0; r < per.size(); ++r) {
    const auto e = harness::caught_as<CollectiveMismatch>(caught[r]);
    if (!e) {
      per[r] = "caught " + harness::describe(caught[r]);
    } else if (std::string(e->what()).find(device_call) == std::string::npos ||
               std::string(e->what()).find("replica 1 called all_reduce(f32 x 64, op=sum)") ==
                   std::string::npos) {
      per[r] = std::string("the message names no kinds of memory: ") + e->what();
    }
  }
  return failures(per);
}

// The last replica arrives late (once the others have given up): the others' all_reduce on
// device buffers ends at its deadline with Timeout naming it. `repl` has at least 2 replicas
// and a short timeout.
inline std::string late_replica_timeout(Replicator& repl) {
  const int R = repl.num_replicas();
  const int late = R - 1;
  std::vector<std::exception_ptr> caught(static_cast<std::size_t>(R));
  harness::CountDown waiters_done(R - 1);
  bool waited = true;
  const std::exception_ptr from_run = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      std::vector<std::byte> host(256 * 4);
      const OnDevice device(ctx.device(), host, DType::kF32);
      const Buffer b = device.buffer();
      if (ctx.replica_id() == late) waited = waiters_done.wait_for(std::chrono::seconds(30));
      const std::exception_ptr error =
          harness::capture([&] { ctx.all_reduce(std::span<const Buffer>(&b, 1)); });
      caught[static_cast<std::size_t>(ctx.replica_id())] = error;
      if (ctx.replica_id() != late) waiters_done.count_down();
      if (error) std::rethrow_exception(error);
    });
  });
  if (!waited) return "the waiting replicas neither timed out nor returned within 30 s";
  if (!from_run) return "run did not throw";
  std::vector<std::string> per(static_cast<std::size_t>(R));
  for (int r = 0; r < late; ++r) {
    const auto e = harness::caught_as<Timeout>(caught[static_cast<std::size_t>(r)]);
    if (!e) {
      per[static_cast<std::size_t>(r)] = "caught " + harness::describe(caught[r]);
    } else if (e->missing() != std::vector<int>{late}) {
      per[static_cast<std::size_t>(r)] = std::string("Timeout names others: ") + e->what();
    }
  }
  return failures(per);
}

// Replica 0 fails before its collective: the others, in an all_gather on device buffers, are
// released with Aborted and run rethrows replica 0's failure.
inline std::string failure_releases(Replicator& repl) {
  const int R = repl.num_replicas();
  std::vector<std::exception_ptr> released(static_cast<std::size_t>(R));
  const std::exception_ptr from_run = harness::capture([&] {
    repl.run([&](ReplicaContext& ctx) {
      if (ctx.replica_id() == 0) throw std::runtime_error("step failed");
      harness::keep_and_rethrow(released[static_cast<std::size_t>(ctx.replica_id())], [&] {
        std::vector<std::byte> in(64), out(64 * static_cast<std::size_t>(R));
        const OnDevice din(ctx.device(), in, DType::kU8), dout(ctx.device(), out, DType::kU8);
        ctx.all_gather(din.buffer(), dout.buffer());
      });
    });
  });
  if (!harness::caught_as<ReplicaFailed>(from_run)) {
    return "run threw " + harness::describe(from_run);
  }
  std::vector<std::string> per(static_cast<std::size_t>(R));
  for (std::size_t r = 1; r < per.size(); ++r) {
    if (!harness::caught_as<Aborted>(released[r])) {
      per[r] = "caught " + harness::describe(released[r]);
    }
  }
  return failures(per);
}

}  // namespace replicator::device_checks
