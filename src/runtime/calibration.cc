#include "src/runtime/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "src/base/launch_env.h"
#include "src/collectives/reduce_kernel.h"
#include "src/engines/shm/shm_mesh.h"

namespace replicator::detail {
namespace {

using Clock = Transport::Clock;

constexpr std::string_view kMagic = "replicator calibration 4";
constexpr int kWarmup = 3;

// Timed repeats at `bytes`: more where each is short.
int repeats_at(std::size_t bytes) { return bytes <= (std::size_t{64} << 10) ? 31 : 9; }

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

double median(std::vector<double>& times) {
  const auto middle = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), middle, times.end());
  return *middle;
}

template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The median times at `bytes` of an exchange in which every process sends `bytes` to every
// other, of that exchange in the pipelined plan's steps, of the engine's own all-reduce, and
// of a reduction of two inputs: repeat by repeat
// in turn, so that a machine whose speed drifts (this one's does, by 2x within seconds)
// drifts under all four alike, after kWarmup untimed turns. Each collective starts right
// after a tiny exchange that lines the processes up, so that a peer still busy with its
// reduction is not counted as the transport's time. The four share their buffers (the
// reduction reads two of the received rows into the sent one), so that the working set is
// what an all-reduce of that size touches (its buffer and P rows), not twice as much.
void time_at(const ProcessLayout& layout, std::size_t bytes, std::chrono::milliseconds timeout,
             double* exchange_s, double* stepped_s, double* native_s, double* reduce_s) {
  Transport& t = *layout.transport;
  const int P = layout.processes;
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> out(count, 1.0f);
  std::vector<float> in(count * static_cast<std::size_t>(std::max(P, 2)), 2.0f);
  std::vector<SendOp> sends, line_up_sends;
  std::vector<RecvOp> recvs, line_up_recvs;
  std::vector<std::uint64_t> line_up(static_cast<std::size_t>(P) + 1);
  for (int q = 0; q < P; ++q) {
    if (q == layout.rank) continue;
    const auto at = static_cast<std::size_t>(q);
    sends.push_back({q, out.data(), bytes});
    recvs.push_back({q, in.data() + at * count, bytes});
    line_up_sends.push_back({q, &line_up[P], sizeof(std::uint64_t)});
    line_up_recvs.push_back({q, &line_up[at], sizeof(std::uint64_t)});
  }
  const auto line_up_processes = [&] {
    t.exchange(0, line_up_sends, line_up_recvs, Clock::now() + timeout);
  };
  // The steps the pipelined all-reduce cuts a part of `bytes` into, each an exchange of the
  // next piece of every row.
  const std::size_t step = std::max<std::size_t>(
      1, pipelined_plan({.largest_part_bytes = bytes}, layout.traits).step_bytes);
  const bool stepped = step < bytes;
  std::vector<SendOp> step_sends;
  std::vector<RecvOp> step_recvs;
  const auto exchange_in_steps = [&] {
    for (std::size_t at = 0; at < bytes; at += step) {
      const std::size_t n = std::min(step, bytes - at);
      step_sends.clear();
      step_recvs.clear();
      for (std::size_t i = 0; i < sends.size(); ++i) {
        step_sends.push_back({sends[i].peer, static_cast<const std::byte*>(sends[i].data) + at, n});
        step_recvs.push_back({recvs[i].peer, static_cast<std::byte*>(recvs[i].data) + at, n});
      }
      t.exchange(0, step_sends, step_recvs, Clock::now() + timeout);
    }
  };
  ReduceScratch scratch(2);
  const void* inputs[] = {in.data(), in.data() + count};
  void* outputs[] = {out.data()};
  std::vector<double> exchanges, steps, natives, reductions;
  const int repeats = repeats_at(bytes);
  for (int i = -kWarmup; i < repeats; ++i) {
    line_up_processes();
    const double e = seconds_of([&] { t.exchange(0, sends, recvs, Clock::now() + timeout); });
    double s = e;
    if (stepped) {
      line_up_processes();
      s = seconds_of(exchange_in_steps);
    }
    line_up_processes();
    const double n = seconds_of([&] {
      layout.native->native_all_reduce(0, out.data(), count, DType::kF32, ReduceOp::kSum,
                                       Clock::now() + timeout);
    });
    const double r = seconds_of([&] {
      tree_reduce(ReduceOp::kSum, DType::kF32, inputs, 2, outputs, 1, count, 2, scratch);
    });
    if (i < 0) continue;
    exchanges.push_back(e);
    steps.push_back(s);
    natives.push_back(n);
    reductions.push_back(r);
  }
  *exchange_s = median(exchanges);
  *stepped_s = median(steps);
  *native_s = median(natives);
  *reduce_s = median(reductions);
}

