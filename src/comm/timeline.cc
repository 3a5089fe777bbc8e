#include "src/comm/timeline.h"

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <system_error>
#include <utility>

#include "replicator/errors.h"

namespace replicator::detail {
namespace {

std::int64_t unix_minus_steady_ns() {
  using namespace std::chrono;
  const auto unix_now = duration_cast<nanoseconds>(system_clock::now().time_since_epoch());
  const auto steady_now = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch());
  return (unix_now - steady_now).count();
}

}  // namespace

std::string json_micros(std::int64_t ns) {
  char text[40];
  const char* sign = ns < 0 ? "-" : "";
  const std::uint64_t abs =
      ns < 0 ? static_cast<std::uint64_t>(-ns) : static_cast<std::uint64_t>(ns);
  std::snprintf(text, sizeof text, "%s%" PRIu64 ".%03" PRIu64, sign, abs / 1000, abs % 1000);
  return text;
}

TimelineLane::TimelineLane(Timeline& owner, int replica)
    : owner_(owner), replica_(replica), chunk_(std::make_unique<Chunk>()) {
  chunk_->replica = replica;
}

void TimelineLane::add(const TimelineEvent& event) {
  chunk_->events[chunk_->size++] = event;
  if (chunk_->size == chunk_->events.size()) {
    chunk_ = owner_.exchange(std::move(chunk_));
    chunk_->replica = replica_;
    chunk_->size = 0;
  }
}

std::string Timeline::path_for(const std::string& path, int rank, int processes) {
  if (processes <= 1) return path;
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const std::string tag = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1)) {
    return path + tag;
  }
  return path.substr(0, dot) + tag + path.substr(dot);
}

Timeline::Timeline(const std::string& path, int rank, int first, int num_local)
    : path_(path), rank_(rank), unix_offset_ns_(unix_minus_steady_ns()) {
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) {
    throw ConfigError("timeline: cannot create '" + path +
                      "': " + std::error_code(errno, std::generic_category()).message() +
                      " (REPLICATOR_TIMELINE names the file; its folder must exist)");
  }
  for (int l = 0; l < num_local; ++l) {
    lanes_.push_back(std::unique_ptr<TimelineLane>(new TimelineLane(*this, first + l)));
  }
  if (std::fputs("[", file_) < 0) write_failed_ = true;
  write_line(R"({"name":"process_name","ph":"M","pid":)" + std::to_string(rank) +
             R"(,"args":{"name":"process )" + std::to_string(rank) + R"("}})");
  write_line(R"({"name":"process_sort_index","ph":"M","pid":)" + std::to_string(rank) +
             R"(,"args":{"sort_index":)" + std::to_string(rank) + "}}");
  for (int l = 0; l < num_local; ++l) {
    const std::string ids =
        R"(,"pid":)" + std::to_string(rank) + R"(,"tid":)" + std::to_string(first + l);
    std::string name = R"({"name":"thread_name","ph":"M")";
    name += ids;
    name += R"(,"args":{"name":"replica )";
    name += std::to_string(first + l);
    name += R"("}})";
    write_line(name);
    std::string order = R"({"name":"thread_sort_index","ph":"M")";
    order += ids;
    order += R"(,"args":{"sort_index":)";
    order += std::to_string(first + l);
    order += "}}";
    write_line(order);
  }
  writer_ = std::thread([this] { writer_loop(); });
}

Timeline::~Timeline() {
  {
    std::lock_guard lock(mu_);
    for (auto& lane : lanes_) {
      if (lane->chunk_->size > 0) full_.push_back(std::move(lane->chunk_));
    }
    stop_ = true;
  }
  cv_.notify_one();
  writer_.join();
  if (std::fputs("\n]\n", file_) < 0) write_failed_ = true;
  if (std::fclose(file_) != 0) write_failed_ = true;
  if (write_failed_) {
    std::fprintf(stderr, "replicator: warning: the timeline '%s' could not be written in full\n",
                 path_.c_str());
  }
}

