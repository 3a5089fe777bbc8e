#include "src/torch/batch_norm_kernels.h"

#include <algorithm>

// Each kernel is compiled three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the
// baseline (SSE2), and the loader picks the widest the CPU has. The loops stream their
// operands once, so on one core they are bound by how many lanes an instruction covers as
// much as by memory: the wider builds move 1.5-2x the bytes per second of the baseline on a
// channels-last pass. Not under ThreadSanitizer: the loader runs the clones' resolver while
// it relocates the program, before the sanitizer's runtime is up, and the instrumented
// resolver crashes there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define REPLICATOR_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define REPLICATOR_KERNEL
#endif

namespace replicator::torch::detail {
namespace {

// Channels last: the n·s rows of c channels, one after another.
std::int64_t rows(Shape shape) { return shape.n * shape.s; }

// Channels last, two sums per channel: ta[c] += a, tb[c] += b for (a, b) = terms(i, c) over
// every element i of channel c. A row-at-a-time loop over all c channels keeps 2·c running
// sums in memory, a load and a store per sum and element. Instead, blocks of kBlock channels
// keep their 2·kBlock sums in registers (16 doubles each: two AVX-512 or four AVX2 registers)
// while they walk the rows, and the rows go in chunks of kChunkBytes so that the chunk the
// first block brought into the L1 cache (at least 32 KiB on x86-64) is still there for the
// others. The order of the additions depends only on the shape: the sums are the same bits
// from run to run.
constexpr std::int64_t kBlock = 16;
constexpr std::int64_t kChunkBytes = std::int64_t{16} << 10;

template <class Terms>
[[gnu::always_inline]] inline void channels_last_sums(Shape shape, Terms terms, double* ta,
                                                      double* tb) {
  const std::int64_t n_rows = rows(shape), c = shape.c;
  std::fill(ta, ta + c, 0.0);
  std::fill(tb, tb + c, 0.0);
  const std::int64_t chunk =
      std::max<std::int64_t>(1, kChunkBytes / (c * static_cast<std::int64_t>(sizeof(float))));
  for (std::int64_t r0 = 0; r0 < n_rows; r0 += chunk) {
    const std::int64_t r1 = std::min(n_rows, r0 + chunk);
    std::int64_t c0 = 0;
    for (; c0 + kBlock <= c; c0 += kBlock) {
      double sa[kBlock] = {}, sb[kBlock] = {};
      for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t base = r * c + c0;
#pragma omp simd
        for (std::int64_t j = 0; j < kBlock; ++j) {
          const auto [a, b] = terms(base + j, c0 + j);
          sa[j] += a;
          sb[j] += b;
        }
      }
#pragma omp simd
      for (std::int64_t j = 0; j < kBlock; ++j) {
        ta[c0 + j] += sa[j];
        tb[c0 + j] += sb[j];
      }
    }
    if (c0 == c) continue;
    for (std::int64_t r = r0; r < r1; ++r) {
#pragma omp simd
      for (std::int64_t j = c0; j < c; ++j) {
        const auto [a, b] = terms(r * c + j, j);
        ta[j] += a;
        tb[j] += b;
      }
    }
  }
}

struct Pair {
  double a, b;
};

}  // namespace

REPLICATOR_KERNEL
void shifted_channel_sums(const float* x, Shape shape, const float* shift, double* sum,
                          double* sumsq) {
  if (shape.channels_last) {
    channels_last_sums(
        shape,
        [&](std::int64_t i, std::int64_t c) {
          const double d = static_cast<double>(x[i]) - shift[c];
          return Pair{d, d * d};
        },
        sum, sumsq);
    return;
  }
  std::fill(sum, sum + shape.c, 0.0);
  std::fill(sumsq, sumsq + shape.c, 0.0);
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

REPLICATOR_KERNEL
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

REPLICATOR_KERNEL
void gradient_sums(const float* dy, const float* x, Shape shape, const float* center,
                   double* sum_dy, double* sum_dy_centered) {
  if (shape.channels_last) {
    channels_last_sums(
        shape,
        [&](std::int64_t i, std::int64_t c) {
          const double g = dy[i];
          return Pair{g, g * (static_cast<double>(x[i]) - center[c])};
        },
        sum_dy, sum_dy_centered);
    return;
  }
  std::fill(sum_dy, sum_dy + shape.c, 0.0);
  std::fill(sum_dy_centered, sum_dy_centered + shape.c, 0.0);
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

REPLICATOR_KERNEL
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