// The lines of figures in a calibration's file, in their order.
std::array<std::pair<std::string_view, TransportCosts::Times*>, 4> rows_of(TransportCosts& c) {
  return {{{"exchange_s", &c.exchange_s},
           {"stepped_s", &c.stepped_s},
           {"native_s", &c.native_s},
           {"reduce_s", &c.reduce_s}}};
}

// Process 0's flag and figures to every process (lane 0).
void share(const ProcessLayout& layout, std::uint64_t* flag, TransportCosts* costs,
           std::chrono::milliseconds timeout) {
  struct Message {
    std::uint64_t flag;
    TransportCosts costs;
  } message{*flag, *costs};
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  if (layout.rank == 0) {
    for (int q = 1; q < layout.processes; ++q) sends.push_back({q, &message, sizeof message});
  } else {
    recvs.push_back({0, &message, sizeof message});
  }
  layout.transport->exchange(0, sends, recvs, Clock::now() + timeout);
  *flag = message.flag;
  *costs = message.costs;
}

TransportCosts measure(const ProcessLayout& layout, std::chrono::milliseconds timeout,
                       std::size_t largest) {
  TransportCosts c;
  std::size_t last = 0;  // the largest size measured
  for (std::size_t i = 0; i < kCostBytes.size(); ++i) {
    if (i > 0 && kCostBytes[i] > largest) {
      // Not measured: the last measured size's times, scaled by bytes.
      const double scale =
          static_cast<double>(kCostBytes[i]) / static_cast<double>(kCostBytes[last]);
      for (const auto& [name, times] : rows_of(c)) (*times)[i] = (*times)[last] * scale;
      continue;
    }
    time_at(layout, kCostBytes[i], timeout, &c.exchange_s[i], &c.stepped_s[i], &c.native_s[i],
            &c.reduce_s[i]);
    last = i;
  }
  return c;
}

std::optional<TransportCosts> read_kept(const std::string& path, const std::string& key) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_calibration(text.str(), key, std::chrono::system_clock::now());
}

// Written whole under another name, then renamed: a reader sees the old file or the new.
void keep(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string temporary = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::remove(temporary.c_str());
      return;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) std::remove(temporary.c_str());
}

}  // namespace

std::string calibration_key(const ProcessLayout& layout) {
  const TransportTraits& t = layout.traits;
  std::string key = std::string(layout.transport ? layout.transport->name() : "none");
  key += " P=" + std::to_string(layout.processes) + " L=" + std::to_string(layout.local);
  key += " eager=" + std::to_string(t.eager_bytes);
  key += " steps=" + std::to_string(t.min_step_bytes) + "-" + std::to_string(t.max_step_bytes);
  key += " shorter=" + std::to_string(t.receives_shorter ? 1 : 0);
  key += " shared=" + std::to_string(t.shared_step_bytes);
  key += " host=" + ShmMesh::host_identity();
  return key;
}

std::string calibration_path(const std::string& folder, const std::string& key) {
  if (folder == "off") return {};
  std::string dir = folder;
  if (dir.empty()) {
    const auto set = [](const char* name) {
      const char* value = env(name);
      return value != nullptr && *value != '\0' ? value : nullptr;
    };
    if (const char* cache = set("XDG_CACHE_HOME")) {
      dir = std::string(cache) + "/replicator";
    } else if (const char* home = set("HOME")) {
      dir = std::string(home) + "/.cache/replicator";
    } else {
      return {};
    }
  }
  char name[64];
  std::snprintf(name, sizeof name, "/calibration-%016llx.txt",
                static_cast<unsigned long long>(fnv1a(key)));
  return dir + name;
}