std::unique_ptr<TimelineLane::Chunk> Timeline::exchange(std::unique_ptr<TimelineLane::Chunk> full) {
  std::unique_ptr<TimelineLane::Chunk> fresh;
  {
    std::lock_guard lock(mu_);
    full_.push_back(std::move(full));
    if (!free_.empty()) {
      fresh = std::move(free_.back());
      free_.pop_back();
    }
  }
  cv_.notify_one();
  return fresh ? std::move(fresh) : std::make_unique<TimelineLane::Chunk>();
}

void Timeline::mark(int replica, std::string_view name, std::string_view category,
                    std::int64_t at_ns, std::string_view args_json) {
  std::string line = R"({"name":)" + json_string(name) + R"(,"cat":)" + json_string(category) +
                     R"(,"ph":"i","s":"t","pid":)" + std::to_string(rank_) + R"(,"tid":)" +
                     std::to_string(replica) + R"(,"ts":)" + json_micros(at_ns + unix_offset_ns_) +
                     R"(,"args":)";
  line += args_json;
  line += "}";
  {
    std::lock_guard lock(mu_);
    marks_.push_back(std::move(line));
  }
  cv_.notify_one();
}

void Timeline::writer_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !full_.empty() || !marks_.empty(); });
    if (!marks_.empty()) {
      const std::vector<std::string> marks = std::exchange(marks_, {});
      lock.unlock();
      write_marks(marks);
      lock.lock();
    }
    while (!full_.empty()) {
      std::unique_ptr<TimelineLane::Chunk> chunk = std::move(full_.front());
      full_.pop_front();
      lock.unlock();
      write_chunk(*chunk);
      chunk->size = 0;
      lock.lock();
      free_.push_back(std::move(chunk));
    }
    if (stop_ && marks_.empty()) return;
  }
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void Timeline::write_chunk(const TimelineLane::Chunk& chunk) {
  const std::string ids =
      R"(,"pid":)" + std::to_string(rank_) + R"(,"tid":)" + std::to_string(chunk.replica);
  std::string text;
  for (std::size_t i = 0; i < chunk.size; ++i) {
    const TimelineEvent& e = chunk.events[i];
    std::string line;
    if (e.is_step) {
      line = R"({"name":"step )" + std::to_string(e.step) + R"(","cat":"step","ph":"X")";
    } else {
      line = R"({"name":")" + std::string(e.op) + R"(","cat":"collective","ph":"X")";
    }
    line += ids + R"(,"ts":)" + json_micros(e.start_ns + unix_offset_ns_) + R"(,"dur":)" +
            json_micros(e.end_ns - e.start_ns) + R"(,"args":{"step":)" + std::to_string(e.step);
    if (!e.is_step) {
      line += R"(,"seq":)" + std::to_string(e.sequence) + R"(,"dtype":")" +
              std::string(to_string(e.dtype)) + R"(","count":)" + std::to_string(e.count) +
              R"(,"bytes":)" + std::to_string(e.bytes);
      if (e.where.known()) line += R"(,"at":)" + json_string(to_string(e.where));
    }
    if (e.state == CallState::kFailed) line += R"(,"state":"failed")";
    line += "}}";
    text += (first_line_ ? "\n" : ",\n") + line;
    first_line_ = false;
  }
  if (!text.empty() && std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    write_failed_ = true;
  }
  if (std::fflush(file_) != 0) write_failed_ = true;
}

void Timeline::write_marks(const std::vector<std::string>& marks) {
  for (const std::string& line : marks) write_line(line);
  if (std::fflush(file_) != 0) write_failed_ = true;
}

void Timeline::write_line(const std::string& line) {
  const std::string text = (first_line_ ? "\n" : ",\n") + line;
  first_line_ = false;
  if (std::fputs(text.c_str(), file_) < 0) write_failed_ = true;
}

}  // namespace replicator::detail
