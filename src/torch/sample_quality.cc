#include "replicator/torch/sample_quality.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "replicator/errors.h"

namespace replicator::torch {
namespace {

std::string shape_of(const ::torch::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) : std::string("undefined");
}

void check_images(const ::torch::Tensor& images, std::int64_t batch) {
  if (!images.defined() || images.dim() < 1 || images.size(0) == 0) {
    throw InvalidArgument("sample quality needs images [N, ...] with N >= 1, got " +
                          shape_of(images));
  }
  if (batch < 1) throw InvalidArgument("batch must be at least 1, got " + std::to_string(batch));
}

void check_labels(const ::torch::Tensor& images, const ::torch::Tensor& labels) {
  if (!labels.defined() || labels.scalar_type() != ::torch::kLong || labels.dim() != 1 ||
      labels.size(0) != images.size(0)) {
    throw InvalidArgument("the labels of " + std::to_string(images.size(0)) +
                          " images must be int64 [" + std::to_string(images.size(0)) + "], got " +
                          shape_of(labels) +
                          (labels.defined() ? std::string(" ") + c10::toString(labels.scalar_type())
                                            : std::string()));
  }
}

// Calls fn(first_row, slice) for each slice of `batch` rows, in order, without gradients.
template <typename Fn>
void for_each_slice(const ::torch::Tensor& images, std::int64_t batch, Fn&& fn) {
  const ::torch::NoGradGuard no_grad;
  const std::int64_t n = images.size(0);
  for (std::int64_t begin = 0; begin < n; begin += batch) {
    fn(begin, images.narrow(0, begin, std::min(batch, n - begin)));
  }
}

// Checks the network's output for a slice of `rows` images: [rows, width] floating, with
// the width of the earlier slices (`width` < 0 before the first).
::torch::Tensor checked_output(const ::torch::Tensor& out, std::int64_t rows, std::int64_t& width,
                               const char* what) {
  const bool shaped = out.defined() && out.dim() == 2 && out.size(0) == rows &&
                      (width < 0 || out.size(1) == width) && out.is_floating_point();
  if (!shaped) {
    throw InvalidArgument(std::string("the network's ") + what + " of " + std::to_string(rows) +
                          " images must be floating [" + std::to_string(rows) + ", " +
                          (width < 0 ? std::string("D") : std::to_string(width)) + "], got " +
                          shape_of(out));
  }
  width = out.size(1);
  return out;
}

// The number of rows whose largest logit is at their label.
double correct(const ::torch::Tensor& logits, const ::torch::Tensor& labels) {
  return logits.argmax(1).cpu().eq(labels).sum().item<double>();
}

}  // namespace

::torch::Tensor image_features(const FeatureExtractor& features, const ::torch::Tensor& images,
                               std::int64_t batch) {
  check_images(images, batch);
  std::vector<::torch::Tensor> parts;
  std::int64_t width = -1;
  for_each_slice(images, batch, [&](std::int64_t, const ::torch::Tensor& slice) {
    const ::torch::Tensor f = checked_output(features(slice), slice.size(0), width, "features");
    parts.push_back(f.to(::torch::kCPU, ::torch::kDouble));
  });
  return ::torch::cat(parts);
}

GaussianStats image_statistics(const FeatureExtractor& features, const ::torch::Tensor& images,
                               std::int64_t batch) {
  return gaussian_stats(image_features(features, images, batch));
}

double image_frechet_distance(const FeatureExtractor& features, const ::torch::Tensor& generated,
                              const GaussianStats& real, std::int64_t batch) {
  return frechet_distance(image_statistics(features, generated, batch), real);
}

double classifier_accuracy(const Classifier& classifier, const ::torch::Tensor& images,
                           const ::torch::Tensor& labels, std::int64_t batch) {
  check_images(images, batch);
  check_labels(images, labels);
  double right = 0;
  std::int64_t classes = -1;
  for_each_slice(images, batch, [&](std::int64_t begin, const ::torch::Tensor& slice) {
    const std::int64_t rows = slice.size(0);
    right += correct(checked_output(classifier(slice), rows, classes, "logits"),
                     labels.narrow(0, begin, rows));
  });
  return right / static_cast<double>(images.size(0));
}

ImageScores score_images(const FeatureExtractor& features, const FeatureHead& head,
                         const ::torch::Tensor& images, const ::torch::Tensor& labels,
                         std::int64_t batch) {
  check_images(images, batch);
  check_labels(images, labels);
  std::vector<::torch::Tensor> parts;
  double right = 0;
  std::int64_t width = -1, classes = -1;
  for_each_slice(images, batch, [&](std::int64_t begin, const ::torch::Tensor& slice) {
    const std::int64_t rows = slice.size(0);
    const ::torch::Tensor f = checked_output(features(slice), rows, width, "features");
    right +=
        correct(checked_output(head(f), rows, classes, "logits"), labels.narrow(0, begin, rows));
    parts.push_back(f.to(::torch::kCPU, ::torch::kDouble));
  });
  return {::torch::cat(parts), right / static_cast<double>(images.size(0))};
}

LabelledImages trivial_generator(const ::torch::Tensor& images, const ::torch::Tensor& labels,
                                 std::int64_t classes, std::int64_t n, std::uint64_t seed) {
  if (n < 0) throw InvalidArgument("the trivial generator needs n >= 0, got " + std::to_string(n));
  if (classes < 1) {
    throw InvalidArgument("the trivial generator needs classes >= 1, got " +
                          std::to_string(classes));
  }
  check_images(images, 1);
  check_labels(images, labels);
  const bool bytes = images.scalar_type() == ::torch::kByte;
  if ((!bytes && !images.is_floating_point()) || !images.device().is_cpu()) {
    throw InvalidArgument(std::string("the trivial generator needs uint8 or floating images on "
                                      "the CPU, got ") +
                          c10::toString(images.scalar_type()) + " on " + images.device().str());
  }
  const ::torch::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  std::vector<std::int64_t> shape = images.sizes().vec();
  shape[0] = n;
  LabelledImages out{::torch::empty(shape, images.options()),
                     ::torch::arange(n, ::torch::kLong).remainder(classes)};
  for (std::int64_t c = 0; c < classes; ++c) {
    const ::torch::Tensor rows = labels.eq(c).nonzero().squeeze(1);
    if (rows.numel() == 0) {
      throw InvalidArgument("the trivial generator needs images of every class; class " +
                            std::to_string(c) + " has none");
    }
    if (c >= n) continue;
    const ::torch::Tensor pixels = images.index_select(0, rows).to(::torch::kDouble);
    const ::torch::Tensor mean = pixels.mean(0);
    const ::torch::Tensor deviation = (pixels - mean).square().mean(0).sqrt();
    const ::torch::Tensor targets = ::torch::arange(c, n, classes, ::torch::kLong);
    shape[0] = targets.numel();
    ::torch::Tensor drawn = mean + deviation * at::randn(shape, generator, ::torch::kDouble);
    if (bytes) drawn = drawn.round().clamp(0, 255);
    out.images.index_copy_(0, targets, drawn.to(images.scalar_type()));
  }
  return out;
}

}  // namespace replicator::torch
