// ShardedLoader on LibTorch's data utilities: a Sampler that turns (epoch, global batch index)
// into this replica's slice of example indices, a BatchDataset that gathers, augments and
// normalises that slice, and a StatelessDataLoader with one worker thread for the prefetch.
//
// Where LibTorch's DataLoader does not fit, we bend around it rather than fight it:
// - A DataLoader cannot restart mid-epoch (begin() refuses while jobs are in flight) and
//   owns its sampler by value, so each start_epoch() builds a fresh one positioned at
//   (epoch, first_batch). That costs one thread start per epoch, nothing per batch.
// - drop_last is a property of the global batch, not of a replica's slice, so the sampler
//   applies it and the DataLoader's own drop_last stays off.
// - The DataLoader asserts that every request is non-empty, but a replica's slice of a short
//   last batch may be empty; ShardRequest::size() therefore reports the global batch's size.
// - Worker errors arrive wrapped in torch::data::WorkerException; next() unwraps them.
//
// Randomness comes from splitmix64, not torch::randperm: the order then depends only on
// (seed, epoch, N), not on the LibTorch version (randperm's algorithm has changed with
// versions and sizes), so a checkpoint resumes into the same order after an upgrade.
#include "replicator/data/sharded_loader.h"

#include <torch/data.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "replicator/errors.h"
#include "replicator/shards.h"

namespace replicator::data {
namespace {

constexpr std::int64_t kImageBytes = kImageSide * kImageSide;
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;
constexpr int kMaxShift = 2;

// Independent random streams drawn from one seed.
constexpr std::uint64_t kShuffleStream = 0x5348'5546'464c'4531;  // "SHUFFLE1"
constexpr std::uint64_t kAugmentStream = 0x4155'474d'454e'5431;  // "AUGMENT1"

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e37'79b9'7f4a'7c15;
  x = (x ^ (x >> 30)) * 0xbf58'476d'1ce4'e5b9;
  x = (x ^ (x >> 27)) * 0x94d0'49bb'1331'11eb;
  return x ^ (x >> 31);
}

// A well-mixed seed for the pair (a, b); not symmetric.
std::uint64_t seed_mix(std::uint64_t a, std::uint64_t b) { return splitmix64(a ^ splitmix64(b)); }

// Uniform in [0, n), unbiased (Lemire's multiply-and-reject), from a splitmix64 sequence.
std::uint64_t uniform_below(std::uint64_t& state, std::uint64_t n) {
  for (;;) {
    state += 0x9e37'79b9'7f4a'7c15;
    const auto product = static_cast<unsigned __int128>(splitmix64(state)) * n;
    const auto low = static_cast<std::uint64_t>(product);
    if (low >= n || low >= (0 - n) % n) return static_cast<std::uint64_t>(product >> 64);
  }
}

// The order in which epoch `epoch` visits `n` examples.
std::vector<std::int64_t> epoch_order(const LoaderOptions& options, std::int64_t epoch,
                                      std::int64_t n) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[i] = i;
  if (!options.shuffle) return order;
  std::uint64_t state =
      seed_mix(seed_mix(options.seed, kShuffleStream), static_cast<std::uint64_t>(epoch));
  for (std::int64_t i = n - 1; i > 0; --i) {  // Fisher–Yates
    std::swap(order[i], order[uniform_below(state, static_cast<std::uint64_t>(i) + 1)]);
  }
  return order;
}

std::int64_t count_batches(std::int64_t n, const LoaderOptions& options) {
  const auto b = options.global_batch;
  return options.drop_last ? n / b : (n + b - 1) / b;
}

// Positions [begin, begin + count) of a global batch of `n` examples held by `replica`.
std::pair<std::int64_t, std::int64_t> slice_of(std::int64_t n, int replica, int replicas) {
  const std::int64_t base = n / replicas;
  const std::int64_t extra = n % replicas;
  return {replica * base + std::min<std::int64_t>(replica, extra), base + (replica < extra)};
}

// Positions [begin, begin + count) of a global batch of `n` examples held by the loader's
// replica: its own slice, or with shards the slices of its shard range.
std::pair<std::int64_t, std::int64_t> replica_slice(std::int64_t n, const LoaderOptions& o) {
  if (o.shards == 0) return slice_of(n, o.replica, o.num_replicas);
  const ShardRange range = shard_range(o.shards, o.num_replicas, o.replica);
  const std::int64_t begin = slice_of(n, range.first, o.shards).first;
  const auto [last, count] = slice_of(n, range.last - 1, o.shards);
  return {begin, last + count - begin};
}

