// Sample quality of a class-conditional generator of Fashion-MNIST images, measured with
// the project's classifier (examples/models/resnet.h, trained by `replicator train
// classifier`) through the torch layer's measures (replicator/torch/sample_quality.h):
// - FD: the Fréchet distance between the classifier's features (the
//   64 values before its head) of `samples` generated images and of the 10,000 test
//   images, beside a floor (as many real training images) and a ceiling (as many images of
//   the trivial generator: each class's mean image plus Gaussian pixel noise);
// - GAN-test accuracy (Shmelkov et al. 2018): the classifier's accuracy on generated
//   images, each labelled with the class it was generated for;
// - Classification Accuracy Score, CAS (Ravuri & Vinyals 2019): the real test accuracy of
//   a fresh classifier trained only on generated images, beside the same training on the
//   real training images.
// Generated images come as data::Examples quantised to uint8 like real ones. The functions
// print nothing, run on the calling thread (and LibTorch's intra-op threads) and use the
// classifier from one thread at a time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/train/classifier.h"
#include "examples/models/resnet.h"
#include "replicator/data/fashion_mnist.h"
#include "replicator/torch/sample_quality.h"

namespace replicator::apps {

using examples::ResNet;

// The model of a train-job checkpoint (checkpoint-<step>.pt), in a ResNet of the default
// shape, in eval mode. BLOCKS on file I/O. Throws DataError naming `path` when the file is
// missing or corrupt or holds another model.
ResNet load_classifier(const std::filesystem::path& path);

// The classifier's features of `examples`, double [N, 64], and the fraction of them whose
// label is its top class (the GAN-test accuracy when the labels are the classes the images
// were generated for): torch::score_images through the classifier, `batch` images per
// forward pass, in eval mode (it stays there), the images normalised as the training loader
// does (data::normalised_images). Throws InvalidArgument for no examples, examples that are
// not uint8 [N, 28, 28] with int64 [N] labels, or a batch below 1.
torch::ImageScores classifier_scores(ResNet& classifier, const data::Examples& examples,
                                     std::int64_t batch = 500);

// `n` images of the trivial generator fitted to `train` (torch::trivial_generator with the
// classifier's 10 classes): labels balanced, each image its class's mean image plus pixel
// noise. Throws InvalidArgument when n < 0 or a class has no example in `train`.
data::Examples trivial_generator_examples(const data::Examples& train, std::int64_t n,
                                          std::uint64_t seed);

// How each CAS classifier is trained: the train job's defaults but 5 epochs without
// augmentation (92.5 % on the real training set, the best of the short runs measured; 93 %
// takes about 25 epochs), on one replica with 2 intra-op threads, quietly.
TrainOptions cas_training_options();

// The Classification Accuracy Score of `train`: the accuracy on `test`, after its last
// epoch, of a fresh classifier trained on `train` only with `training` (its data fields are
// replaced; it is always evaluated). BLOCKS for minutes on full sets. Throws InvalidArgument
// when training stops before an epoch ends (max_steps), and what train_classifier throws.
double classification_accuracy_score(const data::Examples& train, const data::Examples& test,
                                     const TrainOptions& training);

struct EvalOptions {
  std::int64_t samples = 10000;  // generated images, and real training images, in each FD
  std::int64_t batch = 500;      // images per forward pass of the classifier
  std::uint64_t seed = 0;        // the floor's training images and the ceiling's generator
  bool cas = false;              // also the CAS (a classifier trained per set: minutes)
  TrainOptions cas_training = cas_training_options();
};

// What a generator is compared with; independent of it, so computed once per classifier.
struct QualityReference {
  torch::GaussianStats test;             // the classifier's features of the test set
  double test_accuracy = 0;              // the classifier's accuracy on the test set
  double fd_floor = 0;                   // FD of `samples` training images (a seeded random subset)
  double fd_ceiling = 0;                 // FD of `samples` images of the trivial generator
  double ceiling_gan_test_accuracy = 0;  // the classifier's accuracy on those
  std::optional<double> cas_real;        // CAS of the real training set (options.cas)
  double seconds = 0;                    // wall time of quality_reference
};

// BLOCKS: about 4 forward passes over 10,000 images, and a CAS training with options.cas.
// Throws InvalidArgument when `train` has fewer than options.samples examples or a class
// without example, and what classifier_features and classification_accuracy_score throw.
QualityReference quality_reference(ResNet& classifier, const data::Examples& train,
                                   const data::Examples& test, const EvalOptions& options);

struct GanQuality {
  std::int64_t samples = 0;      // generated images in the FD and the GAN-test accuracy
  double fd = 0;                 // their FD to the test set
  double gan_test_accuracy = 0;  // the classifier's accuracy on them
  std::optional<double> cas;     // CAS of all the generated images (options.cas)
  double seconds = 0;            // wall time of evaluate_samples
  QualityReference reference;
};

// The quality of `generated`: FD and GAN-test accuracy of its first options.samples
// examples, and with options.cas the CAS of all of them, tested on `test`. BLOCKS as
// quality_reference. Throws InvalidArgument when `generated` has fewer than options.samples
// examples, and what classifier_features and classification_accuracy_score throw.
GanQuality evaluate_samples(ResNet& classifier, const QualityReference& reference,
                            const data::Examples& generated, const data::Examples& test,
                            const EvalOptions& options);

// What measurements against one classifier share: the classifier, both Fashion-MNIST
// splits and the reference, computed once.
struct QualitySetup {
  ResNet classifier{nullptr};
  data::Examples train;
  data::Examples test;
  QualityReference reference;
};

// Reads both splits from `data_dir` (empty: data::default_fashion_mnist_dir()) and computes
// the reference of `classifier` with `options`. BLOCKS as quality_reference, and on file
// I/O. Throws DataError when the data cannot be read, and what quality_reference throws.
QualitySetup prepare_quality(ResNet classifier, const std::filesystem::path& data_dir,
                             const EvalOptions& options);

// One JSON object of the figures (no statistics): samples, fd, fd_floor, fd_ceiling,
// gan_test_accuracy, classifier_test_accuracy, ceiling_gan_test_accuracy, cas, cas_real
// (null without CAS), seconds, reference_seconds.
nlohmann::ordered_json to_json(const GanQuality& quality);

// The figures as a small text table, one row per set of images (samples, floor, ceiling)
// and one column per measure (FD, accuracy of the classifier, CAS), lines ending in '\n'.
std::string quality_table(const GanQuality& quality, const std::string& samples_name);

}  // namespace replicator::apps
