// The first calls of MKL's routines, on one thread (cpu_kernels.h).
//
// MKL (inside the torch wheel's LibTorch) sets itself up at the first call of each of its
// routines, and that setup races with other threads' calls: with two threads making their
// first matrix products and tanh at once, about one run in twenty gave one of them a tanh
// wrong by 7e-5, and the D4PG learner's bits then differed between 1x2 threads and 2
// processes. So one thread makes a first call of every MKL routine LibTorch's CPU kernels
// reach (matrix products, batched, matrix-vector; the vector math behind the elementwise
// functions), in both float widths, before the others start.
#include "replicator/torch/cpu_kernels.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace replicator::torch {

namespace {

void first_calls() {
  const ::torch::NoGradGuard no_grad;
  for (const c10::ScalarType type : {::torch::kFloat32, ::torch::kFloat64}) {
    const auto options = ::torch::TensorOptions().dtype(type);
    const ::torch::Tensor a = ::torch::full({8, 32}, 0.5, options);
    const ::torch::Tensor b = ::torch::full({32, 32}, 0.25, options);
    (void)::torch::mm(a, b);
    (void)::torch::mm(a.t(), a);
    (void)::torch::mv(b, a[0]);
    (void)::torch::bmm(a.view({2, 4, 32}), b.expand({2, 32, 32}));
    (void)::torch::bmm(b.expand({4, 32, 32}), a.view({4, 32, 2}).narrow(2, 0, 1));
    const ::torch::Tensor x = a.flatten();
    for (auto* f : {&::torch::tanh, &::torch::exp, &::torch::log, &::torch::sqrt, &::torch::sin,
                    &::torch::cos, &::torch::tan, &::torch::erf, &::torch::erfc, &::torch::acos,
                    &::torch::asin, &::torch::atan, &::torch::log10, &::torch::log2,
                    &::torch::trunc, &::torch::erfinv}) {
      (void)(*f)(x);
    }
  }
}

}  // namespace

void prepare_cpu_kernels() {
  // The setup is the process's: the first caller does it (the Replicator's hook, a job, the
  // Python module), the others wait for it and return.
  static std::once_flag once;
  std::call_once(once, first_calls);
}

std::string kernel_conditions() {
  std::string text = "intra-op threads ";
  text += std::to_string(at::get_num_threads());
  text += ", LibTorch ";
  text += std::to_string(TORCH_VERSION_MAJOR) + '.' + std::to_string(TORCH_VERSION_MINOR) + '.' +
          std::to_string(TORCH_VERSION_PATCH);
  text += ", CPU kernels ";
  text += at::get_cpu_capability();
  if (const char* mkl = std::getenv("MKL_CBWR"); mkl != nullptr && *mkl != '\0') {
    text += ", MKL_CBWR=";
    text += mkl;
  }
  return text;
}

}  // namespace replicator::torch
