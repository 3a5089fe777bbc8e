// mpi_allreduce_bench: the plain-MPI reference for `replicator bench collectives`.
//
//   mpirun --allow-run-as-root -np 2 mpi_allreduce_bench [--json] [--min-bytes 4] ...
//
// Times MPI_Allreduce (in place, MPI_IN_PLACE, like replicator's all_reduce; or
// --out-of-place) over the same sizes and with the same rules as the replicator bench:
// each rank allocates its buffers ONCE (at the largest size) and faults every page in
// before timing; a measurement is `warmup` calls, a barrier, then `iters` timed calls; a
// rank's per-call time is elapsed / iters and the measurement's is the MAX over ranks; a
// row reports the median of `repeats` measurements. Without --iters the count is chosen so
// a measurement lasts about 0.1 s (5..1000 calls). --op mean is MPI_SUM followed by a
// division of the result on every rank, inside the timed region (what a user would write).
//
// Rows: bytes = per-rank buffer, algbw = bytes / time, busbw = algbw * 2(P-1)/P,
// traffic_bytes = 2 * P * bytes, mem_fraction = traffic_bytes / time / copy bandwidth. The
// copy bandwidth is measured by rank 0 (threads = min(P, cores)) while the other ranks
// sleep, before any MPI traffic.
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/median.h"
#include "bench/memory_bandwidth.h"

namespace {

using Json = nlohmann::ordered_json;
using replicator::bench::median;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Flags {
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
  bool out_of_place = false;
  bool json = false;
};

// "4", "64K", "256M", "1G" (binary multiples; "KiB", "MB" and lower case accepted too).
std::uint64_t parse_bytes(const std::string& text, const std::string& flag) {
  const UsageError bad(flag + " must be a size in bytes such as 4, 64K, 256M or 1G, got '" + text +
                       "'");
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) throw bad;
  const std::uint64_t value = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB")) {
    unit.resize(unit.size() - 2);
  } else if (unit.ends_with("B")) {
    unit.pop_back();
  }
  if (unit.empty()) return value;
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit == "G") return value << 30;
  throw bad;
}

// Rank 0 measures the copy bandwidth on all cores (mpirun binds each rank to one core, so
// its affinity is widened meanwhile); the other ranks wait without spinning.
double measure_copy_bandwidth(int rank, int size, std::size_t bytes, int* threads) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  *threads = std::min(size, cores);
  double gbps = 0;
  if (rank == 0) {
    cpu_set_t saved;
    const bool have_saved = sched_getaffinity(0, sizeof(saved), &saved) == 0;
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE && c < cores; ++c) CPU_SET(c, &all);
    sched_setaffinity(0, sizeof(all), &all);
    gbps = replicator::bench::copy_bandwidth_gbps(*threads, bytes);
    if (have_saved) sched_setaffinity(0, sizeof(saved), &saved);
  }
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) usleep(1000);
  }
  MPI_Bcast(&gbps, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return gbps;
}

template <typename T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
}

struct Settings {
  std::vector<std::uint64_t> sizes;
  int iters = 0;  // 0: adaptive
  int warmup = 5;
  int repeats = 5;
  std::string dtype;
  std::string op;
  bool in_place = true;
  bool json = false;
  double copy_gbps = 0;
  int rank = 0;
  int size = 1;
};

template <typename T>
class AllreduceBench {
 public:
  AllreduceBench(const Settings& s, T* send, T* recv) : s_(s), send_(send), recv_(recv) {
    if (s.op == "sum" || s.op == "mean") op_ = MPI_SUM;
    if (s.op == "min") op_ = MPI_MIN;
    if (s.op == "max") op_ = MPI_MAX;
    if (s.op == "prod") op_ = MPI_PROD;
  }

  void run_all() {
    for (const std::uint64_t bytes : s_.sizes) {
      const std::uint64_t count = bytes / sizeof(T);
      if (count > 0) measure(count);
    }
  }

 private:
  void call(std::size_t count) {
    MPI_Allreduce(s_.in_place ? MPI_IN_PLACE : send_, recv_, static_cast<int>(count), mpi_type<T>(),
                  op_, MPI_COMM_WORLD);
    if (s_.op == "mean") {
      const auto n = static_cast<T>(s_.size);
      for (std::size_t i = 0; i < count; ++i) recv_[i] = static_cast<T>(recv_[i] / n);
    }
  }

