#include "replicator/launch/blas_kernels.h"

#include <dlfcn.h>

#include <array>
#include <cctype>
#include <cstdlib>
#include <string>

#include "replicator/launch/subprocess.h"

namespace replicator::launch {
namespace {

using CoreName = char* (*)();

CoreName openblas_corename() {
  return reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
}

}  // namespace

CpuFeatures this_cpu() {
  __builtin_cpu_init();
  CpuFeatures cpu;
  cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
  return cpu;
}

std::string better_openblas_core(std::string_view core, CpuFeatures cpu) {
  // OpenBLAS's x86-64 cores with AVX-512 kernels, and with AVX2 ones (names as
  // openblas_get_corename() spells them, in any case).
  constexpr std::array<std::string_view, 3> kAvx512 = {"skylakex", "cooperlake", "sapphirerapids"};
  constexpr std::array<std::string_view, 3> kAvx2 = {"haswell", "zen", "excavator"};
  std::string lower(core);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto among = [&](const auto& names) {
    for (const std::string_view name : names) {
      if (lower == name) return true;
    }
    return false;
  };
  if (among(kAvx512)) return "";
  if (cpu.avx512) return "SkylakeX";
  if (among(kAvx2)) return "";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

// Called first in main(), before any thread starts: the environment is this process's alone.
// NOLINTBEGIN(concurrency-mt-unsafe)
void choose_blas_kernels(char** argv) {
  const CoreName corename = openblas_corename();
  if (corename == nullptr) return;
  const bool threads_set = std::getenv("OPENBLAS_NUM_THREADS") != nullptr;
  const bool core_set = std::getenv("OPENBLAS_CORETYPE") != nullptr;  // the user's, or ours
  const std::string better = core_set ? "" : better_openblas_core(corename(), this_cpu());
  if (threads_set && better.empty()) return;
  if (!threads_set) ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  if (!better.empty()) ::setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  launch::exec_self(argv);
  // Still here: the exec failed. Leave the environment as it was, so that the processes this
  // one starts run the BLAS as it does.
  if (!threads_set) ::unsetenv("OPENBLAS_NUM_THREADS");
  if (!better.empty()) ::unsetenv("OPENBLAS_CORETYPE");
}
// NOLINTEND(concurrency-mt-unsafe)

std::string blas_description() {
  const CoreName corename = openblas_corename();
  if (corename != nullptr) return std::string("OpenBLAS ") + corename();
  // The torch wheel's libtorch_cpu.so carries MKL and exports its version query.
  using MklVersion = void (*)(char*, int);
  const auto mkl = reinterpret_cast<MklVersion>(::dlsym(RTLD_DEFAULT, "MKL_Get_Version_String"));
  if (mkl != nullptr) {
    char text[256] = {};
    mkl(text, sizeof text - 1);
    const std::string full = text;
    const std::size_t at = full.find("Version ");
    if (at == std::string::npos) return "MKL";
    const std::size_t end = full.find_first_of(" -", at + 8);
    return "MKL " + full.substr(at + 8, end == std::string::npos ? end : end - at - 8);
  }
  return "BLAS without openblas_get_corename";
}

}  // namespace replicator::launch
