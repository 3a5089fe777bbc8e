// Sample quality of generated images, measured through a network the caller gives:
// - the Fréchet distance (replicator/torch/frechet.h) between the network's features of
//   generated images and of real ones (the "FID" when the network is Inception);
// - the GAN-test accuracy (Shmelkov et al. 2018): a classifier's accuracy on generated
//   images, each labelled with the class it was generated for;
// - the trivial generator (each class's mean image plus Gaussian pixel noise), a reference
//   that any useful generator beats.
//
// The network is a callable on consecutive slices of the images as the caller holds them,
// images [N, ...] (e.g. uint8 [N, 28, 28]) cut into slices [B, ...] of `batch` rows (the last
// one shorter): a FeatureExtractor returns features [B, D], a Classifier logits [B, C], a
// FeatureHead the logits [B, C] of features [B, D]; any floating dtype, any device. The
// slices are passed in order, on the calling thread, under NoGradGuard; what the network
// needs of them (dtype, normalisation, device) and its eval mode are the callable's. A
// torch::nn::Module goes in through a lambda:
//   net->eval();
//   FeatureExtractor f = [&](const Tensor& x) { return net->features(x.to(kFloat) / 255); };
// Results are on the CPU. The functions print nothing and keep no state.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>

#include "replicator/torch/frechet.h"

namespace replicator::torch {

// images [B, ...] → features [B, D].
using FeatureExtractor = std::function<::torch::Tensor(const ::torch::Tensor& images)>;
// images [B, ...] → logits [B, C]; the predicted class is the largest logit's.
using Classifier = std::function<::torch::Tensor(const ::torch::Tensor& images)>;
// features [B, D] → logits [B, C]: a classifier's last layer, whose input is its features.
using FeatureHead = std::function<::torch::Tensor(const ::torch::Tensor& features)>;

// The features of every image, double [N, D], row i of image i. Throws InvalidArgument for
// images that are undefined, 0-dimensional or empty (N = 0), a batch below 1, or features that
// are not floating [B, D] with the same D for every slice; and what `features` throws.
::torch::Tensor image_features(const FeatureExtractor& features, const ::torch::Tensor& images,
                               std::int64_t batch = 500);

// gaussian_stats(image_features(...)): the statistics a set of real images is compared
// with, computed once. Throws as image_features, and InvalidArgument for N < 2.
GaussianStats image_statistics(const FeatureExtractor& features, const ::torch::Tensor& images,
                               std::int64_t batch = 500);

// The Fréchet distance between the features of `generated` and the statistics `real`
// (image_statistics of the real images, through the same extractor). Throws as
// image_statistics and frechet_distance.
double image_frechet_distance(const FeatureExtractor& features, const ::torch::Tensor& generated,
                              const GaussianStats& real, std::int64_t batch = 500);

// The fraction of `images` whose predicted class is their label (int64 [N]): the GAN-test
// accuracy when the labels are the classes the images were generated for. Throws as
// image_features for the images and batch, and InvalidArgument for labels that are not
// int64 [N] or logits that are not [B, C].
double classifier_accuracy(const Classifier& classifier, const ::torch::Tensor& images,
                           const ::torch::Tensor& labels, std::int64_t batch = 500);

struct ImageScores {
  ::torch::Tensor features;  // double [N, D], as image_features
  double accuracy = 0;       // as classifier_accuracy
};

// Both measures in one pass of a classifier split at its features (logits =
// head(features(images))), each slice through the network once. Throws as image_features
// and classifier_accuracy.
ImageScores score_images(const FeatureExtractor& features, const FeatureHead& head,
                         const ::torch::Tensor& images, const ::torch::Tensor& labels,
                         std::int64_t batch = 500);

struct LabelledImages {
  ::torch::Tensor images;  // [n, ...] as the examples' images
  ::torch::Tensor labels;  // int64 [n]
};

// `n` images of the trivial generator fitted to `images` [N, ...] (CPU, uint8 or floating)
// with labels int64 [N] in 0..classes-1: labels balanced (image i has class i % classes),
// each image its class's mean image plus independent Gaussian noise with, per pixel, the
// standard deviation of that pixel within the class; uint8 images are rounded and clamped
// to 0..255. Computed in double; depends only on (images, labels, classes, n, seed) and
// leaves LibTorch's default generator alone. Throws InvalidArgument for n < 0, classes < 1,
// images of another dtype or device or not matching the labels, or a class without image.
LabelledImages trivial_generator(const ::torch::Tensor& images, const ::torch::Tensor& labels,
                                 std::int64_t classes, std::int64_t n, std::uint64_t seed);

}  // namespace replicator::torch
