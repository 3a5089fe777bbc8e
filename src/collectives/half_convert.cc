#include "src/collectives/half_convert.h"

#include <bit>
#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace replicator::detail {

namespace {

// bf16 <-> f32 is bit shuffling.
void to_float_scalar(const bfloat16* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = std::bit_cast<float>(std::uint32_t{in[i].bits} << 16);
}

void from_float_scalar(const float* in, bfloat16* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i].bits = bfloat16::from_float(in[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void to_float_avx2(const bfloat16* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
  }
  to_float_scalar(in + i, out + i, n - i);
}

// Round to nearest even: add 0x7fff plus the lowest kept bit, keep the top half; NaNs
// become quiet NaNs (as bfloat16::from_float).
__attribute__((target("avx2"))) void from_float_avx2(const float* in, bfloat16* out,
                                                     std::size_t n) {
  std::size_t i = 0;
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
    const __m256i nan_bits = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, nan_bits, is_nan);
    // Pack the low 16 bits of 8 lanes: packus works per 128-bit half, then fix the order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  from_float_scalar(in + i, out + i, n - i);
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2");

__attribute__((target("avx,f16c"))) void to_float_f16c(const float16* in, float* out,
                                                       std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = float16::to_float(in[i].bits);
}

__attribute__((target("avx,f16c"))) void from_float_f16c(const float* in, float16* out,
                                                         std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i].bits = float16::from_float(in[i]);
}

// F16C from cpuid itself: clang 14's __builtin_cpu_supports does not know "f16c" (the fuzz
// build compiles this file with clang). F16C uses the AVX registers, which "avx" checks the
// operating system saves.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

const bool kHasF16c = cpu_has_f16c() && __builtin_cpu_supports("avx");
#endif

}  // namespace

void to_float(const bfloat16* in, float* out, std::size_t n) {
#if defined(__x86_64__)
  if (kHasAvx2) return to_float_avx2(in, out, n);
#endif
  to_float_scalar(in, out, n);
}

void from_float(const float* in, bfloat16* out, std::size_t n) {
#if defined(__x86_64__)
  if (kHasAvx2) return from_float_avx2(in, out, n);
#endif
  from_float_scalar(in, out, n);
}

void to_float(const float16* in, float* out, std::size_t n) {
#if defined(__x86_64__)
  if (kHasF16c) return to_float_f16c(in, out, n);
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = float16::to_float(in[i].bits);
}

void from_float(const float* in, float16* out, std::size_t n) {
#if defined(__x86_64__)
  if (kHasF16c) return from_float_f16c(in, out, n);
#endif
  for (std::size_t i = 0; i < n; ++i) out[i].bits = float16::from_float(in[i]);
}

}  // namespace replicator::detail
