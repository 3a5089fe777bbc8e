// main() of torch_tests: replica threads must not compete for LibTorch's intra-op threads
// (the machine's cores are shared), so every test runs with one.
#include <gtest/gtest.h>
#include <torch/torch.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);
  return RUN_ALL_TESTS();
}