// One replica's part of one global batch.
struct ShardRequest {
  std::int64_t epoch = 0;
  std::int64_t index = 0;              // global batch index within the epoch
  std::int64_t global_size = 0;        // examples in the whole global batch, >= 1
  std::vector<std::int64_t> examples;  // indices into Examples, this replica's slice in order
  // Read by the DataLoader only to assert a non-empty request; see the file comment.
  std::size_t size() const { return static_cast<std::size_t>(global_size); }
};

// Yields the requests of one epoch from a starting batch on. Its state is the position
// (epoch, next batch); the order is recomputed from it.
class ShardSampler : public ::torch::data::samplers::Sampler<ShardRequest> {
 public:
  ShardSampler(const LoaderOptions& options, std::int64_t num_examples, std::int64_t epoch,
               std::int64_t first_batch)
      : options_(options),
        num_examples_(num_examples),
        epoch_(epoch),
        first_batch_(first_batch),
        next_batch_(first_batch),
        order_(epoch_order(options, epoch, num_examples)) {}

  // Rewinds to the starting batch; the DataLoader calls this from begin().
  void reset(::torch::optional<std::size_t> /*new_size*/ = ::torch::nullopt) override {
    next_batch_ = first_batch_;
  }

  ::torch::optional<ShardRequest> next(std::size_t /*batch_size*/) override {
    if (next_batch_ >= count_batches(num_examples_, options_)) return ::torch::nullopt;
    ShardRequest request{.epoch = epoch_, .index = next_batch_};
    const std::int64_t begin = next_batch_ * options_.global_batch;
    request.global_size = std::min(options_.global_batch, num_examples_ - begin);
    const auto [offset, count] = replica_slice(request.global_size, options_);
    const auto first = order_.begin() + begin + offset;
    request.examples.assign(first, first + count);
    ++next_batch_;
    return request;
  }

  void save(::torch::serialize::OutputArchive& archive) const override {
    archive.write("epoch", ::torch::tensor(epoch_));
    archive.write("next_batch", ::torch::tensor(next_batch_));
  }

  void load(::torch::serialize::InputArchive& archive) override {
    ::torch::Tensor epoch;
    ::torch::Tensor next_batch;
    archive.read("epoch", epoch);
    archive.read("next_batch", next_batch);
    epoch_ = epoch.item<std::int64_t>();
    first_batch_ = next_batch_ = next_batch.item<std::int64_t>();
    order_ = epoch_order(options_, epoch_, num_examples_);
  }

 private:
  LoaderOptions options_;
  std::int64_t num_examples_;
  std::int64_t epoch_;
  std::int64_t first_batch_;
  std::int64_t next_batch_;
  std::vector<std::int64_t> order_;
};

// pixel -> (pixel/255 − mean)/std, in the same float operations as the tensor expression.
constexpr std::array<float, 256> kNormalised = [] {
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) table[v] = (static_cast<float>(v) / 255.0f - kMean) / kStd;
  return table;
}();

struct Augmentation {
  bool flip;
  int dx;  // output column x shows input column x - dx
  int dy;  // output row y shows input row y - dy
};

Augmentation draw_augmentation(std::uint64_t seed, std::int64_t epoch, std::int64_t example) {
  const std::uint64_t bits = seed_mix(seed_mix(seed_mix(seed, kAugmentStream), epoch), example);
  // 28 bits per shift: the modulo bias, (2^28 mod 5)/2^28, is below 1e-8.
  constexpr std::uint64_t kShifts = 2 * kMaxShift + 1;
  constexpr std::uint64_t kMask = (std::uint64_t{1} << 28) - 1;
  return {.flip = (bits & 1) != 0,
          .dx = static_cast<int>(((bits >> 8) & kMask) % kShifts) - kMaxShift,
          .dy = static_cast<int>(((bits >> 36) & kMask) % kShifts) - kMaxShift};
}

