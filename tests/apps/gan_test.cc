// Tests of the GAN job (apps/train/gan.h; its networks: tests/examples/models_test.cc): the
// headline property of a data-parallel GAN: one step on 2 replicas (threads, each with half of the
// global batch) gives what one replica gives on the whole global batch, for G, D and the EMA
// (parameters and buffers: spectral-norm vectors, batch-norm running statistics).
#include "apps/train/gan.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "replicator/errors.h"
#include "replicator/torch/checkpoint.h"

namespace {

using namespace replicator::apps;

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gan_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// Compares every parameter and buffer of two checkpoints' models.
void expect_close_models(GanModels& a, GanModels& b, double rtol, double atol) {
  const auto pa = a->named_parameters();
  const auto pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i].value(), pb[i].value(), rtol, atol))
        << pa[i].key() << ": max |difference| "
        << (pa[i].value() - pb[i].value()).abs().max().item<double>();
  }
  const auto ba = a->named_buffers();
  const auto bb = b->named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (std::size_t i = 0; i < ba.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ba[i].value().to(torch::kDouble), bb[i].value().to(torch::kDouble),
                                rtol, atol))
        << ba[i].key();
  }
}

// Two steps of 2 D steps and one G step each on a small model, the EMA averaging from the
// second step.
GanOptions small_run() {
  GanOptions o;
  o.model = {.width = 4, .z_chunk = 8, .embedding = 8};
  o.global_batch = 16;
  o.steps = 2;
  o.d_steps = 2;
  o.ema_start = 1;  // one plain copy, then one average
  o.ema_decay = 0.5;
  o.sample_every = 0;
  o.standing_batches = 1;
  o.progress = false;
  o.timed_after = 0;
  return o;
}

// Runs `o` on `replicas` local replicas and loads what its last checkpoint holds.
GanModels train_and_load(GanOptions o, int replicas, const std::string& name) {
  o.config = replicator::Config{.local_replicas = replicas};
  o.out = temp_dir(name);
  const GanResult r = train_gan(o);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.replicas, replicas);
  GanModels models = load_gan_checkpoint(o.out / "checkpoint-000000002.pt", o.model);
  std::filesystem::remove_all(o.out);
  return models;
}

TEST(GanJob, TwoReplicasTakeTheStepOfOneOnTheGlobalBatch) {
  GanModels one = train_and_load(small_run(), 1, "r1");
  GanModels two = train_and_load(small_run(), 2, "r2");
  // Adam's first steps divide by √v: relative differences of the summed gradients grow a
  // little, hence 1e-4.
  expect_close_models(one, two, 1e-4, 1e-5);
}

// The layout changes how the convolutions and batch norms walk memory, not what the
// networks compute; a checkpoint keeps the layout.
TEST(GanJob, ChannelsLastTakesTheStepOfTheContiguousLayout) {
  GanOptions o = small_run();
  o.model.channels_last = false;
  GanModels contiguous = train_and_load(o, 2, "contiguous");
  o.model.channels_last = true;
  GanModels last = train_and_load(o, 2, "channels_last");
  expect_close_models(contiguous, last, 1e-4, 1e-5);
  const auto conv = [](GanModels& m) {
    return m->generator->named_parameters()["block1.conv1.weight"];
  };
  EXPECT_TRUE(conv(last).is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(conv(contiguous).is_contiguous());
}

// A run resumed with the other --memory-format continues in its own layout, and saves it.
TEST(GanJob, AResumedRunTakesItsOwnLayout) {
  GanOptions o = small_run();
  o.config = replicator::Config{.local_replicas = 1};
  o.out = temp_dir("relayout");
  o.model.channels_last = false;
  o.steps = 1;
  train_gan(o);
  o.model.channels_last = true;
  o.steps = 2;
  EXPECT_EQ(train_gan(o).steps, 2);
  // Loaded as stored, without load_gan_checkpoint's own layout.
  GanModels stored(o.model);
  torch::optim::Adam g(stored->generator->parameters(), torch::optim::AdamOptions(1e-4));
  torch::optim::Adam d(stored->discriminator->parameters(), torch::optim::AdamOptions(1e-4));
  replicator::torch::load_checkpoint(o.out / "checkpoint-000000002.pt", *stored,
                                     replicator::torch::Optimizers{&g, &d});
  EXPECT_TRUE(stored->generator->named_parameters()["block1.conv1.weight"].is_contiguous(
      torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(stored->discriminator->named_parameters()["block2.conv1.weight"].is_contiguous(
      torch::MemoryFormat::ChannelsLast));
  std::filesystem::remove_all(o.out);
}

TEST(GanJob, RejectsABatchThatDoesNotSplit) {
  GanOptions o;
  o.config = replicator::Config{.local_replicas = 2};
  o.global_batch = 6;
  o.accumulate = 2;
  o.steps = 1;
  EXPECT_THROW(train_gan(o), replicator::InvalidArgument);
}

}  // namespace
