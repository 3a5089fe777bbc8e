// main() of torch_tests: replica threads must not compete for LibTorch's intra-op threads
// (the machine's cores are shared), so every test runs with one. at::set_num_threads sets
// the calling thread's OpenMP team size only; the replica threads take libgomp's global
// value, which it reads from OMP_NUM_THREADS when it loads. So the program runs itself
// again with OMP_NUM_THREADS=1 unless it has it: otherwise each replica thread's kernels
// run in teams of as many threads as cores, whose synchronisation inside the uninstrumented
// libgomp ThreadSanitizer cannot see. Under ThreadSanitizer the tests also run without
// oneDNN: its primitive cache, shared by the replica threads' convolutions, publishes its
// entries through synchronisation inside the uninstrumented libtorch_cpu, and TSan reports
// the cache's key comparisons as races (the tests are of our code, on ATen's own kernels).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

int main(int argc, char** argv) {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp == nullptr || std::string_view(omp) != "1") {
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::execv("/proc/self/exe", argv);
    std::perror("torch_tests: running itself with OMP_NUM_THREADS=1");
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
#if defined(__SANITIZE_THREAD__)
  at::globalContext().setUserEnabledMkldnn(false);
#endif
  return RUN_ALL_TESTS();
}
