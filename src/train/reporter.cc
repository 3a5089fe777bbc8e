#include "replicator/train/reporter.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <system_error>
#include <utility>

#include "replicator/errors.h"
#include "replicator/replica_context.h"
#include "replicator/train/png.h"

namespace replicator::train {
namespace {

using Json = nlohmann::ordered_json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string count_text(double n) {
  char text[32];
  if (n >= 1e6) {
    std::snprintf(text, sizeof text, "%.2fM", n / 1e6);
  } else if (n >= 1e3) {
    std::snprintf(text, sizeof text, "%.1fk", n / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f", n);
  }
  return text;
}

std::string clock_text(double seconds) {
  // NaN compares false: !(x > 0) catches it with the negatives.
  const auto s = static_cast<long long>(!(seconds > 0) ? 0.0 : std::min(seconds, 1e12));
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double eta_seconds(double elapsed, std::int64_t done, std::int64_t total) {
  if (done <= 0 || total <= done) return 0;
  return elapsed / static_cast<double>(done) * static_cast<double>(total - done);
}

void keep_metrics_up_to(const std::filesystem::path& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<std::int64_t>() > step) {
      dropped = true;
      continue;
    }
    kept += line + '\n';
  }
  if (!dropped) return;
  in.close();
  const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out.flush()) throw DataError("cannot write " + tmp.string(), tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw DataError("cannot replace " + path.string() + ": " + ec.message(), path.string());
  }
}

JobReporter::JobReporter(JobReporterOptions options) : options_(std::move(options)) {
  if (options_.err == nullptr) options_.err = stderr;
  const bool tty = options_.terminal.value_or(::isatty(::fileno(options_.err)) == 1);
  terminal_ = options_.progress && tty;
  if (!options_.tensorboard.empty()) {
    tensorboard_.emplace(options_.tensorboard);
    if (options_.resume_step > 0) tensorboard_->restart(options_.resume_step + 1);
  }
  if (options_.out.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(options_.out, ec);
  const std::filesystem::path path = metrics_path();
  if (ec) {
    throw DataError("cannot create the folder " + options_.out.string() + ": " + ec.message(),
                    options_.out.string());
  }
  keep_metrics_up_to(path, options_.resume_step);
  metrics_.open(path, std::ios::app);
  if (!metrics_) throw DataError("cannot write " + path.string(), path.string());
}

JobReporter::~JobReporter() { finish(); }

std::filesystem::path JobReporter::metrics_path() const {
  return options_.out.empty() ? std::filesystem::path() : options_.out / "metrics.jsonl";
}

void JobReporter::progress(const std::string& line) {
  if (terminal_) {
    std::fprintf(options_.err, "\r%-90s", line.c_str());
    std::fflush(options_.err);
    line_open_ = true;
    return;
  }
  const double now = now_s();
  const bool time_passed = options_.plain_every_s && last_plain_s_ >= 0 &&
                           now - last_plain_s_ >= *options_.plain_every_s;
  if (done_ < next_plain_ && !time_passed) return;
  std::fprintf(options_.err, "%s\n", line.c_str());
  next_plain_ = done_ + std::max<std::int64_t>(1, options_.steps_to_run / 10);
  last_plain_s_ = now;
}

void JobReporter::note(const std::string& line) {
  end_progress_line();
  std::fprintf(options_.err, "%s\n", line.c_str());
}

void JobReporter::metric(const nlohmann::ordered_json& record) {
  if (metrics_.is_open()) {
    metrics_ << record.dump() << '\n' << std::flush;
    if (!metrics_)
      throw DataError("cannot write " + metrics_path().string(), metrics_path().string());
  }
  if (!tensorboard_ || !record.contains("step") || !record["step"].is_number_integer()) return;
  const auto step = record["step"].get<std::int64_t>();
  const auto type = record.find("type");
  const std::string prefix =
      type != record.end() && type->is_string() ? type->get<std::string>() + "/" : "";
  for (const auto& [key, value] : record.items()) {
    // is_number() is false for booleans.
    if (key != "step" && value.is_number()) {
      tensorboard_->scalar(prefix + key, step, value.get<double>());
    }
  }
}

void JobReporter::image(const std::string& tag, std::int64_t step, const Image& image) {
  if (!tensorboard_) return;
  const std::vector<std::uint8_t> png =
      encode_png(image.width, image.height, image.channels, image.pixels);
  tensorboard_->image(tag, step, png, image.height, image.width, image.channels);
}

void JobReporter::picture(const std::string& name, std::int64_t step, const Image& image) {
  if (!options_.out.empty()) write_png(options_.out / (name + ".png"), image);
  this->image(name, step, image);
}

void JobReporter::finish() {
  end_progress_line();
  if (metrics_.is_open()) metrics_.close();
  tensorboard_.reset();
}

void JobReporter::end_progress_line() {
  if (!line_open_) return;
  std::fprintf(options_.err, "\n");
  line_open_ = false;
}

void check_same_start_step(ReplicaContext& ctx, std::int64_t step,
                           const std::filesystem::path& out) {
  // max(step) and max(-step) = -min(step) in one all_reduce.
  std::int64_t from[2] = {step, -step};
  ctx.all_reduce(from, {.op = ReduceOp::kMax});
  if (from[0] != -from[1]) {
    throw DataError("the replicas resumed from different steps (" + std::to_string(-from[1]) +
                        " to " + std::to_string(from[0]) +
                        "): every process must see the same --out folder",
                    out.string());
  }
}

void print_json_result(const nlohmann::ordered_json& result) {
  std::printf("%s\n", result.dump().c_str());
  std::fflush(stdout);
}

}  // namespace replicator::train
