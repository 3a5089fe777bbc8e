#include "src/torch/batch_norm_kernels.h"

#include <algorithm>

namespace replicator::torch::detail {
namespace {

// Channels last: the n·s rows of c channels, one after another.
std::int64_t rows(Shape shape) { return shape.n * shape.s; }

}  // namespace

void shifted_channel_sums(const float* x, Shape shape, const float* shift, double* sum,
                          double* sumsq) {
  std::fill(sum, sum + shape.c, 0.0);
  std::fill(sumsq, sumsq + shape.c, 0.0);
  if (shape.channels_last) {
    for (std::int64_t r = 0; r < rows(shape); ++r) {
      const float* row = x + r * shape.c;
#pragma omp simd
      for (std::int64_t c = 0; c < shape.c; ++c) {
        const double d = static_cast<double>(row[c]) - shift[c];
        sum[c] += d;
        sumsq[c] += d * d;
      }
    }
    return;
  }
  for (std::int64_t i = 0; i < shape.n; ++i) {
    for (std::int64_t c = 0; c < shape.c; ++c) {
      const float* row = x + (i * shape.c + c) * shape.s;
      const double k = shift[c];
      double s = 0, q = 0;
#pragma omp simd reduction(+ : s, q)
      for (std::int64_t j = 0; j < shape.s; ++j) {
        const double d = row[j] - k;
        s += d;
        q += d * d;
      }
      sum[c] += s;
      sumsq[c] += q;
    }
  }
}

void channel_affine(const float* x, Shape shape, const float* scale, const float* offset,
                    float* y) {
  if (shape.channels_last) {
    for (std::int64_t r = 0; r < rows(shape); ++r) {
      const std::int64_t base = r * shape.c;
#pragma omp simd
      for (std::int64_t c = 0; c < shape.c; ++c) y[base + c] = x[base + c] * scale[c] + offset[c];
    }
    return;
  }
  for (std::int64_t i = 0; i < shape.n; ++i) {
    for (std::int64_t c = 0; c < shape.c; ++c) {
      const std::int64_t base = (i * shape.c + c) * shape.s;
      const float a = scale[c], b = offset[c];
#pragma omp simd
      for (std::int64_t j = 0; j < shape.s; ++j) y[base + j] = x[base + j] * a + b;
    }
  }
}

void gradient_sums(const float* dy, const float* x, Shape shape, const float* center,
                   double* sum_dy, double* sum_dy_centered) {
  std::fill(sum_dy, sum_dy + shape.c, 0.0);
  std::fill(sum_dy_centered, sum_dy_centered + shape.c, 0.0);
  if (shape.channels_last) {
    for (std::int64_t r = 0; r < rows(shape); ++r) {
      const std::int64_t base = r * shape.c;
#pragma omp simd
      for (std::int64_t c = 0; c < shape.c; ++c) {
        const double g = dy[base + c];
        sum_dy[c] += g;
        sum_dy_centered[c] += g * (static_cast<double>(x[base + c]) - center[c]);
      }
    }
    return;
  }
  for (std::int64_t i = 0; i < shape.n; ++i) {
    for (std::int64_t c = 0; c < shape.c; ++c) {
      const std::int64_t base = (i * shape.c + c) * shape.s;
      const double m = center[c];
      double s = 0, q = 0;
#pragma omp simd reduction(+ : s, q)
      for (std::int64_t j = 0; j < shape.s; ++j) {
        const double g = dy[base + j];
        s += g;
        q += g * (x[base + j] - m);
      }
      sum_dy[c] += s;
      sum_dy_centered[c] += q;
    }
  }
}

void input_gradient(const float* dy, const float* x, Shape shape, const float* a, const float* b,
                    const float* k, float* dx) {
  if (shape.channels_last) {
    for (std::int64_t r = 0; r < rows(shape); ++r) {
      const std::int64_t base = r * shape.c;
#pragma omp simd
      for (std::int64_t c = 0; c < shape.c; ++c) {
        dx[base + c] = dy[base + c] * a[c] + x[base + c] * b[c] + k[c];
      }
    }
    return;
  }
  for (std::int64_t i = 0; i < shape.n; ++i) {
    for (std::int64_t c = 0; c < shape.c; ++c) {
      const std::int64_t base = (i * shape.c + c) * shape.s;
      const float ac = a[c], bc = b[c], kc = k[c];
#pragma omp simd
      for (std::int64_t j = 0; j < shape.s; ++j) {
        dx[base + j] = dy[base + j] * ac + x[base + j] * bc + kc;
      }
    }
  }
}

}  // namespace replicator::torch::detail
