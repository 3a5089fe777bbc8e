// FlightRecorder: the latest collectives of one replica, always on (PyTorch's NCCL flight
// recorder is the model). A ring of fixed capacity, made once: the replica's own thread
// writes an entry when a collective is issued and updates its state as it runs
// (issued -> in progress -> done or failed), with no allocation and no lock; any other
// thread (the error path, the SIGUSR1 dumper) reads it at any time.
//
// Each entry is a sequence lock over atomic fields: the writer makes the version odd,
// stores the fields, and makes it even again; a reader keeps a copy only when it saw the
// same even version before and after. The later changes of the same entry (its state, and
// its end time before it) are single stores outside the lock: a reader sees the entry as
// it was or as it became. Every shared field is an atomic, so there is no data race for
// ThreadSanitizer to find, and a reader never blocks the writer.
//
// With a timeline (timeline.h) the recorder also hands every finished collective and step
// to the replica's timeline lane.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "replicator/dtype.h"
#include "src/comm/descriptor.h"

namespace replicator::detail {

class TimelineLane;

// Where a collective is. kIssued: the replica called it and waits for its local peers;
// kInProgress: every local replica arrived and it runs (across processes: the exchange);
// kDone: it returned; kFailed: it threw.
enum class CallState : std::uint8_t { kIssued, kInProgress, kDone, kFailed };
std::string_view to_string(CallState state);

// One collective as the recorder saw it; times are steady_clock nanoseconds.
struct CallRecord {
  std::uint64_t index = 0;     // position in this replica's history (0, 1, ...)
  std::uint64_t step = 0;      // the run() this was part of, counted per replica from 1
  std::uint64_t sequence = 0;  // the collective's sequence number within the step
  std::string_view op;         // "all_reduce", "barrier", "end of step", ...
  DType dtype = DType::kF32;
  std::uint64_t count = 0;  // elements (in-place ops: over all buffers; others: the input)
  std::uint64_t bytes = 0;  // bytes of those elements
  CallState state = CallState::kIssued;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;  // 0 while issued or in progress
  CallSite where;           // the caller's line (file: a static string)
};

class FlightRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  // Keeps the latest `capacity` collectives of replica `replica` (global id); 0 records
  // nothing (the timeline, if any, still gets every event). `timeline` (not owned, may be
  // null) must outlive the recorder. Allocates the ring; never blocks.
  FlightRecorder(int replica, std::size_t capacity, TimelineLane* timeline = nullptr);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  int replica() const { return replica_; }
  std::size_t capacity() const { return capacity_; }

  // ---- the replica's own thread only; none blocks, allocates (but a timeline lane's
  // chunk, once per thousands of events) or throws.
  // A step (run) begins / ends on this replica.
  void begin_step(Clock::time_point now);
  void end_step(Clock::time_point now, bool failed);
  // Collective `d` (its sequence number set) was issued at `now`.
  void issue(const Descriptor& d, Clock::time_point now);
  // The latest issued collective runs / finished (at `now`; without it, the clock is read
  // only when something records).
  void start();
  void finish(bool failed, Clock::time_point now);
  void finish(bool failed) {
    if (capacity_ > 0 || timeline_) finish(failed, Clock::now());
  }

  // ---- any thread; never blocks (a reader retries while an entry is being written).
  // The kept entries, oldest first. Allocates.
  std::vector<CallRecord> records() const;
  // The newest entry, if any.
  std::optional<CallRecord> last() const;
  // Collectives recorded since the recorder was made (entries older than the newest
  // `capacity` are gone), and the current step.
  std::uint64_t recorded() const { return written_.load(std::memory_order_acquire); }
  std::uint64_t step() const { return step_.load(std::memory_order_relaxed); }

 private:
  struct Entry;
  // Writes `pending_` into the writer's current entry (`slot_`).
  void publish();
  bool read(std::uint64_t index, CallRecord& out) const;

  const int replica_;
  const std::size_t capacity_;
  TimelineLane* const timeline_;
  std::unique_ptr<Entry[]> ring_;
  // Written by the replica's thread only: the record being written, the step's start.
  CallRecord pending_;
  std::size_t slot_ = 0;  // pending_'s entry in the ring
  Clock::time_point step_start_{};
  alignas(64) std::atomic<std::uint64_t> written_{0};
  std::atomic<std::uint64_t> step_{0};
};

// One line on the newest collective of `recorder` as of `now`, e.g.
//   "replica 3: step 2, #41 all_reduce f32 x 1048576 (4 MiB) at train.cc:120, in progress
//    for 30.0 s"
//   "replica 5: step 2, last #40 all_reduce f32 x 1048576 (4 MiB) at train.cc:120, done
//    29.9 s ago"
//   "replica 6: no collective yet"
// Never throws but std::bad_alloc.
std::string summary_line(const FlightRecorder& recorder, FlightRecorder::Clock::time_point now);

// "4 B", "1.5 KiB", "4 MiB"; "30.0 s", "12 ms", "3 us".
std::string human_bytes(std::uint64_t bytes);
std::string human_duration(std::chrono::nanoseconds d);

// The flight recorders of one process's replicas, and what they said when the first
// collective of a run failed. Thread-safe.
class FlightRecorders {
 public:
  // Recorders for replicas first .. first + num_local - 1; `lanes` (may be empty; else one
  // per local replica, not owned) are their timeline lanes.
  FlightRecorders(int first, int num_local, std::size_t capacity,
                  const std::vector<TimelineLane*>& lanes = {});
  int size() const { return static_cast<int>(recorders_.size()); }
  int first() const { return first_; }
  FlightRecorder& operator[](int local) { return *recorders_[static_cast<std::size_t>(local)]; }
  const FlightRecorder& operator[](int local) const {
    return *recorders_[static_cast<std::size_t>(local)];
  }

  // Every local replica's summary_line as of now.
  std::vector<std::string> summary_lines() const;
  // Called by a replica whose collective throws: the first call since clear() keeps
  // summary_lines() as they are at that moment (the failing replica still in its
  // collective, its peers wherever they are). Never throws but std::bad_alloc.
  void note_failure();
  // What the first note_failure() kept, if any; clear() forgets it (at each run's start).
  std::optional<std::vector<std::string>> failure_lines() const;
  void clear();

 private:
  const int first_;
  std::vector<std::unique_ptr<FlightRecorder>> recorders_;
  mutable std::mutex mu_;
  std::optional<std::vector<std::string>> failure_;
};

}  // namespace replicator::detail
