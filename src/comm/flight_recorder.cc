#include "src/comm/flight_recorder.h"

#include <cstdio>

#include "src/comm/futex.h"
#include "src/comm/timeline.h"

namespace replicator::detail {

// Every field a reader copies is an atomic; `version` is odd while the writer rewrites.
// The writer stores the fields with release after making the version odd, and a reader
// loads them with acquire before reading the version again: a field from a newer write
// then makes that second read see the odd (or a later) version, and the copy is dropped.
// No standalone fence (ThreadSanitizer does not model them); on x86 both orders are plain
// moves.
struct FlightRecorder::Entry {
  std::atomic<std::uint64_t> version{0};
  std::atomic<std::uint64_t> index{0};
  std::atomic<std::uint64_t> step{0};
  std::atomic<std::uint64_t> sequence{0};
  std::atomic<const char*> op{nullptr};
  std::atomic<std::uint32_t> op_size{0};
  std::atomic<std::uint8_t> dtype{0};
  std::atomic<std::uint8_t> state{0};
  std::atomic<std::uint64_t> count{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::int64_t> start_ns{0};
  std::atomic<std::int64_t> end_ns{0};
  std::atomic<const char*> file{nullptr};
  std::atomic<std::uint32_t> line{0};
};

namespace {

std::int64_t ns_of(FlightRecorder::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::uint64_t bytes_of(const Call& call) {
  if (call.buffers.empty()) return call.input.bytes();
  std::uint64_t bytes = 0;
  for (const Buffer& b : call.buffers) bytes += b.bytes();
  return bytes;
}

}  // namespace

std::string_view to_string(CallState state) {
  switch (state) {
    case CallState::kIssued:
      return "issued";
    case CallState::kInProgress:
      return "in_progress";
    case CallState::kDone:
      return "done";
    case CallState::kFailed:
      return "failed";
  }
  return "?";
}

FlightRecorder::FlightRecorder(int replica, std::size_t capacity, TimelineLane* timeline)
    : replica_(replica),
      capacity_(capacity),
      timeline_(timeline),
      ring_(capacity > 0 ? std::make_unique<Entry[]>(capacity) : nullptr) {}

FlightRecorder::~FlightRecorder() = default;

void FlightRecorder::begin_step(Clock::time_point now) {
  step_start_ = now;
  step_.fetch_add(1, std::memory_order_relaxed);
}

void FlightRecorder::end_step(Clock::time_point now, bool failed) {
  if (!timeline_) return;
  timeline_->add(TimelineEvent{.is_step = true,
                               .state = failed ? CallState::kFailed : CallState::kDone,
                               .step = step_.load(std::memory_order_relaxed),
                               .start_ns = ns_of(step_start_),
                               .end_ns = ns_of(now)});
}

void FlightRecorder::issue(const Descriptor& d, Clock::time_point now) {
  if (capacity_ == 0 && !timeline_) return;
  const std::uint64_t index = written_.load(std::memory_order_relaxed);
  pending_ = CallRecord{.index = index,
                        .step = step_.load(std::memory_order_relaxed),
                        .sequence = d.sequence,
                        .op = d.name(),
                        .dtype = d.dtype,
                        .count = d.count,
                        .bytes = bytes_of(d.call),
                        .state = CallState::kIssued,
                        .start_ns = ns_of(now),
                        .where = d.call.where};
  if (capacity_ == 0) return;
  // The next entry of the ring, without a division on this path.
  slot_ = index == 0 || slot_ + 1 == capacity_ ? 0 : slot_ + 1;
  publish();
  // The entry is complete before readers may look for it.
  written_.store(index + 1, std::memory_order_release);
}

void FlightRecorder::start() {
  if (capacity_ == 0) return;
  pending_.state = CallState::kInProgress;
  ring_[slot_].state.store(static_cast<std::uint8_t>(pending_.state), std::memory_order_release);
}

void FlightRecorder::finish(bool failed, Clock::time_point now) {
  if (capacity_ == 0 && !timeline_) return;
  pending_.state = failed ? CallState::kFailed : CallState::kDone;
  pending_.end_ns = ns_of(now);
  if (capacity_ > 0) {
    // The end time first: a reader that sees the final state sees it too.
    Entry& e = ring_[slot_];
    e.end_ns.store(pending_.end_ns, std::memory_order_release);
    e.state.store(static_cast<std::uint8_t>(pending_.state), std::memory_order_release);
  }
  if (timeline_) {
    timeline_->add(TimelineEvent{.state = pending_.state,
                                 .dtype = pending_.dtype,
                                 .op = pending_.op,
                                 .step = pending_.step,
                                 .sequence = pending_.sequence,
                                 .count = pending_.count,
                                 .bytes = pending_.bytes,
                                 .start_ns = pending_.start_ns,
                                 .end_ns = pending_.end_ns,
                                 .where = pending_.where});
  }
}

void FlightRecorder::publish() {
  Entry& e = ring_[slot_];
  const std::uint64_t v = e.version.load(std::memory_order_relaxed);
  e.version.store(v + 1, std::memory_order_relaxed);
  e.index.store(pending_.index, std::memory_order_release);
  e.step.store(pending_.step, std::memory_order_release);
  e.sequence.store(pending_.sequence, std::memory_order_release);
  e.op.store(pending_.op.data(), std::memory_order_release);
  e.op_size.store(static_cast<std::uint32_t>(pending_.op.size()), std::memory_order_release);
  e.dtype.store(static_cast<std::uint8_t>(pending_.dtype), std::memory_order_release);
  e.state.store(static_cast<std::uint8_t>(pending_.state), std::memory_order_release);
  e.count.store(pending_.count, std::memory_order_release);
  e.bytes.store(pending_.bytes, std::memory_order_release);
  e.start_ns.store(pending_.start_ns, std::memory_order_release);
  e.end_ns.store(pending_.end_ns, std::memory_order_release);
  e.file.store(pending_.where.file, std::memory_order_release);
  e.line.store(pending_.where.line, std::memory_order_release);
  e.version.store(v + 2, std::memory_order_release);
}

bool FlightRecorder::read(std::uint64_t index, CallRecord& out) const {
  const Entry& e = ring_[index % capacity_];
  for (;;) {
    const std::uint64_t v1 = e.version.load(std::memory_order_acquire);
    if (v1 & 1) {
      cpu_relax();
      continue;
    }
    out.index = e.index.load(std::memory_order_acquire);
    out.step = e.step.load(std::memory_order_acquire);
    out.sequence = e.sequence.load(std::memory_order_acquire);
    const char* op = e.op.load(std::memory_order_acquire);
    const std::uint32_t op_size = e.op_size.load(std::memory_order_acquire);
    out.dtype = static_cast<DType>(e.dtype.load(std::memory_order_acquire));
    out.state = static_cast<CallState>(e.state.load(std::memory_order_acquire));
    out.count = e.count.load(std::memory_order_acquire);
    out.bytes = e.bytes.load(std::memory_order_acquire);
    out.start_ns = e.start_ns.load(std::memory_order_acquire);
    out.end_ns = e.end_ns.load(std::memory_order_acquire);
    out.where.file = e.file.load(std::memory_order_acquire);
    out.where.line = e.line.load(std::memory_order_acquire);
    if (e.version.load(std::memory_order_relaxed) != v1) continue;
    out.op = op ? std::string_view(op, op_size) : std::string_view("?");
    // The writer may have moved past this entry to a later one in the same slot.
    return out.index == index;
  }
}

std::vector<CallRecord> FlightRecorder::records() const {
  std::vector<CallRecord> out;
  if (capacity_ == 0) return out;
  const std::uint64_t end = written_.load(std::memory_order_acquire);
  const std::uint64_t begin = end > capacity_ ? end - capacity_ : 0;
  out.reserve(static_cast<std::size_t>(end - begin));
  for (std::uint64_t i = begin; i < end; ++i) {
    CallRecord r;
    if (read(i, r)) out.push_back(r);
  }
  return out;
}

std::optional<CallRecord> FlightRecorder::last() const {
  if (capacity_ == 0) return std::nullopt;
  for (;;) {
    const std::uint64_t end = written_.load(std::memory_order_acquire);
    if (end == 0) return std::nullopt;
    CallRecord r;
    if (read(end - 1, r)) return r;
  }
}

std::string human_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0 || value == static_cast<double>(static_cast<std::uint64_t>(value))) {
    std::snprintf(text, sizeof text, "%.0f %s", value, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

std::string human_duration(std::chrono::nanoseconds d) {
  const double ns = static_cast<double>(d.count());
  char text[32];
  if (ns >= 1e9) {
    std::snprintf(text, sizeof text, "%.1f s", ns / 1e9);
  } else if (ns >= 1e6) {
    std::snprintf(text, sizeof text, "%.0f ms", ns / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.0f us", ns / 1e3);
  }
  return text;
}

std::string summary_line(const FlightRecorder& recorder, FlightRecorder::Clock::time_point now) {
  std::string line = "replica " + std::to_string(recorder.replica()) + ": ";
  if (recorder.capacity() == 0) return line + "not recorded (the flight recorder is off)";
  const std::optional<CallRecord> r = recorder.last();
  if (!r) return line + "no collective yet";
  const std::int64_t now_ns = ns_of(now);
  const bool running = r->state == CallState::kIssued || r->state == CallState::kInProgress;
  line += "step ";
  line += std::to_string(r->step);
  line += running ? ", #" : ", last #";
  line += std::to_string(r->sequence);
  line += ' ';
  line += r->op;
  if (r->op != "barrier" && r->op != "end of step") {
    line += ' ';
    line += to_string(r->dtype);
    line += " x ";
    line += std::to_string(r->count);
    line += " (";
    line += human_bytes(r->bytes);
    line += ')';
  }
  if (r->where.known()) {
    line += " at ";
    line += to_string(r->where);
  }
  const auto since = [](std::int64_t from, std::int64_t to) {
    return human_duration(std::chrono::nanoseconds(std::max<std::int64_t>(to - from, 0)));
  };
  switch (r->state) {
    case CallState::kIssued:
      return line + ", issued " + since(r->start_ns, now_ns) +
             " ago, waiting for this process's other replicas";
    case CallState::kInProgress:
      return line + ", in progress for " + since(r->start_ns, now_ns);
    case CallState::kDone:
      return line + ", done " + since(r->end_ns, now_ns) + " ago";
    case CallState::kFailed:
      return line + ", failed after " + since(r->start_ns, r->end_ns);
  }
  return line;
}

FlightRecorders::FlightRecorders(int first, int num_local, std::size_t capacity,
                                 const std::vector<TimelineLane*>& lanes)
    : first_(first) {
  for (int l = 0; l < num_local; ++l) {
    recorders_.push_back(std::make_unique<FlightRecorder>(
        first + l, capacity, lanes.empty() ? nullptr : lanes[static_cast<std::size_t>(l)]));
  }
}

std::vector<std::string> FlightRecorders::summary_lines() const {
  const auto now = FlightRecorder::Clock::now();
  std::vector<std::string> lines;
  for (const auto& r : recorders_) lines.push_back(summary_line(*r, now));
  return lines;
}

void FlightRecorders::note_failure() {
  {
    std::lock_guard lock(mu_);
    if (failure_) return;
  }
  std::vector<std::string> lines = summary_lines();
  std::lock_guard lock(mu_);
  if (!failure_) failure_ = std::move(lines);
}

std::optional<std::vector<std::string>> FlightRecorders::failure_lines() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void FlightRecorders::clear() {
  std::lock_guard lock(mu_);
  failure_.reset();
}

}  // namespace replicator::detail