  // Per-call seconds of one measurement, the max over ranks.
  double timed_run(std::size_t count, int warmup, int iters) {
    for (int i = 0; i < warmup; ++i) call(count);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) call(count);
    const double mine = (MPI_Wtime() - start) / iters;
    double slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return std::max(slowest, 1e-9);
  }

  // As in the replicator bench: one call, then a run of about 20 ms; the smaller estimate.
  int choose_iters(std::size_t count) {
    const double first = timed_run(count, 1, 1);
    const int calls = std::clamp(static_cast<int>(0.02 / first), 1, 1000);
    const double t = std::min(first, timed_run(count, 1, calls));
    return std::clamp(static_cast<int>(std::ceil(0.1 / t)), 5, 1000);
  }

  void measure(std::uint64_t count) {
    const auto size_bytes = static_cast<unsigned long long>(count) * sizeof(T);
    const int iters = s_.iters > 0 ? s_.iters : choose_iters(count);
    std::vector<double> times;
    for (int rep = 0; rep < s_.repeats; ++rep) {
      times.push_back(timed_run(count, s_.warmup, iters));
      const double left = times.back() * (s_.warmup + iters) * (s_.repeats - rep - 1);
      if (rep == 0 && left > 2.0 && s_.rank == 0) {
        std::fprintf(stderr,
                     "[mpi bench] all_reduce %llu B: %d iterations x %d repeats, about "
                     "%.0f s more\n",
                     size_bytes, iters, s_.repeats, left);
      }
    }
    if (s_.rank != 0) return;
    const double seconds = median(times);
    const auto bytes = static_cast<double>(size_bytes);
    const double p = s_.size;
    const double algbw = bytes / seconds / 1e9;
    const double busbw = algbw * 2.0 * (p - 1) / p;
    const double traffic = 2.0 * p * bytes;
    const double mem_fraction = traffic / seconds / 1e9 / s_.copy_gbps;
    if (s_.json) {
      Json j;
      j["type"] = "collective";
      j["collective"] = "all_reduce";
      j["engine"] = "mpi";
      j["replicas"] = s_.size;
      j["dtype"] = s_.dtype;
      j["op"] = s_.op;
      j["in_place"] = s_.in_place;
      j["bytes"] = size_bytes;
      j["count"] = count;
      j["iters"] = iters;
      j["warmup"] = s_.warmup;
      j["repeats"] = s_.repeats;
      j["time_us"] = seconds * 1e6;
      j["time_us_min"] = *std::min_element(times.begin(), times.end()) * 1e6;
      j["time_us_max"] = *std::max_element(times.begin(), times.end()) * 1e6;
      j["algbw_gbps"] = algbw;
      j["busbw_gbps"] = busbw;
      j["traffic_bytes"] = traffic;
      j["mem_fraction"] = mem_fraction;
      j["copy_gbps"] = s_.copy_gbps;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf(" %15s %12llu %12llu %6d %12.2f %11.3f %11.3f %12.3f\n", "all_reduce", size_bytes,
                  static_cast<unsigned long long>(count), iters, seconds * 1e6, algbw, busbw,
                  mem_fraction);
    }
    std::fflush(stdout);
  }

  const Settings& s_;
  T* send_;
  T* recv_;
  MPI_Op op_ = MPI_SUM;
};