// Writes the flipped-then-shifted `in` to `out`, both 28×28, with 0 where nothing lands.
void augment_image(const std::uint8_t* in, const Augmentation& a, std::uint8_t* out) {
  constexpr std::ptrdiff_t kSide = kImageSide;
  std::memset(out, 0, kImageBytes);
  const std::ptrdiff_t x_begin = std::max<std::ptrdiff_t>(0, a.dx);
  const std::ptrdiff_t x_end = std::min<std::ptrdiff_t>(kSide, kSide + a.dx);
  const std::ptrdiff_t y_end = std::min<std::ptrdiff_t>(kSide, kSide + a.dy);
  for (std::ptrdiff_t y = std::max<std::ptrdiff_t>(0, a.dy); y < y_end; ++y) {
    const std::uint8_t* row = in + (y - a.dy) * kSide;
    std::uint8_t* dst = out + y * kSide + x_begin;
    if (!a.flip) {
      std::memcpy(dst, row + x_begin - a.dx, x_end - x_begin);
    } else {  // flipped input column c is input column 27 - c
      const std::uint8_t* src_end = row + kSide - (x_begin - a.dx);
      std::reverse_copy(src_end - (x_end - x_begin), src_end, dst);
    }
  }
}

// Turns a request into a Batch; copied into the worker thread, shares Examples read-only.
class ShardDataset
    : public ::torch::data::datasets::BatchDataset<ShardDataset, Batch, ShardRequest> {
 public:
  ShardDataset(std::shared_ptr<const Examples> examples, const LoaderOptions& options)
      : examples_(std::move(examples)), seed_(options.seed), augment_(options.augment) {}

  Batch get_batch(ShardRequest request) override {
    const auto n = static_cast<std::int64_t>(request.examples.size());
    Batch batch{.images = ::torch::empty({n, 1, kImageSide, kImageSide}, ::torch::kFloat32),
                .labels = ::torch::empty({n}, ::torch::kInt64),
                .epoch = request.epoch,
                .index = request.index};
    const auto* images = examples_->images.data_ptr<std::uint8_t>();
    const auto* labels = examples_->labels.data_ptr<std::int64_t>();
    auto* out_images = batch.images.data_ptr<float>();
    auto* out_labels = batch.labels.data_ptr<std::int64_t>();
    std::array<std::uint8_t, kImageBytes> augmented{};
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t example = request.examples[i];
      const std::uint8_t* pixels = images + example * kImageBytes;
      if (augment_) {
        augment_image(pixels, draw_augmentation(seed_, request.epoch, example), augmented.data());
        pixels = augmented.data();
      }
      float* out = out_images + i * kImageBytes;
      for (std::int64_t p = 0; p < kImageBytes; ++p) out[p] = kNormalised[pixels[p]];
      out_labels[i] = labels[example];
    }
    return batch;
  }

  ::torch::optional<std::size_t> size() const override {
    return static_cast<std::size_t>(examples_->size());
  }

 private:
  std::shared_ptr<const Examples> examples_;
  std::uint64_t seed_;
  bool augment_;
};

using Loader = ::torch::data::StatelessDataLoader<ShardDataset, ShardSampler>;

void check_examples(const Examples* examples) {
  if (examples == nullptr) throw InvalidArgument("ShardedLoader got no examples (a null pointer)");
  const auto& images = examples->images;
  const auto& labels = examples->labels;
  if (!images.defined() || !labels.defined()) {
    throw InvalidArgument("ShardedLoader got Examples whose images or labels are undefined");
  }
  if (images.scalar_type() != ::torch::kUInt8 || images.dim() != 3 ||
      images.size(1) != kImageSide || images.size(2) != kImageSide || !images.is_contiguous() ||
      !images.device().is_cpu()) {
    throw InvalidArgument("ShardedLoader needs images of uint8 [N, 28, 28], contiguous on the CPU");
  }
  if (labels.scalar_type() != ::torch::kInt64 || labels.dim() != 1 || !labels.is_contiguous() ||
      !labels.device().is_cpu() || labels.size(0) != images.size(0)) {
    throw InvalidArgument("ShardedLoader needs labels of int64 [N] on the CPU, N = " +
                          std::to_string(images.size(0)) + " as for the images");
  }
}

void check_options(const LoaderOptions& o) {
  if (o.num_replicas < 1 || o.replica < 0 || o.replica >= o.num_replicas) {
    throw InvalidArgument("ShardedLoader got replica " + std::to_string(o.replica) + " of " +
                          std::to_string(o.num_replicas) +
                          "; expected 0 <= replica < num_replicas");
  }
  if (o.shards != 0) {
    if (o.shards < o.num_replicas || o.global_batch < 1 || o.global_batch % o.shards != 0) {
      throw InvalidArgument("ShardedLoader got global_batch " + std::to_string(o.global_batch) +
                            ", " + std::to_string(o.shards) + " shards and " +
                            std::to_string(o.num_replicas) +
                            " replicas; the batch must be a positive multiple of the shards, "
                            "and the replicas at most as many as the shards");
    }
  } else if (o.global_batch < 1 || o.global_batch % o.num_replicas != 0) {
    throw InvalidArgument("ShardedLoader got global_batch " + std::to_string(o.global_batch) +
                          "; it must be a positive multiple of num_replicas " +
                          std::to_string(o.num_replicas));
  }
  if (o.prefetch < 1) {
    throw InvalidArgument("ShardedLoader got prefetch " + std::to_string(o.prefetch) +
                          "; at least one batch must be prepared ahead");
  }
}

}  // namespace

