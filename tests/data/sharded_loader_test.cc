// ShardedLoader's contract on synthetic examples whose label is their index, so every test
// can tell which example landed where.
#include "replicator/data/sharded_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "replicator/errors.h"
#include "replicator/shards.h"

namespace replicator::data {
namespace {

constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

// n examples; pixel p of example i is (37 i + 11 p) mod 256, its label is i.
std::shared_ptr<const Examples> synthetic(std::int64_t n) {
  const auto i = ::torch::arange(n, ::torch::kInt64).view({n, 1});
  const auto p = ::torch::arange(28 * 28, ::torch::kInt64).view({1, 28 * 28});
  auto examples = std::make_shared<Examples>();
  examples->images = ((i * 37 + p * 11) % 256).to(::torch::kUInt8).view({n, 28, 28}).contiguous();
  examples->labels = ::torch::arange(n, ::torch::kInt64);
  return examples;
}

::torch::Tensor normalised(const ::torch::Tensor& pixels) {
  return (pixels.to(::torch::kFloat32) / 255 - kMean) / kStd;
}

std::vector<Batch> whole_epoch(ShardedLoader& loader, std::int64_t epoch,
                               std::int64_t first_batch = 0) {
  std::vector<Batch> batches;
  loader.start_epoch(epoch, first_batch);
  while (auto batch = loader.next()) batches.push_back(std::move(*batch));
  return batches;
}

std::vector<std::int64_t> labels_of(const std::vector<Batch>& batches) {
  std::vector<std::int64_t> labels;
  for (const auto& batch : batches) {
    const auto* data = batch.labels.data_ptr<std::int64_t>();
    labels.insert(labels.end(), data, data + batch.labels.size(0));
  }
  return labels;
}

Batch batch_at(const std::shared_ptr<const Examples>& examples, const LoaderOptions& options,
               std::int64_t epoch, std::int64_t index) {
  ShardedLoader loader(examples, options);
  loader.start_epoch(epoch, index);
  auto batch = loader.next();
  EXPECT_TRUE(batch.has_value());
  return batch ? std::move(*batch) : Batch{};
}

template <typename Call>
void expect_invalid_argument(Call&& call) {
  EXPECT_THROW(call(), InvalidArgument);
}

// ---- sharding over replica counts -------------------------------------------------------

// The R slices of every global batch, in replica order, are the batch R = 1 gets; with and
// without augmentation, including the short last batch (1000 = 20·48 + 40). With `shards`,
// replica r's slice holds the shards of shard_range(shards, R, r), 48 / shards rows each.
void expect_slices_make_the_batch(int replicas, int shards) {
  const auto examples = synthetic(1000);
  for (const bool augment : {false, true}) {
    const LoaderOptions single{
        .global_batch = 48, .seed = 11, .drop_last = false, .augment = augment};
    ShardedLoader reference(examples, single);
    const auto expected = whole_epoch(reference, 3);
    ASSERT_EQ(expected.size(), 21u);
    std::vector<std::vector<Batch>> slices;
    for (int r = 0; r < replicas; ++r) {
      auto options = single;
      options.replica = r;
      options.num_replicas = replicas;
      options.shards = shards;
      ShardedLoader loader(examples, options);
      EXPECT_EQ(loader.batches_per_epoch(), 21);
      slices.push_back(whole_epoch(loader, 3));
      ASSERT_EQ(slices.back().size(), expected.size());
    }
    for (std::size_t b = 0; b < expected.size(); ++b) {
      std::vector<::torch::Tensor> images;
      std::vector<::torch::Tensor> labels;
      for (int r = 0; r < replicas; ++r) {
        const auto& slice = slices[r][b];
        EXPECT_EQ(slice.epoch, 3);
        EXPECT_EQ(slice.index, static_cast<std::int64_t>(b));
        if (b + 1 < expected.size()) {
          const std::int64_t rows =
              shards == 0 ? 48 / replicas : shard_range(shards, replicas, r).size() * 48 / shards;
          EXPECT_EQ(slice.labels.size(0), rows) << "replica " << r;
        }
        images.push_back(slice.images);
        labels.push_back(slice.labels);
      }
      EXPECT_TRUE(::torch::equal(::torch::cat(labels), expected[b].labels)) << "batch " << b;
      EXPECT_TRUE(::torch::equal(::torch::cat(images), expected[b].images)) << "batch " << b;
    }
  }
}

class ShardingSweep : public ::testing::TestWithParam<int> {};

TEST_P(ShardingSweep, ReplicaSlicesConcatenateToTheSingleReplicaBatch) {
  expect_slices_make_the_batch(GetParam(), 0);
}

INSTANTIATE_TEST_SUITE_P(Replicas, ShardingSweep, ::testing::Values(1, 2, 3, 4, 8, 16));

// With 8 logical shards the replicas need not divide the batch's 48 examples or the shards.
class LogicalShardSweep : public ::testing::TestWithParam<int> {};

TEST_P(LogicalShardSweep, ReplicaShardRangesConcatenateToTheSingleReplicaBatch) {
  expect_slices_make_the_batch(GetParam(), 8);
}

INSTANTIATE_TEST_SUITE_P(Replicas, LogicalShardSweep, ::testing::Values(1, 2, 3, 5, 7, 8));

TEST(ShardedLoader, TheShortLastBatchIsSplitOverTheShards) {
  // 40 examples over 8 shards: 5 each, so replica 0 of 3 (shards 0-1) gets 10 and replica 2
  // (shards 5-7) 15.
  const auto examples = synthetic(1000);
  const LoaderOptions o{
      .global_batch = 48, .replica = 2, .num_replicas = 3, .shards = 8, .drop_last = false};
  EXPECT_EQ(batch_at(examples, o, 0, 20).labels.size(0), 15);
  EXPECT_EQ(
      batch_at(examples, {.global_batch = 48, .num_replicas = 3, .shards = 8, .drop_last = false},
               0, 20)
          .labels.size(0),
      10);
}

// ---- order ---------------------------------------------------------------------------

TEST(ShardedLoader, AnEpochVisitsEveryExampleOnce) {
  ShardedLoader loader(synthetic(1000), {.global_batch = 64, .drop_last = false});
  auto labels = labels_of(whole_epoch(loader, 0));
  std::vector<std::int64_t> identity(1000);
  for (std::int64_t i = 0; i < 1000; ++i) identity[i] = i;
  EXPECT_NE(labels, identity);
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, identity);
}

TEST(ShardedLoader, WithoutShuffleTheOrderIsTheIdentity) {
  ShardedLoader loader(synthetic(100), {.global_batch = 8, .shuffle = false, .drop_last = false});
  std::vector<std::int64_t> identity(100);
  for (std::int64_t i = 0; i < 100; ++i) identity[i] = i;
  EXPECT_EQ(labels_of(whole_epoch(loader, 0)), identity);
  EXPECT_EQ(labels_of(whole_epoch(loader, 5)), identity);
}

TEST(ShardedLoader, ShuffleDependsOnSeedAndEpochOnly) {
  const auto examples = synthetic(500);
  ShardedLoader first(examples, {.global_batch = 50, .seed = 3});
  ShardedLoader second(examples, {.global_batch = 50, .seed = 3});
  ShardedLoader other_seed(examples, {.global_batch = 50, .seed = 4});
  const auto epoch0 = labels_of(whole_epoch(first, 0));
  EXPECT_EQ(labels_of(whole_epoch(second, 0)), epoch0);
  EXPECT_NE(labels_of(whole_epoch(first, 1)), epoch0);
  EXPECT_NE(labels_of(whole_epoch(other_seed, 0)), epoch0);
  EXPECT_EQ(labels_of(whole_epoch(first, 0)), epoch0);  // epoch 0 again, after epoch 1
}

TEST(ShardedLoader, StartingAtABatchMatchesIteratingToIt) {
  const auto examples = synthetic(1000);
  const LoaderOptions options{
      .global_batch = 40, .replica = 1, .num_replicas = 2, .seed = 9, .augment = true};
  ShardedLoader loader(examples, options);
  const auto all = whole_epoch(loader, 2);
  ASSERT_EQ(all.size(), 25u);
  for (const std::int64_t k : {0, 7, 24}) {
    const auto resumed = batch_at(examples, options, 2, k);
    EXPECT_EQ(resumed.index, k);
    EXPECT_TRUE(::torch::equal(resumed.labels, all[k].labels));
    EXPECT_TRUE(::torch::equal(resumed.images, all[k].images));
  }
  // Restarting in the middle of an epoch abandons it.
  loader.start_epoch(2);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(2, 7);
  const auto seventh = loader.next();
  ASSERT_TRUE(seventh.has_value());
  EXPECT_TRUE(::torch::equal(seventh->images, all[7].images));
  EXPECT_EQ(whole_epoch(loader, 2, 25).size(), 0u);
}

// ---- values --------------------------------------------------------------------------

TEST(ShardedLoader, ImagesAreNormalisedAndLabelsInt64) {
  const auto examples = synthetic(100);
  const auto batch = batch_at(examples, {.global_batch = 10, .shuffle = false}, 0, 1);
  EXPECT_EQ(batch.images.scalar_type(), ::torch::kFloat32);
  EXPECT_EQ(batch.images.sizes(), (std::vector<std::int64_t>{10, 1, 28, 28}));
  EXPECT_EQ(batch.labels.scalar_type(), ::torch::kInt64);
  EXPECT_TRUE(::torch::equal(batch.labels, ::torch::arange(10, 20, ::torch::kInt64)));
  const auto expected = normalised(examples->images.slice(0, 10, 20)).unsqueeze(1);
  EXPECT_TRUE(::torch::allclose(batch.images, expected, /*rtol=*/0, /*atol=*/1e-6));
}

// normalised_images gives a batch's values bit for bit, from images of any strides.
TEST(ShardedLoader, NormalisedImagesAreTheBatchImages) {
  const auto examples = synthetic(30);
  const auto batch = batch_at(examples, {.global_batch = 30, .shuffle = false}, 0, 0);
  EXPECT_TRUE(::torch::equal(normalised_images(examples->images), batch.images));
  const ::torch::Tensor transposed = examples->images.transpose(1, 2);
  EXPECT_TRUE(
      ::torch::equal(normalised_images(transposed), normalised_images(transposed.contiguous())));
  expect_invalid_argument([] { normalised_images(::torch::zeros({2, 28, 28})); });
  expect_invalid_argument([] { normalised_images(::torch::zeros({2, 28}, ::torch::kUInt8)); });
  expect_invalid_argument([] { normalised_images(::torch::Tensor()); });
}

// Every augmented image is its source flipped or not, then shifted by -2..2 in x and y with
// zero fill, computed here with tensor ops; the draws vary over examples and epochs.
TEST(ShardedLoader, AugmentationFlipsAndShiftsEachExample) {
  const auto examples = synthetic(200);
  const LoaderOptions options{.global_batch = 100, .seed = 5, .augment = true};
  int flipped = 0;
  int shifted = 0;
  std::vector<std::vector<int>> draws(2);  // per epoch, candidate number per example
  for (const std::int64_t epoch : {0, 1}) {
    draws[epoch].assign(200, -1);
    ShardedLoader loader(examples, options);
    for (const auto& batch : whole_epoch(loader, epoch)) {
      for (std::int64_t i = 0; i < batch.labels.size(0); ++i) {
        const auto example = batch.labels[i].item<std::int64_t>();
        const auto source = examples->images[example];
        int found = -1;
        for (int candidate = 0; candidate < 50 && found < 0; ++candidate) {
          const bool flip = candidate >= 25;
          const int dx = candidate % 5 - 2;
          const int dy = candidate / 5 % 5 - 2;
          const auto padded =
              ::torch::constant_pad_nd(flip ? source.flip({1}) : source, {2, 2, 2, 2});
          const auto expected =
              normalised(padded.slice(0, 2 - dy, 30 - dy).slice(1, 2 - dx, 30 - dx));
          if (::torch::allclose(batch.images[i][0], expected, 0, 1e-6)) found = candidate;
        }
        ASSERT_GE(found, 0) << "example " << example << " is no flip-and-shift of its source";
        draws[epoch][example] = found;
        flipped += found >= 25;
        shifted += found % 25 != 12;
      }
    }
  }
  EXPECT_GT(flipped, 150);
  EXPECT_LT(flipped, 250);
  EXPECT_GT(shifted, 300);
  EXPECT_NE(draws[0], draws[1]);
  // The same draws again for the same seed and epoch.
  const auto first = batch_at(examples, options, 0, 0);
  const auto repeat = batch_at(examples, options, 0, 0);
  EXPECT_TRUE(::torch::equal(first.images, repeat.images));
}

// ---- drop_last -----------------------------------------------------------------------

TEST(ShardedLoader, DropLastCounts) {
  const auto examples = synthetic(103);  // 5 global batches of 20, then 3 examples
  for (int r = 0; r < 4; ++r) {
    ShardedLoader training(examples, {.global_batch = 20, .replica = r, .num_replicas = 4});
    EXPECT_EQ(training.batches_per_epoch(), 5);
    const auto batches = whole_epoch(training, 0);
    ASSERT_EQ(batches.size(), 5u);
    for (const auto& batch : batches) EXPECT_EQ(batch.labels.size(0), 5);
  }
  // Evaluation keeps the 3: replicas 0..2 get one each, replica 3 an empty batch.
  std::vector<::torch::Tensor> last;
  for (int r = 0; r < 4; ++r) {
    ShardedLoader evaluation(
        examples, {.global_batch = 20, .replica = r, .num_replicas = 4, .drop_last = false});
    EXPECT_EQ(evaluation.batches_per_epoch(), 6);
    const auto batches = whole_epoch(evaluation, 0);
    ASSERT_EQ(batches.size(), 6u);
    EXPECT_EQ(batches[5].labels.size(0), r < 3 ? 1 : 0);
    EXPECT_EQ(batches[5].images.sizes(), (std::vector<std::int64_t>{r < 3 ? 1 : 0, 1, 28, 28}));
    last.push_back(batches[5].labels);
  }
  const auto single = batch_at(examples, {.global_batch = 20, .drop_last = false}, 0, 5);
  EXPECT_TRUE(::torch::equal(::torch::cat(last), single.labels));

  ShardedLoader exact(synthetic(100), {.global_batch = 20, .drop_last = false});
  EXPECT_EQ(exact.batches_per_epoch(), 5);
  ShardedLoader too_few(synthetic(10), {.global_batch = 20});
  EXPECT_EQ(too_few.batches_per_epoch(), 0);
  EXPECT_EQ(whole_epoch(too_few, 0).size(), 0u);
}

// ---- errors --------------------------------------------------------------------------

TEST(ShardedLoader, InvalidOptionsThrow) {
  const auto examples = synthetic(10);
  expect_invalid_argument(
      [&] { ShardedLoader(examples, {.global_batch = 10, .num_replicas = 3}); });
  expect_invalid_argument([&] { ShardedLoader(examples, {.global_batch = 0}); });
  expect_invalid_argument([&] { ShardedLoader(examples, {.replica = 2, .num_replicas = 2}); });
  expect_invalid_argument([&] { ShardedLoader(examples, {.replica = -1, .num_replicas = 2}); });
  expect_invalid_argument([&] { ShardedLoader(examples, {.num_replicas = 0}); });
  expect_invalid_argument([&] { ShardedLoader(examples, {.prefetch = 0}); });
  // Shards: the batch a multiple of them, at most as many replicas, none negative.
  expect_invalid_argument([&] { ShardedLoader(examples, {.global_batch = 6, .shards = 4}); });
  expect_invalid_argument(
      [&] { ShardedLoader(examples, {.global_batch = 4, .num_replicas = 3, .shards = 2}); });
  expect_invalid_argument([&] { ShardedLoader(examples, {.global_batch = 4, .shards = -2}); });
  ShardedLoader(examples, {.global_batch = 8, .replica = 2, .num_replicas = 3, .shards = 4});
  expect_invalid_argument([&] { ShardedLoader(nullptr, {}); });
  auto wrong_type = std::make_shared<Examples>(*examples);
  wrong_type->images = examples->images.to(::torch::kFloat32);
  expect_invalid_argument([&] { ShardedLoader(wrong_type, {}); });
  auto wrong_count = std::make_shared<Examples>(*examples);
  wrong_count->labels = ::torch::arange(9, ::torch::kInt64);
  expect_invalid_argument([&] { ShardedLoader(wrong_count, {}); });
}

TEST(ShardedLoader, StartEpochAndNextCheckTheirUse) {
  ShardedLoader loader(synthetic(100), {.global_batch = 10});
  expect_invalid_argument([&] { loader.next(); });
  expect_invalid_argument([&] { loader.start_epoch(-1); });
  expect_invalid_argument([&] { loader.start_epoch(0, -1); });
  expect_invalid_argument([&] { loader.start_epoch(0, 11); });
  loader.start_epoch(0, 9);
  EXPECT_TRUE(loader.next().has_value());
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_FALSE(loader.next().has_value());  // and after the end, still nothing
}

// ---- lifetime ------------------------------------------------------------------------

std::size_t thread_count() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

// Each loader is destroyed with batches in flight: nothing of it is left behind (its
// prefetch thread, its hold on the examples). A destructor that hung on its thread would
// stop the binary at the ctest TIMEOUT; how long it takes is not asserted.
TEST(ShardedLoader, DestroyingMidEpochLeavesNoThreadAndNoReference) {
  const auto examples = synthetic(5000);
  const LoaderOptions options{.global_batch = 500, .augment = true, .prefetch = 4};
  { ShardedLoader warm_up(examples, options); }
  const auto threads_before = thread_count();
  const auto references_before = examples.use_count();
  for (int i = 0; i < 20; ++i) {
    ShardedLoader loader(examples, options);
    loader.start_epoch(i);
    if (i % 2 == 0) {
      ASSERT_TRUE(loader.next().has_value());
    }
    EXPECT_GT(examples.use_count(), references_before) << "the loader holds the examples";
  }
  EXPECT_EQ(thread_count(), threads_before);
  EXPECT_EQ(examples.use_count(), references_before);
}

TEST(ShardedLoader, AMovedLoaderContinuesItsEpoch) {
  const auto examples = synthetic(100);
  ShardedLoader loader(examples, {.global_batch = 10, .seed = 1});
  const auto all = whole_epoch(loader, 0);
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  ShardedLoader moved = std::move(loader);
  const auto second = moved.next();
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(::torch::equal(second->labels, all[1].labels));
}

}  // namespace
}  // namespace replicator::data
