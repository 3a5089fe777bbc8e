// Tests of the example models (examples/models): the BigGAN networks' shapes and range and
// their hinge losses on hand-made values; the ResNet's shapes, its logits as the head on its
// features, and its layout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "examples/models/biggan.h"
#include "examples/models/resnet.h"

namespace {

using namespace replicator::examples;

TEST(GanLosses, HingeOnHandMadeScores) {
  const torch::Tensor real = torch::tensor({2.0f, 0.5f, -1.0f});  // relu(1 − s): 0, 0.5, 2
  const torch::Tensor fake = torch::tensor({-3.0f, 0.0f});        // relu(1 + s): 0, 1
  auto [loss_real, loss_fake] = hinge_d_loss(real, fake);
  EXPECT_FLOAT_EQ(loss_real.item<float>(), 2.5f / 3);
  EXPECT_FLOAT_EQ(loss_fake.item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(hinge_g_loss(fake).item<float>(), 1.5f);
}

TEST(BigGan, ShapesAndRange) {
  torch::manual_seed(1);
  const BigGanOptions options{.width = 4, .z_chunk = 8, .embedding = 6};
  Generator g(options);
  Discriminator d(options);
  orthogonal_init(*g);
  const torch::Tensor labels = torch::tensor({0, 3, 9}, torch::kLong);
  const torch::Tensor images = g(torch::randn({3, options.z_dim()}), labels);
  EXPECT_EQ(images.sizes(), (std::vector<std::int64_t>{3, 1, 28, 28}));
  EXPECT_LE(images.abs().max().item<float>(), 1.0f);
  EXPECT_EQ(d(images, labels).sizes(), (std::vector<std::int64_t>{3}));
}

TEST(ResNet, FeaturesThenHead) {
  torch::manual_seed(2);
  ResNet net(ResNetOptions{.widths = {4, 8}, .classes = 5});
  net->eval();
  const torch::Tensor images = torch::randn({3, 1, 28, 28});
  const torch::Tensor features = net->features(images);
  EXPECT_EQ(features.sizes(), (std::vector<std::int64_t>{3, 8}));
  const torch::Tensor logits = net->forward(images);
  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{3, 5}));
  EXPECT_TRUE(torch::allclose(logits, net->logits(features)));
  EXPECT_EQ(memory_format(net->options()), c10::MemoryFormat::ChannelsLast);
  EXPECT_EQ(memory_format(ResNetOptions{.channels_last = false}), c10::MemoryFormat::Contiguous);
}

}  // namespace
