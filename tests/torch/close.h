// Tensor comparison of the torch tests: same shape and dtype, and torch::allclose with
// relative 1e-5 and absolute 1e-6 (the tolerance the LibTorch layer's contract is
// tested to).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace replicator::testing {

inline ::testing::AssertionResult close(const ::torch::Tensor& actual,
                                        const ::torch::Tensor& expected) {
  if (!actual.defined() || !expected.defined()) {
    return ::testing::AssertionFailure() << "undefined tensor (actual " << actual.defined()
                                         << ", expected " << expected.defined() << ")";
  }
  if (actual.sizes() != expected.sizes() || actual.scalar_type() != expected.scalar_type()) {
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << " " << actual.dtype() << ", expected "
           << expected.sizes() << " " << expected.dtype();
  }
  if (!::torch::allclose(actual, expected, 1e-5, 1e-6)) {
    return ::testing::AssertionFailure()
           << "max |difference| "
           << (actual - expected).abs().max().to(::torch::kFloat64).item<double>()
           << ", max |expected| " << expected.abs().max().to(::torch::kFloat64).item<double>();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace replicator::testing
