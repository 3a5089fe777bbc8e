// Tests of the choice of OpenBLAS kernels (apps/blas.h).
#include "apps/blas.h"

#include <gtest/gtest.h>

namespace {

using replicator::apps::better_openblas_core;
using replicator::apps::CpuFeatures;

constexpr CpuFeatures kAvx512{.avx2_fma = true, .avx512 = true};
constexpr CpuFeatures kAvx2{.avx2_fma = true, .avx512 = false};
constexpr CpuFeatures kOld{};

TEST(BetterOpenBlasCore, TheFallbackCoreGetsWhatTheCpuRuns) {
  EXPECT_EQ(better_openblas_core("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Prescott", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Sandybridge", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Haswell", kAvx512), "SkylakeX");
}

TEST(BetterOpenBlasCore, NothingWhenTheKernelsAreAlreadyAsGood) {
  EXPECT_EQ(better_openblas_core("SkylakeX", kAvx512), "");
  EXPECT_EQ(better_openblas_core("COOPERLAKE", kAvx512), "") << "any case";
  EXPECT_EQ(better_openblas_core("Haswell", kAvx2), "");
  EXPECT_EQ(better_openblas_core("Zen", kAvx2), "");
  EXPECT_EQ(better_openblas_core("Prescott", kOld), "") << "a CPU without AVX2";
}

TEST(BlasDescription, NamesTheLibrary) {
  // This test links no BLAS of its own: whatever is loaded, the text says which.
  EXPECT_FALSE(replicator::apps::blas_description().empty());
}

}  // namespace
