// `replicator bench collectives`: time every collective over a range of sizes, nccl-tests
// style, on the local engine or across processes (mpi, gloo), beside the machine's own memory
// copy bandwidth measured in the same run and, for all_reduce across processes, the engine's
// own all-reduce (MPI_Allreduce, gloo::allreduce) measured in the same run.
//
// Engines. --engine defaults to what Config::from_env() picks: mpi under mpirun, gloo under
// `replicator launch`, local otherwise; an --engine that contradicts it is an error. With P
// processes of L = --replicas local replicas each, R = P·L; only process 0 prints, every
// process takes part in every measurement. Without --replicas, L is 2 on the local engine
// (as before) and REPLICATOR_LOCAL_REPLICAS (`replicator launch --local-replicas`) or 1
// across processes.
//
// Method. Each replica allocates ONE arena (two regions of --max-bytes) on its own thread
// and faults every page in, before anything is timed; every size and collective reuses it.
// Then untimed barriers run until their time per call stops falling (see settle()).
// One measurement is one Replicator::run: every replica issues `warmup` calls, a barrier,
// then times `iters` calls with steady_clock; the per-call time is the max over ALL replicas
// (of all processes: an all_reduce kMax inside the step) of elapsed / iters. A row reports
// the median of `repeats` measurements. Without --iters, the count is chosen so that a
// measurement lasts about 0.1 s (5 to 1000 calls); every process gets the same count.
//
// Native rows ("mpi-native", "gloo-native"; all_reduce with --dtype f32 --op sum only; off
// with --no-native): right after each all_reduce row, the engine's own in-place all-reduce
// of the same buffer (replica 0's arena), run by the main thread of each process outside any
// Replicator::run, with the same warmup, iters and repeats, each repeat right beside the
// same repeat of ours, after it in even repeats and before it in odd ones (so that a drift
// of the machine's speed, or an effect of going first, affects both alike): `warmup`
// calls, a one-element native all-reduce as barrier, `iters` timed calls; each repeat's per-call
// time is the max over processes (combined afterwards by one all_reduce kMax step), and the row is
// their median. Its replicas are the P processes (busbw with n = P). The table adds the ratio
// ours/native busbw on that row (JSON: busbw_ours_over_native; time_ours_over_native is its
// inverse): the median over repeats of the ratio within each repeat's pair, not the ratio of
// the two medians. The machine's speed drifts by more than 5 % over seconds here; the two
// calls of a pair, run back to back, see the same speed, and their ratio is what the row
// compares (where ours is the engine's own call behind its frame, a ratio of two medians
// taken from different repeats read 0.85-1.13 over eight runs on one day).
//
// --check adds an untimed pass of `iters` calls after the timed ones: before each call
// every replica writes inputs that depend on its (global) id and on the iteration (and
// poisons the output), after it checks every element of its output against a closed form
// over R replicas. Inputs are small integers, so sums and products are exact in every dtype
// and order. A failure is counted over all processes; each process describes its own.
//
// Reporting (DESIGN.md "Reporting"; each collective's factors are its Measures in the
// collectives' table, src/collectives/table.cc): bytes is the per-replica buffer S
// (all_gather: the whole output; reduce_scatter: the whole input; all_to_all and permute: the
// input); count = bytes / element size; algbw = bytes / time; busbw = algbw times 2(R-1)/R for
// all_reduce, (R-1)/R for all_gather, gather, reduce_scatter and all_to_all, 1 for broadcast
// and permute. traffic_bytes is what an in-process implementation of R replicas must at least
// read plus write, and mem_fraction = traffic_bytes / time / the memory's bandwidth for that
// kind of traffic (meaningful when all processes share one machine): all_reduce updates each
// replica's buffer in place, every line it writes was just read, and is held against the
// update kernel (a[i] = b[i] = a[i] + b[i]); the others write lines they did not read, each
// store first reading its line for ownership, and are held against STREAM copy (a[i] = b[i]).
// The two differ by 1.6-2.2x on this kind of machine (bench/memory_bandwidth.h): against
// copy, a 64 MiB all_reduce of 2 replicas showed mem_fraction 2.19. Both are measured with
// min(R, cores) threads: on the local engine before the replica threads start; across
// processes by process 0 while the others wait in a barrier; their arrays are at least 4x
// the last-level cache, so they are the memory's. A collective whose buffers fit in that
// cache can move its traffic faster than memory: mem_fraction above 1 then says the data
// stayed in cache. A row whose buffers are past the cache and whose mem_fraction is above
// 1.1 (the run-to-run spread of a median) cannot be: it is flagged "!" (JSON:
// "faster_than_memory"), and a note after the table says that its time, its traffic model
// or the yardstick is wrong.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "apps/command.h"
#include "apps/engine_choice.h"
#include "bench/median.h"
#include "bench/memory_bandwidth.h"
#include "replicator/replicator.h"
#include "src/collectives/across/across.h"
#include "src/collectives/frames.h"
#include "src/collectives/plan.h"
#include "src/collectives/table.h"
#include "src/engines/local/local_engine.h"
#include "src/runtime/calibration.h"
#include "src/runtime/host_policy.h"
#include "src/runtime/testing.h"

namespace replicator::apps {

namespace {

using bench::median;
using bench::PrefaultedBuffer;
using Json = nlohmann::ordered_json;

// The collectives this benchmark measures are the entries of the collectives' table that have
// Measures (src/collectives/table.h), in table order; what it needs to know of each to size
// buffers and report figures (nccl-tests' definitions) comes from that entry. How each is
// called and checked is in CollectiveBench::issue and CollectiveBench::check_call.
using detail::OpKind;

const detail::CollectiveDef& def_of(OpKind kind) { return detail::definition(kind); }
const detail::Measures& measures_of(OpKind kind) { return *def_of(kind).measures; }

std::vector<OpKind> measured_kinds() {
  std::vector<OpKind> kinds;
  for (std::uint8_t k = 0; k < static_cast<std::uint8_t>(OpKind::kCount); ++k) {
    if (detail::definition(k).measures != nullptr) kinds.push_back(static_cast<OpKind>(k));
  }
  return kinds;
}

std::string name_of(OpKind kind) { return std::string(def_of(kind).traits.name); }
// Takes --op: the entries whose calls carry a reduce op show it in their descriptions.
bool reduces(OpKind kind) { return def_of(kind).traits.shows_op; }
bool blocked(OpKind kind) { return measures_of(kind).blocked; }
// Moves data (a barrier does not): it has an algorithm in one process.
bool moves_data(OpKind kind) { return def_of(kind).in_process != nullptr; }
// Uses the second region of the arena: an output apart from its input.
bool needs_output(OpKind kind) { return moves_data(kind) && !def_of(kind).in_place; }
double bus_factor(OpKind kind, int r) { return measures_of(kind).bus_factor(r); }
double traffic_bytes(OpKind kind, int r, double bytes) {
  return measures_of(kind).traffic(r) * bytes;
}
// The memory kernel whose bandwidth that traffic runs at: kUpdate where every written line was
// read first (in place), kCopy where outputs are written fresh.
bench::MemoryKernel yardstick_of(OpKind kind) {
  return measures_of(kind).updates ? bench::MemoryKernel::kUpdate : bench::MemoryKernel::kCopy;
}
// The engine's own version of the collective, timed beside ours (all_reduce), or null.
auto native_version(OpKind kind) { return measures_of(kind).native_f32_sum; }
const char* to_string(bench::MemoryKernel kernel) {
  return kernel == bench::MemoryKernel::kCopy ? "copy" : "update";
}

// "4", "64K", "256M", "1G" (binary multiples; "KiB", "MB" and lower case accepted too).
std::uint64_t parse_bytes(const std::string& text, const std::string& flag) {
  const auto bad = [&] {
    return ConfigError(flag + " must be a size in bytes such as 4, 64K, 256M or 1G, got '" + text +
                       "'");
  };
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) throw bad();
  std::uint64_t value = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB")) {
    unit.resize(unit.size() - 2);
  } else if (unit.ends_with("B")) {
    unit.pop_back();
  }
  int shift = 0;
  if (unit == "K") {
    shift = 10;
  } else if (unit == "M") {
    shift = 20;
  } else if (unit == "G") {
    shift = 30;
  } else if (!unit.empty()) {
    throw bad();
  }
  return value << shift;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof(text), bytes == std::floor(bytes) ? "%.0f %s" : "%.1f %s", bytes,
                units[u]);
  return text;
}