template <typename T>
void run_typed(const Settings& s, std::uint64_t max_bytes) {
  // Allocated once for every size, every page faulted in now.
  replicator::bench::PrefaultedBuffer send(s.in_place ? 0 : max_bytes);
  replicator::bench::PrefaultedBuffer recv(max_bytes);
  AllreduceBench<T>(s, reinterpret_cast<T*>(send.data()), reinterpret_cast<T*>(recv.data()))
      .run_all();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Settings s;
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);

  Flags f;
  CLI::App app{"Plain-MPI reference: times MPI_Allreduce like `replicator bench collectives`"};
  app.add_option("--min-bytes", f.min_bytes, "Smallest size (suffixes K, M, G)")
      ->capture_default_str();
  app.add_option("--max-bytes", f.max_bytes, "Largest size (suffixes K, M, G)")
      ->capture_default_str();
  app.add_option("--step-factor", f.step_factor, "Sizes are min, min*f, ... up to max")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  f.iters_option =
      app.add_option("--iters", f.iters,
                     "Timed calls per measurement (default: adaptive, ~0.1 s, 5..1000)")
          ->check(CLI::Range(1, 100000000));
  app.add_option("--warmup", f.warmup, "Untimed calls before each measurement")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000000));
  app.add_option("--repeats", f.repeats, "Measurements per row; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--dtype", f.dtype, "Element type (MPI has no bf16/f16)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f64", "i32", "i64", "u8"}));
  app.add_option("--op", f.op, "Reduce op")
      ->capture_default_str()
      ->check(CLI::IsMember({"sum", "mean", "min", "max", "prod"}));
  app.add_option("--copy-bytes", f.copy_bytes,
                 "Array size of the copy-bandwidth measurement (auto: 4x the last-level cache)")
      ->capture_default_str();
  app.add_flag("--out-of-place", f.out_of_place, "Separate send buffer instead of MPI_IN_PLACE");
  app.add_flag("--json", f.json, "One JSON object per line instead of the table");

  std::uint64_t max_bytes = 0;
  std::uint64_t copy_bytes = 0;
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (s.rank == 0) app.exit(e);
      MPI_Finalize();
      return e.get_exit_code() == 0 ? 0 : 2;
    }
    const std::uint64_t min_bytes = parse_bytes(f.min_bytes, "--min-bytes");
    max_bytes = parse_bytes(f.max_bytes, "--max-bytes");
    copy_bytes = f.copy_bytes == "auto" ? replicator::bench::stream_array_bytes()
                                        : parse_bytes(f.copy_bytes, "--copy-bytes");
    if (min_bytes < 1) throw UsageError("--min-bytes must be at least 1, got " + f.min_bytes);
    if (max_bytes < min_bytes) {
      throw UsageError("--max-bytes (" + f.max_bytes + ") must not be below --min-bytes (" +
                       f.min_bytes + ")");
    }
    if (max_bytes > (std::uint64_t{1} << 30)) {
      throw UsageError("--max-bytes must be at most 1G (MPI counts are int), got " + f.max_bytes);
    }
    if (copy_bytes < 4096) {
      throw UsageError("--copy-bytes must be at least 4K, got " + f.copy_bytes);
    }
    for (std::uint64_t b = min_bytes; b <= max_bytes;
         b *= static_cast<std::uint64_t>(f.step_factor)) {
      s.sizes.push_back(b);
    }
  } catch (const UsageError& e) {
    if (s.rank == 0) std::fprintf(stderr, "mpi_allreduce_bench: error: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  s.iters = f.iters_option->count() > 0 ? f.iters : 0;
  s.warmup = f.warmup;
  s.repeats = f.repeats;
  s.dtype = f.dtype;
  s.op = f.op;
  s.in_place = !f.out_of_place;
  s.json = f.json;

  int copy_threads = 1;
  s.copy_gbps = measure_copy_bandwidth(s.rank, s.size, copy_bytes, &copy_threads);
  if (s.rank == 0) {
    if (s.json) {
      Json j;
      j["type"] = "memory";
      j["engine"] = "mpi";
      j["kernel"] = "copy";
      j["threads"] = copy_threads;
      j["bytes_per_array"] = copy_bytes;
      j["copy_gbps"] = s.copy_gbps;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf(
          "# mpi_allreduce_bench: %d processes, dtype %s, op %s, %s, warmup %d, "
          "repeats %d (median), iters %s\n",
          s.size, s.dtype.c_str(), s.op.c_str(), s.in_place ? "in place" : "out of place", s.warmup,
          s.repeats, s.iters ? std::to_string(s.iters).c_str() : "adaptive (~0.1 s, 5..1000)");
      std::printf(
          "# memory copy bandwidth: %.2f GB/s (STREAM copy, %d threads, 2 x %llu MiB "
          "arrays, read + written, median of 7 passes)\n",
          s.copy_gbps, copy_threads, static_cast<unsigned long long>(copy_bytes >> 20));
      std::printf("#%15s %12s %12s %6s %12s %11s %11s %12s\n", "collective", "bytes", "count",
                  "iters", "time_us", "algbw_GB/s", "busbw_GB/s", "mem_fraction");
    }
    std::fflush(stdout);
  }

  if (s.dtype == "f32") run_typed<float>(s, max_bytes);
  if (s.dtype == "f64") run_typed<double>(s, max_bytes);
  if (s.dtype == "i32") run_typed<std::int32_t>(s, max_bytes);
  if (s.dtype == "i64") run_typed<std::int64_t>(s, max_bytes);
  if (s.dtype == "u8") run_typed<std::uint8_t>(s, max_bytes);
  MPI_Finalize();
  return 0;
}