// One started epoch: its DataLoader (and worker thread) and where next() stands in it.
struct ShardedLoader::Epoch {
  std::unique_ptr<Loader> loader;  // destroyed last: joins the worker
  ::torch::optional<::torch::data::Iterator<Batch>> at;
  bool handed_out = false;  // *at was returned; step before reading again
  std::exception_ptr error;
};

ShardedLoader::ShardedLoader(std::shared_ptr<const Examples> examples, LoaderOptions options)
    : examples_(std::move(examples)), options_(options) {
  check_examples(examples_.get());
  check_options(options_);
}

ShardedLoader::~ShardedLoader() = default;
ShardedLoader::ShardedLoader(ShardedLoader&&) noexcept = default;
ShardedLoader& ShardedLoader::operator=(ShardedLoader&&) noexcept = default;

std::int64_t ShardedLoader::batches_per_epoch() const {
  return count_batches(examples_->size(), options_);
}

void ShardedLoader::start_epoch(std::int64_t epoch, std::int64_t first_batch) {
  if (epoch < 0 || first_batch < 0 || first_batch > batches_per_epoch()) {
    throw InvalidArgument("ShardedLoader::start_epoch got epoch " + std::to_string(epoch) +
                          ", batch " + std::to_string(first_batch) +
                          "; expected epoch >= 0 and a batch in 0.." +
                          std::to_string(batches_per_epoch()));
  }
  epoch_.reset();  // join the previous epoch's worker before starting another
  auto next = std::make_unique<Epoch>();
  next->loader = ::torch::data::make_data_loader(
      ShardDataset(examples_, options_),
      ShardSampler(options_, examples_->size(), epoch, first_batch),
      ::torch::data::DataLoaderOptions()
          // (the sampler sizes each request; a DataLoader wants a positive batch_size)
          .batch_size(static_cast<std::size_t>(options_.global_batch))
          .workers(1)  // a batch takes well under a millisecond; one thread keeps ahead
          .max_jobs(static_cast<std::size_t>(options_.prefetch))
          .drop_last(false));
  next->at.emplace(next->loader->begin());  // queues the first `prefetch` batches
  epoch_ = std::move(next);
}

std::optional<Batch> ShardedLoader::next() {
  if (!epoch_) throw InvalidArgument("ShardedLoader::next() was called before start_epoch()");
  Epoch& e = *epoch_;
  if (e.error) std::rethrow_exception(e.error);
  try {
    if (e.handed_out) {
      ++*e.at;
      e.handed_out = false;
    }
    if (*e.at == e.loader->end()) return std::nullopt;
    e.handed_out = true;
    return std::move(**e.at);
  } catch (const ::torch::data::WorkerException& failure) {
    e.error = failure.original_exception;
    std::rethrow_exception(e.error);
  }
}

::torch::Tensor normalised_images(const ::torch::Tensor& images) {
  if (!images.defined() || images.scalar_type() != ::torch::kUInt8 || images.dim() != 3 ||
      images.size(1) != kImageSide || images.size(2) != kImageSide || !images.device().is_cpu()) {
    throw InvalidArgument("normalised_images needs uint8 [n, 28, 28] images on the CPU, got " +
                          (images.defined() ? c10::str(images.scalar_type(), " ", images.sizes(),
                                                       " on ", images.device())
                                            : std::string("undefined")));
  }
  const ::torch::Tensor in = images.contiguous();
  ::torch::Tensor out = ::torch::empty({in.size(0), 1, kImageSide, kImageSide}, ::torch::kFloat);
  const std::uint8_t* pixels = in.data_ptr<std::uint8_t>();
  float* values = out.data_ptr<float>();
  for (std::int64_t p = 0; p < in.numel(); ++p) values[p] = kNormalised[pixels[p]];
  return out;
}

}  // namespace replicator::data
