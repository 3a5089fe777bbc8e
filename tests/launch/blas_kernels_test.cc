// Tests of the choice of OpenBLAS kernels (replicator/launch/blas_kernels.h). This test program
// links no BLAS: choose_blas_kernels() must then leave the process and its environment alone. What
// a process that loads OpenBLAS does is checked through `replicator` itself (blas_choice.sh).
#include "replicator/launch/blas_kernels.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

using replicator::launch::better_openblas_core;
using replicator::launch::CpuFeatures;

constexpr CpuFeatures kAvx512{.avx2_fma = true, .avx512 = true};
constexpr CpuFeatures kAvx2{.avx2_fma = true, .avx512 = false};
constexpr CpuFeatures kOld{};

TEST(BetterOpenBlasCore, TheFallbackCoreGetsWhatTheCpuRuns) {
  EXPECT_EQ(better_openblas_core("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Prescott", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Sandybridge", kAvx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Haswell", kAvx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Zen", kAvx512), "SkylakeX") << "AVX2 kernels on an AVX-512 CPU";
  EXPECT_EQ(better_openblas_core("SomeFutureCore", kAvx2), "Haswell") << "an unknown name";
}

TEST(BetterOpenBlasCore, NothingWhenTheKernelsAreAlreadyAsGood) {
  EXPECT_EQ(better_openblas_core("SkylakeX", kAvx512), "");
  EXPECT_EQ(better_openblas_core("COOPERLAKE", kAvx512), "") << "any case";
  EXPECT_EQ(better_openblas_core("sapphirerapids", kAvx512), "");
  EXPECT_EQ(better_openblas_core("Haswell", kAvx2), "");
  EXPECT_EQ(better_openblas_core("Zen", kAvx2), "");
  EXPECT_EQ(better_openblas_core("Excavator", kAvx2), "");
  EXPECT_EQ(better_openblas_core("Prescott", kOld), "") << "a CPU without AVX2";
}

TEST(ChooseBlasKernels, WithoutOpenBlasReturnsAndSetsNothing) {
  ::unsetenv("OPENBLAS_CORETYPE");
  char name[] = "blas_test";
  char* argv[] = {name, nullptr};
  replicator::launch::choose_blas_kernels(argv);  // an exec would end this test here
  EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr);
  EXPECT_EQ(replicator::launch::blas_description(), "BLAS without openblas_get_corename");
}

}  // namespace
