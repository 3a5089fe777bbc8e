// Tests of the train job's network layout (apps/train/classifier.h, examples/models/resnet.h):
// channels last and contiguous take the same steps (to rounding), the saved layout is the
// run's own, and a run resumed with the other layout continues in its own. The job runs on
// a few hundred examples held in memory, two local replicas.
#include "apps/train/classifier.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "examples/models/resnet.h"
#include "replicator/data/fashion_mnist.h"
#include "replicator/device.h"
#include "replicator/errors.h"
#include "replicator/torch/checkpoint.h"

namespace {

using namespace replicator::apps;
using replicator::examples::ResNet;
using replicator::examples::ResNetOptions;

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("classifier_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// 64 random images of 10 classes.
std::shared_ptr<const replicator::data::Examples> examples() {
  torch::manual_seed(7);
  auto e = std::make_shared<replicator::data::Examples>();
  e->images = torch::randint(0, 256, {64, 28, 28}, torch::kUInt8);
  e->labels = torch::arange(64, torch::kLong).remainder(10);
  return e;
}

// Three steps of a global batch of 16 on 2 local replicas, a checkpoint at the end.
TrainOptions small_run(const std::string& name, bool channels_last) {
  TrainOptions o;
  o.config = replicator::Config{.local_replicas = 2};
  o.batch = 16;
  o.max_steps = 3;
  o.augment = false;
  o.evaluate = false;
  o.quiet = true;
  o.channels_last = channels_last;
  o.train_examples = examples();
  o.test_examples = o.train_examples;
  o.out = temp_dir(name);
  return o;
}

// The network a checkpoint holds, loaded as stored (no layout applied).
ResNet load_stored(const std::filesystem::path& path) {
  ResNet model(ResNetOptions{});
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  replicator::torch::load_checkpoint(path, *model, sgd);
  return model;
}

torch::Tensor conv_weight(ResNet& model) {
  return model->named_parameters()["block0.conv1.weight"];
}

// The layout changes how the convolutions and batch norms walk memory, not what the
// network computes; a checkpoint keeps the layout.
TEST(ClassifierJob, ChannelsLastTakesTheStepsOfTheContiguousLayout) {
  const TrainOptions a = small_run("contiguous", false);
  const TrainOptions b = small_run("channels_last", true);
  EXPECT_EQ(train_classifier(a).steps, 3);
  EXPECT_EQ(train_classifier(b).steps, 3);
  ResNet contiguous = load_stored(a.out / "checkpoint-000000003.pt");
  ResNet last = load_stored(b.out / "checkpoint-000000003.pt");
  EXPECT_TRUE(conv_weight(contiguous).is_contiguous());
  EXPECT_TRUE(conv_weight(last).is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(conv_weight(last).is_contiguous());
  // Rounding (batch norm's bias gradients are sums that nearly cancel, so their order shows
  // at 1e-3); a gradient read in the wrong layout would move weights by 1e-3 and more.
  const auto expect_close = [](const torch::Tensor& x, const torch::Tensor& y,
                               const std::string& name) {
    const double worst = (x - y).abs().max().item<double>();
    EXPECT_LE(worst, 1e-5 + 1e-3 * x.abs().max().item<double>()) << name;
  };
  const auto pa = contiguous->named_parameters();
  const auto pb = last->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i)
    expect_close(pa[i].value(), pb[i].value(), pa[i].key());
  const auto ba = contiguous->named_buffers();
  const auto bb = last->named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (std::size_t i = 0; i < ba.size(); ++i) {
    if (ba[i].value().is_floating_point()) expect_close(ba[i].value(), bb[i].value(), ba[i].key());
  }
  std::filesystem::remove_all(a.out);
  std::filesystem::remove_all(b.out);
}

// A run resumed with the other layout continues in its own, and saves it.
TEST(ClassifierJob, AResumedRunTakesItsOwnLayout) {
  TrainOptions o = small_run("relayout", false);
  o.max_steps = 2;
  EXPECT_EQ(train_classifier(o).steps, 2);
  o.channels_last = true;
  o.max_steps = 3;
  EXPECT_EQ(train_classifier(o).steps, 3);
  ResNet stored = load_stored(o.out / "checkpoint-000000003.pt");
  EXPECT_TRUE(conv_weight(stored).is_contiguous(torch::MemoryFormat::ChannelsLast));
  std::filesystem::remove_all(o.out);
}

}  // namespace

namespace {

// The job trains where its replicas are bound: the host, or CUDA. Fake devices hold no
// LibTorch tensors, shards run on the host only, and without a GPU LibTorch's answer is the
// error (each before any replica starts).
TEST(ClassifierJob, RefusesDevicesItCannotTrainOn) {
  const auto error_of = [](const std::string& devices, int shards) -> std::string {
    TrainOptions o = small_run("devices", /*channels_last=*/true);
    o.config.devices = devices;
    o.shards = shards;
    try {
      train_classifier(o);
    } catch (const replicator::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("fake:2", 0).find("not on fake:2"), std::string::npos);
  EXPECT_NE(error_of("cuda", 4).find("--shards runs on the host only"), std::string::npos);
  if (replicator::device_count(replicator::MemoryKind::kCuda) == 0) {
    const std::string no_gpu = error_of("cuda", 0);
    EXPECT_NE(no_gpu.find("so there is no cuda:0"), std::string::npos) << no_gpu;
  }
}

}  // namespace