// ---- element types -------------------------------------------------------------------

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// The library's accumulator type: 16-bit floats accumulate in f32.
template <typename T>
using Acc = std::conditional_t<kIsHalf<T>, float, T>;

template <typename T>
T to_element(double v) {
  if constexpr (kIsHalf<T>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double to_double(T v) {
  if constexpr (kIsHalf<T>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

// One step of a reduction, with the library's semantics (integers wrap).
template <typename A>
A combine(ReduceOp op, A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    if (op == ReduceOp::kSum || op == ReduceOp::kMean) {
      return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
    if (op == ReduceOp::kProd) {
      return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    }
  } else {
    if (op == ReduceOp::kSum || op == ReduceOp::kMean) return a + b;
    if (op == ReduceOp::kProd) return a * b;
  }
  return op == ReduceOp::kMin ? std::min(a, b) : std::max(a, b);
}

// ---- the check's closed forms ----------------------------------------------------------
//
// Every input is periodic in its element index with period kPeriod (a prime): replica r's
// input element k at iteration i is table[(k + shift(r, i)) % kPeriod]. Results are then
// periodic too, so their expected values fit in one small table per iteration.

constexpr std::size_t kPeriod = 251;

std::size_t shift_of(int replica, int iteration) {
  return (static_cast<std::size_t>(replica) * 17 + static_cast<std::size_t>(iteration) * 29 + 1) %
         kPeriod;
}

template <typename T>
using Table = std::array<T, kPeriod>;

// p[k] = table[(start + k) % kPeriod] for k < n.
template <typename T>
void fill_periodic(T* p, std::size_t n, const Table<T>& table, std::size_t start) {
  std::size_t t = start % kPeriod;
  for (std::size_t k = 0; k < n; ++k) {
    p[k] = table[t];
    if (++t == kPeriod) t = 0;
  }
}

struct CheckResult {
  std::uint64_t wrong = 0;
  std::string first;  // the first wrong element, described
};

// Counts the k < n with p[k] != table[(start + k) % kPeriod] (bitwise); describes the first.
template <typename T>
void verify_periodic(const T* p, std::size_t n, const Table<T>& table, std::size_t start,
                     std::size_t index_base, int replica, int iteration, CheckResult& result) {
  std::size_t t = start % kPeriod;
  for (std::size_t k = 0; k < n; ++k) {
    // Bits, not values: the library promises bitwise-identical results.
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
    if (std::memcmp(&p[k], &table[t], sizeof(T)) != 0) {
      if (result.wrong++ == 0) {
        char text[160];
        std::snprintf(text, sizeof(text),
                      "replica %d, iteration %d, output element %zu is %g but should be %g",
                      replica, iteration, index_base + k, to_double(p[k]), to_double(table[t]));
        result.first = text;
      }
    }
    if (++t == kPeriod) t = 0;
  }
}

// ---- the benchmark ---------------------------------------------------------------------

struct Settings {
  std::string engine = "local";  // what carries bytes between processes
  int processes = 1;             // P
  int local_replicas = 2;        // L
  int replicas = 2;              // R = P x L
  int rank = 0;                  // this process; only process 0 prints
  // Measure the engine's own version beside ours (mpi or gloo, f32 sum; all_reduce).
  detail::NativeCollectives* native = nullptr;
  std::vector<std::uint64_t> sizes;
  std::uint64_t max_bytes = 0;  // --max-bytes: the arenas' regions hold this much
  std::optional<int> iters;
  int warmup = 5;
  int repeats = 5;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<OpKind> kinds;
  bool check = false;
  bool json = false;
  std::uint64_t copy_bytes = 0;        // the memory bandwidths' array size
  int copy_threads = 0;                // and their threads
  double copy_gbps = 0;                // median pass
  double copy_best_gbps = 0;           // best pass
  double update_gbps = 0;              // median pass
  double update_best_gbps = 0;         // best pass
  std::size_t cache_bytes = 0;         // the last-level cache (0: unknown)
  mutable int faster_than_memory = 0;  // rows flagged so far (process 0; counted as printed)
  std::size_t output_offset = 0;       // where the second region of each arena starts

  bool across_processes() const { return engine != "local"; }
  bool prints() const { return rank == 0; }
};

struct Row {
  OpKind kind = OpKind::kBarrier;
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
  int iters = 0;
  double seconds = 0;  // median over repeats of the per-call time
  double min_seconds = 0;
  double max_seconds = 0;
  std::optional<bool> check_ok;
  // A row of the engine's own all-reduce ("<engine>-native"): its replicas are the P
  // processes; the ratio to ours is the median over repeats of ours / native time, pair by
  // pair.
  bool native = false;
  double ours_over_native_time = 0;
};

void print_header(const Settings& s) {
  if (!s.across_processes()) {
    std::printf("#%15s %12s %12s %6s %12s %11s %11s %12s%s\n", "collective", "bytes", "count",
                "iters", "time_us", "algbw_GB/s", "busbw_GB/s", "mem_fraction",
                s.check ? "  check" : "");
    return;
  }
  std::printf("#%11s %15s %12s %12s %6s %12s %11s %11s %12s%s%s\n", "engine", "collective", "bytes",
              "count", "iters", "time_us", "algbw_GB/s", "busbw_GB/s", "mem_fraction",
              s.check ? "  check" : "", s.native ? "  ours/native_busbw" : "");
}

// The memory's bandwidth for `kind`'s traffic, GB/s.
double yardstick_gbps(const Settings& s, OpKind kind) {
  return yardstick_of(kind) == bench::MemoryKernel::kUpdate ? s.update_gbps : s.copy_gbps;
}

// Whether a row's buffers (every replica's input, and output where it has one) are past the
// last-level cache: its traffic then comes from memory.
bool past_the_cache(const Settings& s, const Row& row, int r) {
  const double footprint = static_cast<double>(row.bytes) * r * (needs_output(row.kind) ? 2 : 1);
  return s.cache_bytes > 0 && footprint > 2.0 * static_cast<double>(s.cache_bytes);
}

// Above this mem_fraction a row past the cache is flagged: two medians of one operation on
// this machine differ by up to 10 % from run to run.
constexpr double kFasterThanMemory = 1.1;

void print_row(const Settings& s, const Row& row) {
  if (!s.prints()) return;
  const int r = row.native ? s.processes : s.replicas;
  const std::string engine = row.native ? s.engine + "-native" : s.engine;
  const double algbw = row.bytes ? static_cast<double>(row.bytes) / row.seconds / 1e9 : 0.0;
  const double busbw = algbw * bus_factor(row.kind, r);
  const double traffic = traffic_bytes(row.kind, r, static_cast<double>(row.bytes));
  const double mem_fraction = traffic / row.seconds / 1e9 / yardstick_gbps(s, row.kind);
  const bool impossible = past_the_cache(s, row, r) && mem_fraction > kFasterThanMemory;
  if (impossible) ++s.faster_than_memory;
  const char* check = !row.check_ok ? "-" : *row.check_ok ? "ok" : "FAIL";
  const bool has_ratio = row.native && row.ours_over_native_time > 0;  // ours / native busbw
  // Busbw counts ours over R replicas and the native call over P processes.
  const double ratio = has_ratio ? bus_factor(row.kind, s.replicas) / bus_factor(row.kind, r) /
                                       row.ours_over_native_time
                                 : 0.0;
  if (s.json) {
    Json j;
    j["type"] = "collective";
    j["collective"] = name_of(row.kind);
    j["engine"] = engine;
    j["processes"] = s.processes;
    j["local_replicas"] = row.native ? 1 : s.local_replicas;
    j["replicas"] = r;
    j["dtype"] = std::string(to_string(s.dtype));
    j["op"] = reduces(row.kind) ? std::string(to_string(s.op)) : "none";
    j["bytes"] = row.bytes;
    j["count"] = row.count;
    j["iters"] = row.iters;
    j["warmup"] = s.warmup;
    j["repeats"] = s.repeats;
    j["time_us"] = row.seconds * 1e6;
    j["time_us_min"] = row.min_seconds * 1e6;
    j["time_us_max"] = row.max_seconds * 1e6;
    j["algbw_gbps"] = algbw;
    j["busbw_gbps"] = busbw;
    j["traffic_bytes"] = traffic;
    j["mem_fraction"] = mem_fraction;
    j["yardstick"] = to_string(yardstick_of(row.kind));
    j["yardstick_gbps"] = yardstick_gbps(s, row.kind);
    j["faster_than_memory"] = impossible;
    j["copy_gbps"] = s.copy_gbps;
    if (row.check_ok) {
      j["check"] = check;
    } else {
      j["check"] = nullptr;
    }
    if (row.native) {
      if (has_ratio) {
        j["busbw_ours_over_native"] = ratio;
        j["time_ours_over_native"] = row.ours_over_native_time;
      } else {
        j["busbw_ours_over_native"] = nullptr;
        j["time_ours_over_native"] = nullptr;
      }
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (s.across_processes()) std::printf(" %11s", engine.c_str());
    std::printf(" %15s %12llu %12llu %6d %12.2f %11.3f %11.3f %11.3f%s%s%s",
                name_of(row.kind).c_str(), static_cast<unsigned long long>(row.bytes),
                static_cast<unsigned long long>(row.count), row.iters, row.seconds * 1e6, algbw,
                busbw, mem_fraction, impossible ? "!" : " ", s.check ? "  " : "",
                s.check ? check : "");
    if (s.across_processes() && s.native) {
      if (has_ratio) {
        std::printf("  %18.3f", ratio);
      } else {
        std::printf("  %18s", "-");
      }
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

// The table's lines on the memory's two bandwidths (the yardsticks of mem_fraction).
void print_memory_bandwidth(const Settings& s, const char* where) {
  const std::string arrays = human_bytes(static_cast<double>(s.copy_bytes));
  std::printf(
      "# memory copy bandwidth: %.2f GB/s median, %.2f best (STREAM copy a = b, %d threads, 2 x "
      "%s arrays, read + written, 7 passes%s): the yardstick of every collective but all_reduce\n",
      s.copy_gbps, s.copy_best_gbps, s.copy_threads, arrays.c_str(), where);
  std::printf(
      "# memory update bandwidth: %.2f GB/s median, %.2f best (a = b = a + b, the same arrays "
      "and threads): all_reduce's, which writes back the lines it read\n",
      s.update_gbps, s.update_best_gbps);
  std::printf("# last-level cache: %s; mem_fraction flagged \"!\" above %.1f past twice that\n",
              s.cache_bytes ? human_bytes(static_cast<double>(s.cache_bytes)).c_str() : "unknown",
              kFasterThanMemory);
}

// A line for the reader: "# ..." in the table, {"type": "note"} in JSON. Process 0 only.
void print_note(const Settings& s, const std::string& text) {
  if (!s.prints()) return;
  if (s.json) {
    Json j;
    j["type"] = "note";
    j["text"] = text;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("# note: %s\n", text.c_str());
  }
  std::fflush(stdout);
}

template <typename T>
class CollectiveBench {
 public:
  CollectiveBench(Replicator& repl, const Settings& settings, PerReplica<PrefaultedBuffer>& arenas)
      : repl_(repl), s_(settings), arenas_(arenas) {
    const int n = s_.replicas;
    for (int j = 0; j < n; ++j) ring_.emplace_back(j, (j + 1) % n);
    for (std::size_t t = 0; t < kPeriod; ++t) {
      data_[t] = to_element<T>(static_cast<double>(t));
      switch (s_.op) {
        case ReduceOp::kSum:
        case ReduceOp::kMean:
          reduce_in_[t] = to_element<T>(static_cast<double>(t % 3));
          break;
        case ReduceOp::kMin:
        case ReduceOp::kMax:
          reduce_in_[t] = data_[t];
          break;
        case ReduceOp::kProd:
          reduce_in_[t] = to_element<T>(t % 4 == 0 ? 2.0 : 1.0);
          break;
      }
    }
    poison_ = to_element<T>(255.0);
  }

  // Returns whether every check passed.
  bool run_all() {
    settle();
    bool ok = true;
    for (const OpKind kind : s_.kinds) {
      if (!moves_data(kind)) {
        ok = measure(kind, 0) && ok;
        continue;
      }
      for (const std::uint64_t bytes : s_.sizes) {
        std::uint64_t count = bytes / sizeof(T);
        if (blocked(kind)) count -= count % static_cast<std::uint64_t>(s_.replicas);
        if (count == 0) continue;  // too small for one element (per block)
        ok = measure(kind, count) && ok;
      }
    }
    return ok;
  }

 private:
  T* region_a(const ReplicaContext& ctx) { return reinterpret_cast<T*>(arenas_[ctx].data()); }
  T* region_b(const ReplicaContext& ctx) {
    return reinterpret_cast<T*>(arenas_[ctx].data() + s_.output_offset);
  }

  void issue(ReplicaContext& ctx, OpKind kind, T* a, T* b, std::size_t count) {
    const std::size_t block = count / static_cast<std::size_t>(s_.replicas);
    switch (kind) {
      case OpKind::kAllReduce:
        ctx.all_reduce(std::span<T>(a, count), {.op = s_.op});
        break;
      case OpKind::kAllGather:
        ctx.all_gather(std::span<T>(a, block), std::span<T>(b, count));
        break;
      case OpKind::kGather:
        ctx.gather(std::span<T>(a, block), std::span<T>(b, ctx.replica_id() == 0 ? count : 0));
        break;
      case OpKind::kBroadcast:
        ctx.broadcast(std::span<T>(a, count), {.root = 0});
        break;
      case OpKind::kReduceScatter:
        ctx.reduce_scatter(std::span<T>(a, count), std::span<T>(b, block), {.op = s_.op});
        break;
      case OpKind::kAllToAll:
        ctx.all_to_all(std::span<T>(a, count), std::span<T>(b, count));
        break;
      case OpKind::kPermute:
        ctx.permute(std::span<T>(a, count), std::span<T>(b, count),
                    std::span<const PermutePair>(ring_));
        break;
      case OpKind::kBarrier:
        ctx.barrier();
        break;
      case OpKind::kEndStep:  // not in measured_kinds(): no program calls it
      case OpKind::kCount:
        throw InvalidArgument("bench collectives: " + name_of(kind) + " cannot be issued");
    }
  }

  // One measurement: per-call seconds, the max over replicas.
  double timed_run(OpKind kind, std::size_t count, int warmup, int iters) {
    auto per_call = repl_.run([&](ReplicaContext& ctx) {
      T* a = region_a(ctx);
      T* b = region_b(ctx);
      for (int i = 0; i < warmup; ++i) issue(ctx, kind, a, b, count);
      ctx.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) issue(ctx, kind, a, b, count);
      const auto stop = std::chrono::steady_clock::now();
      // The max over every replica of every process, so that all processes agree on it
      // (and so on the adaptive iteration count).
      double seconds = std::chrono::duration<double>(stop - start).count() / iters;
      ctx.all_reduce(std::span<double>(&seconds, 1), {.op = ReduceOp::kMax});
      return seconds;
    });
    return std::max(per_call[0], 1e-9);
  }

  // Runs barriers, untimed for the rows, until their time per call stops falling. Right
  // after the arenas are faulted in, the kernel may wake every replica thread of a process
  // on one core and spread them only some milliseconds later: on 2 cores, the first ~10-40
  // ms of 4 B all-reduces took 10 µs a call instead of 0.4. Batches of about 5 ms, until
  // none has been 10 % faster than the best before it for 100 ms of calls (and at least
  // 5 batches), or 2 s in all. Every process sees the same times (timed_run's max), so all
  // stop together. Says so on stderr when the first batch took over twice the best.
  void settle() {
    constexpr double kBatch = 0.005;
    constexpr double kQuiet = 0.1;
    constexpr double kLimit = 2.0;
    const double one = timed_run(OpKind::kBarrier, 0, 1, 1);
    double first = 0;
    double best = one;
    double spent = one;
    double since_best = 0;
    int batches = 0;
    while (spent < kLimit && (batches < 5 || since_best < kQuiet)) {
      const int calls = std::clamp(static_cast<int>(kBatch / best), 1, 100000);
      const double t = timed_run(OpKind::kBarrier, 0, 0, calls);
      if (batches++ == 0) first = t;
      spent += t * calls;
      since_best += t * calls;
      if (t < 0.9 * best) since_best = 0;
      best = std::min(best, t);
    }
    if (first > 2 * best && s_.prints()) {
      std::fprintf(stderr,
                   "[bench] timing starts after %.0f ms of untimed barriers: the first took "
                   "%.2f µs a call, the fastest %.2f\n",
                   spent * 1e3, first * 1e6, best * 1e6);
    }
  }

  // Enough calls for a measurement of about 0.1 s, at least 5 and at most 1000: one call,
  // then a run of about 20 ms; noise only lengthens times, so the smaller estimate is used.
  int choose_iters(OpKind kind, std::size_t count) {
    const double first = timed_run(kind, count, 1, 1);
    const int calls = std::clamp(static_cast<int>(0.02 / first), 1, 1000);
    const double t = std::min(first, timed_run(kind, count, 1, calls));
    return std::clamp(static_cast<int>(std::ceil(0.1 / t)), 5, 1000);
  }

  bool measure(OpKind kind, std::uint64_t count) {
    Row row;
    row.kind = kind;
    row.bytes = count * sizeof(T);
    row.count = count;
    row.iters = s_.iters ? *s_.iters : choose_iters(kind, count);
    const bool with_native =
        native_version(kind) != nullptr && s_.native != nullptr && std::is_same_v<T, float>;
    std::vector<double> times;
    std::vector<double> native_times;
    for (int rep = 0; rep < s_.repeats; ++rep) {
      // Odd repeats run the native one first, so that what the first of a pair meets (or
      // leaves to the second) falls on both alike.
      const bool native_first = with_native && rep % 2 == 1;
      if (native_first) native_times.push_back(native_run(kind, count, row.iters));
      times.push_back(timed_run(kind, count, s_.warmup, row.iters));
      if (with_native && !native_first) {
        native_times.push_back(native_run(kind, count, row.iters));
      }
      const double left = times.back() * (s_.warmup + row.iters) * (s_.repeats - rep - 1);
      if (rep == 0 && left > 2.0 && s_.prints()) {
        std::fprintf(stderr, "[bench] %s %s: %d iterations x %d repeats, about %.0f s more\n",
                     name_of(kind).c_str(), human_bytes(static_cast<double>(row.bytes)).c_str(),
                     row.iters, s_.repeats, left);
      }
    }
    row.seconds = median(times);
    row.min_seconds = *std::min_element(times.begin(), times.end());
    row.max_seconds = *std::max_element(times.begin(), times.end());
    if (s_.check && moves_data(kind)) {
      const auto [result, wrong_everywhere] = check(kind, count, row.iters);
      row.check_ok = wrong_everywhere == 0;
      if (result.wrong) {  // each process describes its own failures
        const std::string what = std::string(to_string(s_.dtype)) +
                                 (reduces(kind) ? ", op " + std::string(to_string(s_.op)) : "");
        const std::string where = s_.across_processes()
                                      ? " (process " + std::to_string(s_.rank) + " of " +
                                            std::to_string(s_.processes) + ")"
                                      : std::string();
        std::fprintf(stderr,
                     "check FAILED: %s (%s) of %llu bytes on %d replicas%s: %llu wrong elements; "
                     "first: %s\n",
                     name_of(kind).c_str(), what.c_str(),
                     static_cast<unsigned long long>(row.bytes), s_.replicas, where.c_str(),
                     static_cast<unsigned long long>(result.wrong), result.first.c_str());
      }
    }
    print_row(s_, row);
    if (with_native) print_native(row, times, native_times);
    return row.check_ok.value_or(true);
  }

  // One repeat of the engine's own version of `kind` (the table's native_f32_sum: in place,
  // f32 sum) of `count` floats on the main thread of each process: ours' warmup, a barrier (a
  // one-element native all-reduce), `iters` timed calls. Per call, this process's time.
  double native_run(OpKind kind, std::size_t count, int iters) {
    detail::NativeCollectives& transport = *s_.native;
    const auto native = native_version(kind);
    auto* data = reinterpret_cast<float*>(arenas_[0].data());  // replica 0's, pre-faulted
    float token = 0;
    for (int i = 0; i < s_.warmup; ++i) native(transport, data, count);
    transport.native_all_reduce_f32(&token, 1);  // the barrier
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) native(transport, data, count);
    const auto stop = std::chrono::steady_clock::now();
    return std::max(std::chrono::duration<double>(stop - start).count() / iters, 1e-9);
  }

  // The native row, printed right after ours: each repeat's time is the max over processes;
  // `ours` holds our time of each repeat (already the max over every replica), paired with
  // the native time of the same repeat for the ratio.
  void print_native(const Row& ours, const std::vector<double>& ours_times,
                    const std::vector<double>& times) {
    std::vector<double> slowest;
    repl_.run([&](ReplicaContext& ctx) {
      std::vector<double> mine = times;
      ctx.all_reduce(std::span<double>(mine), {.op = ReduceOp::kMax});
      if (ctx.local_replica_id() == 0) slowest = std::move(mine);
    });
    Row row;
    row.kind = ours.kind;
    row.native = true;
    row.bytes = ours.bytes;
    row.count = ours.count;
    row.iters = ours.iters;
    row.seconds = median(slowest);
    row.min_seconds = *std::min_element(slowest.begin(), slowest.end());
    row.max_seconds = *std::max_element(slowest.begin(), slowest.end());
    std::vector<double> pairs;
    for (std::size_t i = 0; i < std::min(ours_times.size(), slowest.size()); ++i) {
      if (slowest[i] > 0) pairs.push_back(ours_times[i] / slowest[i]);
    }
    if (!pairs.empty() && row.bytes > 0) row.ours_over_native_time = median(pairs);
    print_row(s_, row);
  }

  // The expected all_reduce result at iteration i: element k is expected[k % kPeriod].
  Table<T> expected_reduction(int iteration) const {
    Table<T> expected;
    const auto n = static_cast<std::size_t>(s_.replicas);
    for (std::size_t t = 0; t < kPeriod; ++t) {
      using A = Acc<T>;
      A acc = static_cast<A>(to_double(reduce_in_[(t + shift_of(0, iteration)) % kPeriod]));
      for (std::size_t r = 1; r < n; ++r) {
        const T x = reduce_in_[(t + shift_of(static_cast<int>(r), iteration)) % kPeriod];
        if constexpr (kIsHalf<T>) {
          acc = combine<A>(s_.op, acc, static_cast<float>(x));
        } else {
          acc = combine<A>(s_.op, acc, x);
        }
      }
      if (s_.op == ReduceOp::kMean) acc = static_cast<A>(acc / static_cast<A>(n));
      if constexpr (kIsHalf<T>) {
        expected[t] = T(acc);
      } else {
        expected[t] = acc;
      }
    }
    return expected;
  }

  // One checked call of `kind` by this replica at iteration `it`: fresh inputs (and poisoned
  // outputs), the call, every element of the output against its closed form.
  void check_call(ReplicaContext& ctx, OpKind kind, std::size_t count, int it,
                  CheckResult& result) {
    const int n = s_.replicas;
    const int r = ctx.replica_id();
    const std::size_t block = count / static_cast<std::size_t>(n);
    const std::size_t mine = shift_of(r, it);
    T* a = region_a(ctx);
    T* b = region_b(ctx);
    switch (kind) {
      case OpKind::kAllReduce: {
        fill_periodic(a, count, reduce_in_, mine);
        issue(ctx, kind, a, b, count);
        verify_periodic(a, count, expected_reduction(it), 0, 0, r, it, result);
        break;
      }
      case OpKind::kReduceScatter: {
        fill_periodic(a, count, reduce_in_, mine);
        std::fill(b, b + block, poison_);
        issue(ctx, kind, a, b, count);
        verify_periodic(b, block, expected_reduction(it), static_cast<std::size_t>(r) * block, 0, r,
                        it, result);
        break;
      }
      case OpKind::kAllGather: {
        fill_periodic(a, block, data_, mine);
        std::fill(b, b + count, poison_);
        issue(ctx, kind, a, b, count);
        for (int j = 0; j < n; ++j) {
          const std::size_t at = static_cast<std::size_t>(j) * block;
          verify_periodic(b + at, block, data_, shift_of(j, it), at, r, it, result);
        }
        break;
      }
      case OpKind::kGather: {
        fill_periodic(a, block, data_, mine);
        std::fill(b, b + count, poison_);
        issue(ctx, kind, a, b, count);
        for (int j = 0; r == 0 && j < n; ++j) {
          const std::size_t at = static_cast<std::size_t>(j) * block;
          verify_periodic(b + at, block, data_, shift_of(j, it), at, r, it, result);
        }
        break;
      }
      case OpKind::kBroadcast: {
        fill_periodic(a, count, data_, mine);
        issue(ctx, kind, a, b, count);
        verify_periodic(a, count, data_, shift_of(0, it), 0, r, it, result);
        break;
      }
      case OpKind::kAllToAll: {
        fill_periodic(a, count, data_, mine);
        std::fill(b, b + count, poison_);
        issue(ctx, kind, a, b, count);
        for (int j = 0; j < n; ++j) {
          const std::size_t at = static_cast<std::size_t>(j) * block;
          const std::size_t from = static_cast<std::size_t>(r) * block % kPeriod;
          verify_periodic(b + at, block, data_, shift_of(j, it) + from, at, r, it, result);
        }
        break;
      }
      case OpKind::kPermute: {
        fill_periodic(a, count, data_, mine);
        std::fill(b, b + count, poison_);
        issue(ctx, kind, a, b, count);
        verify_periodic(b, count, data_, shift_of((r + n - 1) % n, it), 0, r, it, result);
        break;
      }
      case OpKind::kBarrier:
      case OpKind::kEndStep:
      case OpKind::kCount:
        break;  // nothing to check
    }
  }

  // Untimed: `iters` calls, each with fresh inputs, each output checked in full. Returns
  // this process's failures and the number of wrong elements over all processes.
  std::pair<CheckResult, std::uint64_t> check(OpKind kind, std::size_t count, int iters) {
    auto results = repl_.run([&](ReplicaContext& ctx) {
      T* a = region_a(ctx);
      T* b = region_b(ctx);
      CheckResult result;
      for (int it = 0; it < iters; ++it) check_call(ctx, kind, count, it, result);
      // Back to zeros, so later timed runs see the same data as the first ones.
      std::fill(a, a + count, T{});
      if (needs_output(kind)) std::fill(b, b + count, T{});
      auto everywhere = static_cast<std::int64_t>(result.wrong);
      ctx.all_reduce(std::span<std::int64_t>(&everywhere, 1), {.op = ReduceOp::kSum});
      return std::pair<CheckResult, std::int64_t>(std::move(result), everywhere);
    });
    CheckResult total;
    for (const auto& [result, everywhere] : results) {
      if (result.wrong && total.wrong == 0) total.first = result.first;
      total.wrong += result.wrong;
    }
    return {total, static_cast<std::uint64_t>(results[0].second)};
  }

  Replicator& repl_;
  const Settings& s_;
  PerReplica<PrefaultedBuffer>& arenas_;
  std::vector<PermutePair> ring_;  // (j, j+1 mod R): a ring shift
  Table<T> data_;                  // inputs of the collectives that move data
  Table<T> reduce_in_;             // inputs of the reductions, chosen per op
  T poison_;                       // written to outputs before a checked call
};

template <typename T>
bool run_typed(Replicator& repl, const Settings& s, PerReplica<PrefaultedBuffer>& arenas) {
  return CollectiveBench<T>(repl, s, arenas).run_all();
}

// ---- flags ---------------------------------------------------------------------------

struct Flags {
  std::string engine;  // empty: what Config::from_env() picks
  bool plan = false;
  int replicas = 2;
  CLI::Option* replicas_option = nullptr;
  std::string min_bytes = "4";
  std::string max_bytes = "256M";
  std::string copy_bytes = "auto";
  int step_factor = 4;
  int iters = 0;
  CLI::Option* iters_option = nullptr;
  int warmup = 5;
  int repeats = 5;
  std::string dtype = "f32";
  std::string op = "sum";
  std::vector<std::string> collectives;
  bool check = false;
  bool json = false;
  bool no_native = false;
  std::string timeout;
};

DType parse_dtype(const std::string& name) {
  for (const DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32,
                        DType::kI64, DType::kU8}) {
    if (to_string(d) == name) return d;
  }
  throw ConfigError("--dtype must be one of f32, f64, bf16, f16, i32, i64, u8, got '" + name + "'");
}

ReduceOp parse_op(const std::string& name) {
  for (const ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd}) {
    if (to_string(op) == name) return op;
  }
  throw ConfigError("--op must be one of sum, mean, min, max, prod, got '" + name + "'");
}

// The copy bandwidth, measured by process 0 while the others wait in a barrier (their
// replicas nap in the transport), so that the processes do not share the memory bus.
bench::CopyBandwidth measure_copy_bandwidth(Replicator& repl, const Settings& s,
                                            bench::MemoryKernel kernel) {
  bench::CopyBandwidth measured;
  if (s.rank == 0) measured = bench::memory_bandwidth(kernel, s.copy_threads, s.copy_bytes);
  repl.run([](ReplicaContext& ctx) { ctx.barrier(); });
  return measured;
}

// The --plan table's "#" lines: the job, its frames, caches and calibration, the columns.
void print_plan_header(const Settings& s, const detail::HostPolicy& policy,
                       const std::optional<detail::ProcessLayout>& layout,
                       const detail::CacheFacts& cache, const detail::Calibration& calibration) {
  std::printf("# all_reduce plan: engine %s, %d processes x %d local replicas, %s %s%s\n",
              s.engine.c_str(), s.processes, s.local_replicas,
              std::string(to_string(s.dtype)).c_str(), std::string(to_string(s.op)).c_str(),
              policy.oversubscribed ? ", oversubscribed (more replica threads than cores)" : "");
  if (layout) {
    std::printf("# frames: %zu bytes of partials ride in a frame; engine's own all-reduce: %s\n",
                detail::frame_payload(layout->traits), layout->native ? "yes" : "no");
    std::printf(
        "# caches (sysfs): level 2 %zu KiB; last level %zu KiB shared by %d, %zu KiB "
        "a thread (results stream past it from an owner part that large)\n",
        cache.level2_bytes >> 10, cache.last_level_bytes >> 10, cache.last_level_sharers,
        cache.last_level_share() >> 10);
    const detail::TransportCosts& c = calibration.costs;
    if (c.exchange_known()) {
      std::printf("# calibration (%s%s), us at", calibration.measured ? "measured now" : "kept",
                  calibration.path.empty() ? "" : (", " + calibration.path).c_str());
      for (const std::size_t bytes : detail::kCostBytes) std::printf(" %zu", bytes);
      std::printf(" bytes:\n#   exchange between every pair:");
      for (const double t : c.exchange_s) std::printf(" %.2f", t * 1e6);
      std::printf("\n#   the same in the pipelined plan's steps:");
      for (const double t : c.stepped_s) std::printf(" %.2f", t * 1e6);
      std::printf("\n#   engine's own all-reduce:");
      for (const double t : c.native_s) std::printf(" %.2f", t * 1e6);
      std::printf("\n#   reduction of two inputs:");
      for (const double t : c.reduce_s) std::printf(" %.2f", t * 1e6);
      std::printf("\n# est_* columns: the chooser's estimates\n");
    } else {
      std::printf("# calibration: none (%s); the chooser's fixed limits\n",
                  detail::needs_calibration(*layout) ? "--calibration off"
                                                     : "no choice in this job depends on it");
    }
  }
  std::printf("%12s  %-8s  %-13s  %12s  %14s  %12s  %13s  %12s\n", "bytes", "local", "across",
              "step_bytes", "streamed_from", "est_gathered", "est_pipelined", "est_native");
}

// The --plan row of an all_reduce of `bytes`: in one process (no layout) the local path;
// across processes the algorithm, its step, where results stream, the chooser's estimates.
void print_plan_row(const Settings& s, const std::optional<detail::ProcessLayout>& layout,
                    const detail::MachineFacts& facts, std::uint64_t bytes) {
  const std::uint64_t count = bytes / dtype_size(s.dtype);
  Json j;
  j["type"] = "plan";
  j["collective"] = "all_reduce";
  j["bytes"] = bytes;
  std::string local = "-";
  if (!layout) {
    local = detail::choose_local_path(bytes, detail::LocalEngine::kStagingBytes, facts) ==
                    detail::Path::kStaged
                ? "staged"
                : "direct";
    j["local_path"] = local;
  }
  std::string across = "-";
  std::string step = "-";
  std::string streamed = "-";
  std::string est_gathered = "-";
  std::string est_pipelined = "-";
  std::string est_native = "-";
  if (layout) {
    const auto [lo, hi] = detail::slice_of(count, 0, s.local_replicas);
    const auto P = static_cast<std::uint64_t>(layout->processes);
    const std::size_t partial = detail::partial_size(s.dtype, s.op);
    const detail::LaneShape shape{.dtype = s.dtype,
                                  .op = s.op,
                                  .row_bytes = (hi - lo) * partial,
                                  .largest_part_bytes = (hi - lo + P - 1) / P * partial};
    const detail::AllReducePlan plan = detail::plan_all_reduce(*layout, shape);
    across = std::string(to_string(plan.algorithm));
    j["across"] = across;
    const detail::AllReduceShape modelled{.row_bytes = shape.row_bytes,
                                          .max_subtrees = layout->max_subtrees,
                                          .processes = layout->processes,
                                          .largest_part_bytes = shape.largest_part_bytes,
                                          .oversubscribed = layout->oversubscribed,
                                          .costs = layout->costs};
    const auto estimate = [&](double seconds, const char* name) {
      if (seconds < 0) return std::string("-");
      j[name] = seconds * 1e6;
      char text[32];
      std::snprintf(text, sizeof text, "%.2f us", seconds * 1e6);
      return std::string(text);
    };
    est_gathered = estimate(detail::gathered_seconds(modelled), "est_gathered_us");
    est_pipelined =
        estimate(detail::pipelined_seconds(
                     modelled, detail::pipelined_plan(modelled, layout->traits).step_bytes),
                 "est_pipelined_us");
    est_native = estimate(detail::native_seconds(modelled), "est_native_us");
    if (plan.algorithm == detail::AllReduceAlgorithm::kPipelined) {
      step = std::to_string(plan.step_bytes);
      j["step_bytes"] = plan.step_bytes;
      if (plan.stream_bytes != std::numeric_limits<std::size_t>::max()) {
        streamed = std::to_string(plan.stream_bytes);
        j["stream_bytes"] = plan.stream_bytes;
      }
    }
  }
  if (s.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%12llu  %-8s  %-13s  %12s  %14s  %12s  %13s  %12s\n",
                static_cast<unsigned long long>(bytes), local.c_str(), across.c_str(), step.c_str(),
                streamed.c_str(), est_gathered.c_str(), est_pipelined.c_str(), est_native.c_str());
  }
}

// --plan: what the chooser picks for an all_reduce of each size in this job, from the same
// facts the collectives use (the job's calibration, kept or measured as a Replicator's
// start does, and no collective timed): in one process the local path; across processes,
// for the largest lane's slice, the algorithm, its pipeline step, from which step size
// results are written past the cache, the frame payload, and the chooser's estimates.
void print_all_reduce_plan(const Settings& s, const Config& config, detail::Transport* transport) {
  const detail::HostPolicy policy = detail::host_policy(
      s.local_replicas, config.host_processes, std::thread::hardware_concurrency(), config.spin);
  const detail::MachineFacts facts{.oversubscribed = policy.oversubscribed};
  std::optional<detail::ProcessLayout> layout;
  detail::Calibration calibration;
  if (transport != nullptr && transport->size() > 1) {
    layout = detail::make_process_layout(*transport, s.local_replicas, policy.oversubscribed);
    // What a Replicator of this job would measure (or read) at start, every process together.
    calibration = detail::calibrate(*layout, config.transport.calibration, config.timeout);
    layout->costs = calibration.costs;
  }
  const detail::CacheFacts cache = detail::read_cache_facts();
  if (layout) layout->cache_share_bytes = cache.last_level_share();
  if (!s.prints()) return;
  if (!s.json) print_plan_header(s, policy, layout, cache, calibration);
  for (const std::uint64_t bytes : s.sizes) print_plan_row(s, layout, facts, bytes);
  std::fflush(stdout);
}

// What the flags say of the measurements (not of the job's layout), into `s`: dtype, op,
// counts, sizes, the collectives; throws ConfigError for a bad value.
void read_flags(const Flags& f, Settings& s) {
  s.dtype = parse_dtype(f.dtype);
  s.op = parse_op(f.op);
  s.warmup = f.warmup;
  s.repeats = f.repeats;
  s.check = f.check;
  s.json = f.json;
  if (f.iters_option->count() > 0) s.iters = f.iters;

  const std::uint64_t min_bytes = parse_bytes(f.min_bytes, "--min-bytes");
  s.max_bytes = parse_bytes(f.max_bytes, "--max-bytes");
  // auto: arrays of at least 4x the last-level cache, as STREAM asks.
  s.copy_bytes = f.copy_bytes == "auto" ? bench::stream_array_bytes()
                                        : parse_bytes(f.copy_bytes, "--copy-bytes");
  if (min_bytes < 1) throw ConfigError("--min-bytes must be at least 1, got " + f.min_bytes);
  if (s.max_bytes < min_bytes) {
    throw ConfigError("--max-bytes (" + f.max_bytes + ") must not be below --min-bytes (" +
                      f.min_bytes + ")");
  }
  if (s.max_bytes > (std::uint64_t{64} << 30)) {
    throw ConfigError("--max-bytes must be at most 64G, got " + f.max_bytes);
  }
  if (s.copy_bytes < 4096) {
    throw ConfigError("--copy-bytes must be at least 4K, got " + f.copy_bytes);
  }
  for (std::uint64_t b = min_bytes; b <= s.max_bytes;
       b *= static_cast<std::uint64_t>(f.step_factor)) {
    s.sizes.push_back(b);
  }

  std::vector<std::string> names = f.collectives;
  if (names.empty() || std::find(names.begin(), names.end(), "all") != names.end()) names.clear();
  for (const OpKind kind : measured_kinds()) {
    if (names.empty() || std::find(names.begin(), names.end(), name_of(kind)) != names.end()) {
      s.kinds.push_back(kind);
    }
  }
}

// --plan: the job's layout without a Replicator, then the chooser's picks.
void plan_only(Settings& s, const Config& config) {
  std::unique_ptr<detail::Transport> made;
  s.local_replicas = s.replicas = config.local_replicas;
  if (s.across_processes()) {
    made = detail::make_transport(config);
    s.processes = made->size();
    s.rank = made->rank();
    s.replicas = s.processes * s.local_replicas;
  }
  print_all_reduce_plan(s, config, made.get());
}

// The job, and the memory's bandwidths (into `s`), measured with min(R, cores) threads: in
// one process before the replica threads start; across processes by process 0 while the
// others wait. Across processes the engine's transport is made here, so that its own
// collectives can run beside ours; `transport` is then it (owned by the Replicator), else null.
std::unique_ptr<Replicator> start_job(Settings& s, const Config& config,
                                      detail::Transport*& transport) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.cache_bytes = bench::last_level_cache_bytes();
  std::unique_ptr<Replicator> repl;
  bench::CopyBandwidth copy;
  bench::CopyBandwidth update;
  transport = nullptr;
  if (!s.across_processes()) {
    s.local_replicas = s.replicas = config.local_replicas;
    s.copy_threads = std::min(s.replicas, cores);
    copy = bench::copy_bandwidth(s.copy_threads, s.copy_bytes);
    update = bench::memory_bandwidth(bench::MemoryKernel::kUpdate, s.copy_threads, s.copy_bytes);
    repl = std::make_unique<Replicator>(config);
  } else {
    std::unique_ptr<detail::Transport> made = detail::make_transport(config);
    transport = made.get();
    repl = detail::make_replicator(config, std::move(made));
    s.local_replicas = repl->num_local_replicas();
    s.replicas = repl->num_replicas();
    s.processes = s.replicas / s.local_replicas;
    s.rank = transport != nullptr ? transport->rank() : 0;
    s.copy_threads = std::min(s.replicas, cores);
    copy = measure_copy_bandwidth(*repl, s, bench::MemoryKernel::kCopy);
    update = measure_copy_bandwidth(*repl, s, bench::MemoryKernel::kUpdate);
  }
  s.copy_gbps = copy.median_gbps;
  s.copy_best_gbps = copy.best_gbps;
  s.update_gbps = update.median_gbps;
  s.update_best_gbps = update.best_gbps;
  return repl;
}

// What the run is and the memory's bandwidths: the table's "#" lines, or the JSON "memory"
// object. Process 0 only.
void print_preamble(const Settings& s) {
  if (s.json) {
    if (s.prints()) {
      Json j;
      j["type"] = "memory";
      j["engine"] = s.engine;
      j["processes"] = s.processes;
      j["local_replicas"] = s.local_replicas;
      j["replicas"] = s.replicas;
      j["kernel"] = "copy, update";
      j["threads"] = s.copy_threads;
      j["bytes_per_array"] = s.copy_bytes;
      j["copy_gbps"] = s.copy_gbps;
      j["copy_best_gbps"] = s.copy_best_gbps;
      j["update_gbps"] = s.update_gbps;
      j["update_best_gbps"] = s.update_best_gbps;
      j["last_level_cache_bytes"] = s.cache_bytes;
      std::printf("%s\n", j.dump().c_str());
    }
  } else if (!s.across_processes()) {
    std::printf(
        "# replicator bench collectives: engine local, %d replicas, dtype %s, op %s, "
        "warmup %d, repeats %d (median), iters %s\n",
        s.replicas, std::string(to_string(s.dtype)).c_str(), std::string(to_string(s.op)).c_str(),
        s.warmup, s.repeats,
        s.iters ? std::to_string(*s.iters).c_str() : "adaptive (~0.1 s, 5..1000)");
    print_memory_bandwidth(s, "");
  } else if (s.prints()) {
    std::printf(
        "# replicator bench collectives: engine %s, %d processes x %d local replicas = %d "
        "replicas, dtype %s, op %s, warmup %d, repeats %d (median), iters %s\n",
        s.engine.c_str(), s.processes, s.local_replicas, s.replicas,
        std::string(to_string(s.dtype)).c_str(), std::string(to_string(s.op)).c_str(), s.warmup,
        s.repeats, s.iters ? std::to_string(*s.iters).c_str() : "adaptive (~0.1 s, 5..1000)");
    std::printf("# time: per call, the max over all replicas of all processes\n");
    print_memory_bandwidth(s, "; process 0, the others waiting");
  }
  std::fflush(stdout);
}

// Whether to time the engine's own version beside ours (s.native), for the selected
// collectives that have one (the table's native_f32_sum: f32 sums only), with a note on why not.
void choose_native(Settings& s, detail::Transport* transport, bool no_native) {
  const bool wanted = std::any_of(s.kinds.begin(), s.kinds.end(),
                                  [](OpKind kind) { return native_version(kind) != nullptr; });
  if (!s.across_processes() || !wanted) return;
  auto* native_collectives = dynamic_cast<detail::NativeCollectives*>(transport);
  const std::string native = s.engine + "-native";
  if (no_native) {
    print_note(s, native + " all-reduce not measured (--no-native)");
  } else if (s.dtype != DType::kF32 || s.op != ReduceOp::kSum) {
    print_note(s, native + " all-reduce not measured: it only does f32 sums (this run: --dtype " +
                      std::string(to_string(s.dtype)) + " --op " + std::string(to_string(s.op)) +
                      ")");
  } else if (native_collectives == nullptr || transport->size() < 2) {
    print_note(s, native + " all-reduce not measured: this job has no transport");
  } else {
    s.native = native_collectives;
    if (!s.json) {
      print_note(s, native + " rows: the engine's own all-reduce (" +
                        (s.engine == "mpi" ? std::string("MPI_Allreduce, MPI_IN_PLACE")
                                           : std::string("gloo::allreduce")) +
                        ", f32 sum) of the same buffer on one thread per process, outside any "
                        "run; busbw with n = " +
                        std::to_string(s.processes) + " processes");
    }
  }
}

// One arena per replica for the whole run: region a (input, or in-place buffer) and, if a
// selected collective has a separate output, region b (from s.output_offset, set here).
PerReplica<PrefaultedBuffer> make_arenas(Replicator& repl, Settings& s) {
  bool two_regions = false;
  for (const OpKind kind : s.kinds) two_regions = two_regions || needs_output(kind);
  constexpr std::uint64_t kAlign = 4096;
  s.output_offset = (s.max_bytes + kAlign - 1) / kAlign * kAlign;
  const std::uint64_t arena_bytes = two_regions ? 2 * s.output_offset : s.output_offset;
  const double total = static_cast<double>(arena_bytes) * s.local_replicas;
  if (total >= 1024.0 * 1024 * 1024 && s.prints()) {
    std::fprintf(stderr, "[bench] allocating and faulting in %d x %s of buffers%s\n",
                 s.local_replicas, human_bytes(static_cast<double>(arena_bytes)).c_str(),
                 s.across_processes() ? " per process" : "");
  }
  return repl.per_replica([&] { return PrefaultedBuffer(arena_bytes); });
}

// Every row, with the element type of s.dtype. Returns whether every check passed.
bool run_rows(Replicator& repl, const Settings& s, PerReplica<PrefaultedBuffer>& arenas) {
  switch (s.dtype) {
    case DType::kF32:
      return run_typed<float>(repl, s, arenas);
    case DType::kF64:
      return run_typed<double>(repl, s, arenas);
    case DType::kBF16:
      return run_typed<bfloat16>(repl, s, arenas);
    case DType::kF16:
      return run_typed<float16>(repl, s, arenas);
    case DType::kI32:
      return run_typed<std::int32_t>(repl, s, arenas);
    case DType::kI64:
      return run_typed<std::int64_t>(repl, s, arenas);
    case DType::kU8:
      return run_typed<std::uint8_t>(repl, s, arenas);
  }
  return true;
}

int run_bench_collectives(const Flags& f) {
  Settings s;
  read_flags(f, s);
  Config config = config_for_engine(f.engine, "bench collectives");
  s.engine = std::string(to_string(config.engine));
  // Local replicas: --replicas; without it, 2 on the local engine (as always), and across
  // processes what the environment says (REPLICATOR_LOCAL_REPLICAS, or 1).
  if (f.replicas_option->count() > 0 || !s.across_processes()) {
    config.set("local-replicas", std::to_string(f.replicas));
  }
  if (!f.timeout.empty()) config.set("timeout", f.timeout);
  if (f.plan) {
    plan_only(s, config);
    return 0;
  }

  detail::Transport* transport = nullptr;  // owned by repl
  const std::unique_ptr<Replicator> repl = start_job(s, config, transport);
  print_preamble(s);
  choose_native(s, transport, f.no_native);
  auto arenas = make_arenas(*repl, s);
  if (!s.json && s.prints()) print_header(s);
  const bool ok = run_rows(*repl, s, arenas);
  if (s.faster_than_memory > 0) {
    print_note(s, std::to_string(s.faster_than_memory) +
                      " row(s) flagged \"!\": buffers past the last-level cache moved faster "
                      "than the memory's own kernel for that traffic; the row's time, its traffic "
                      "model or the yardstick is wrong");
  }
  if (!ok) {
    if (s.prints()) {
      std::fprintf(stderr,
                   "replicator bench collectives: --check found wrong results (see above)\n");
    }
    return 1;
  }
  return 0;
}

}  // namespace

Command add_bench_collectives(CLI::App& bench) {
  auto flags = std::make_shared<Flags>();
  CLI::App* app = bench.add_subcommand(
      "collectives",
      "Time every collective over a range of sizes, on the local engine or across processes "
      "(under mpirun or replicator launch)");
  app->add_option("--engine", flags->engine,
                  "local, mpi or gloo (default: mpi under mpirun, gloo under replicator "
                  "launch, else local); must agree with how the processes were started")
      ->check(CLI::IsMember({"local", "mpi", "gloo"}));
  flags->replicas_option =
      app->add_option("--replicas", flags->replicas,
                      "Local replicas (threads) per process (default: 2 on the local engine; "
                      "across processes REPLICATOR_LOCAL_REPLICAS, or 1)")
          ->check(CLI::Range(1, 4096));
  app->add_option("--min-bytes", flags->min_bytes, "Smallest size (suffixes K, M, G)")
      ->capture_default_str();
  app->add_option("--max-bytes", flags->max_bytes, "Largest size (suffixes K, M, G)")
      ->capture_default_str();
  app->add_option("--step-factor", flags->step_factor, "Sizes are min, min*f, ... up to max")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  flags->iters_option =
      app->add_option("--iters", flags->iters,
                      "Timed calls per measurement (default: adaptive, ~0.1 s, 5..1000)")
          ->check(CLI::Range(1, 100000000));
  app->add_option("--warmup", flags->warmup, "Untimed calls before each measurement")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000000));
  app->add_option("--repeats", flags->repeats, "Measurements per row; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app->add_option("--dtype", flags->dtype, "Element type")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f64", "bf16", "f16", "i32", "i64", "u8"}));
  app->add_option("--op", flags->op, "Reduce op of all_reduce and reduce_scatter")
      ->capture_default_str()
      ->check(CLI::IsMember({"sum", "mean", "min", "max", "prod"}));
  std::vector<std::string> collectives = {"all"};
  std::string listed;
  for (const OpKind kind : measured_kinds()) {
    collectives.push_back(name_of(kind));
    listed += (listed.empty() ? "" : ", ") + name_of(kind);
  }
  app->add_option("--collectives", flags->collectives,
                  "Comma-separated list (default all): " + listed)
      ->delimiter(',')
      ->check(CLI::IsMember(collectives));
  app->add_option("--copy-bytes", flags->copy_bytes,
                  "Array size of the memory copy-bandwidth measurement (auto: 4x the "
                  "last-level cache, at least 256M, at most 1/8 of the memory)")
      ->capture_default_str();
  app->add_flag("--check", flags->check,
                "Verify every element of every call of an extra untimed pass; exit 1 on error");
  app->add_flag("--json", flags->json, "One JSON object per line instead of the table");
  app->add_flag("--plan", flags->plan,
                "Print what the chooser picks for an all_reduce of each size in this job (the "
                "local path, or the algorithm across processes, with the job's calibration), and "
                "time no collective");
  app->add_flag("--no-native", flags->no_native,
                "Across processes, do not also time the engine's own all-reduce");
  app->add_option("--timeout", flags->timeout, "Deadline of every collective, e.g. 30s");
  return {app, [flags] { return run_bench_collectives(*flags); }};
}

}  // namespace replicator::apps