std::string format_calibration(const std::string& key, const TransportCosts& costs,
                               std::chrono::system_clock::time_point measured) {
  std::ostringstream out;
  out.precision(17);
  out << kMagic << "\n";
  out << "key " << key << "\n";
  out << "measured "
      << std::chrono::duration_cast<std::chrono::seconds>(measured.time_since_epoch()).count()
      << "\n";
  out << "bytes";
  for (const std::size_t b : kCostBytes) out << " " << b;
  out << "\n";
  TransportCosts figures = costs;
  for (const auto& [name, times] : rows_of(figures)) {
    out << name;
    for (const double t : *times) out << " " << t;
    out << "\n";
  }
  return out.str();
}

std::optional<TransportCosts> parse_calibration(std::string_view text, const std::string& key,
                                                std::chrono::system_clock::time_point now) {
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || line != kMagic) return std::nullopt;
  if (!std::getline(in, line) || line != "key " + key) return std::nullopt;
  std::string expected_bytes = "bytes";
  for (const std::size_t b : kCostBytes) {
    expected_bytes += ' ';
    expected_bytes += std::to_string(b);
  }
  TransportCosts costs;
  std::optional<long long> measured;
  bool bytes = false;
  unsigned figures = 0;  // a bit for each line of times read
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    if (name == "bytes") {
      if (line != expected_bytes) return std::nullopt;
      bytes = true;
      continue;
    }
    if (name == "measured") {
      long long seconds = 0;
      if (!(fields >> seconds)) return std::nullopt;
      measured = seconds;
    } else {
      TransportCosts::Times* times = nullptr;
      unsigned bit = 0;
      const auto rows = rows_of(costs);
      for (std::size_t r = 0; r < rows.size(); ++r) {
        if (name == rows[r].first) {
          times = rows[r].second;
          bit = 1u << r;
        }
      }
      if (times == nullptr) return std::nullopt;
      if ((figures & bit) != 0) return std::nullopt;
      figures |= bit;
      for (double& t : *times) {
        std::string word;
        if (!(fields >> word)) return std::nullopt;
        char* end = nullptr;
        t = std::strtod(word.c_str(), &end);
        if (*end != '\0' || !std::isfinite(t) || t < 0) return std::nullopt;
      }
    }
    std::string rest;
    if (fields >> rest) return std::nullopt;
  }
  if (!measured || !bytes || figures != (1u << rows_of(costs).size()) - 1) return std::nullopt;
  const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(*measured));
  if (at > now || now - at > kCalibrationLifetime) return std::nullopt;
  return costs;
}

bool needs_calibration(const ProcessLayout& layout) {
  return layout.transport != nullptr && layout.native != nullptr && layout.processes == 2 &&
         layout.max_subtrees == 1 && !layout.oversubscribed &&
         layout.traits.native_sums(DType::kF32);
}

Calibration calibrate(const ProcessLayout& layout, const std::string& folder,
                      std::chrono::milliseconds timeout, std::size_t largest) {
  Calibration result;
  if (!needs_calibration(layout)) return result;
  const std::string key = calibration_key(layout);
  std::uint64_t measure_now = 0;
  if (layout.rank == 0) {
    if (folder != "off") result.path = calibration_path(folder, key);
    if (folder == "off") {
      measure_now = 2;  // nothing kept, nothing measured
    } else if (const auto kept = read_kept(result.path, key)) {
      result.costs = *kept;
    } else {
      measure_now = 1;
    }
  }
  share(layout, &measure_now, &result.costs, timeout);
  if (measure_now == 2) return Calibration{};
  if (measure_now == 0) return result;
  result.costs = measure(layout, timeout, largest);
  result.measured = true;
  if (layout.rank == 0) {
    keep(result.path, format_calibration(key, result.costs, std::chrono::system_clock::now()));
  }
  std::uint64_t done = 0;
  share(layout, &done, &result.costs, timeout);
  return result;
}

}  // namespace replicator::detail
