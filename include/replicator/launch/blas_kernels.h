// Which kernels the BLAS behind LibTorch's matrix products runs.
//
// The torch wheel's LibTorch (the project's, cmake/torch.cmake) carries MKL inside
// libtorch_cpu.so: nothing here applies to it, and blas_description() names its version. A
// LibTorch built against libblas.so.3 (Debian's libtorch-dev) does its matrix products
// through whatever that points at, OpenBLAS where the install script's package is. OpenBLAS
// chooses its
// kernels from the CPU's model number when it loads; a model it does not know (a virtual
// machine's "Intel Xeon Processor", or a CPU newer than the release) gets its oldest x86-64
// kernels, Prescott's SSE3, 2-3 times slower than the AVX2 or AVX-512 ones the CPU runs.
// OPENBLAS_CORETYPE overrides the choice, but only before the library loads.
#pragma once

#include <string>
#include <string_view>

namespace replicator::launch {

struct CpuFeatures {
  bool avx2_fma = false;  // AVX2 and FMA
  bool avx512 = false;    // AVX-512 F, CD, BW, DQ and VL
};

// What this CPU can run (cpuid).
CpuFeatures this_cpu();

// The OPENBLAS_CORETYPE that gives a CPU with `cpu` faster kernels than those of `core`
// (what openblas_get_corename() reported): "SkylakeX" with AVX-512, "Haswell" with AVX2 and
// FMA; "" when `core` already uses them (or the CPU has neither).
std::string better_openblas_core(std::string_view core, CpuFeatures cpu);

// Called first in main(): when libblas.so.3 is OpenBLAS and OPENBLAS_NUM_THREADS is not set,
// sets it to 1 (the replicas and LibTorch are the parallelism; OpenBLAS's own threads would
// only compete with them); when OpenBLAS runs kernels below what this CPU can and
// OPENBLAS_CORETYPE is not set, sets it to better_openblas_core(); if either was set, re-executes
// /proc/self/exe with the same arguments (does not return; the variables stay set for the
// processes it starts, mpirun's ranks and benchmark peers alike, which then load the same
// BLAS at once). Otherwise returns at once. Such a process loads its libraries twice
// (three times with the train jobs' memory setting, which re-executes too). Not for a
// process started through the dynamic loader by hand (`ld.so replicator ...`), whose
// /proc/self/exe is the loader: set both variables there. Never throws; if the exec fails
// the process goes on with the BLAS as it is, and the variables it set are unset again.
void choose_blas_kernels(char** argv);

// "OpenBLAS <core>" (the kernels in use), "MKL <version>" (the wheel's LibTorch), or "BLAS
// without openblas_get_corename" for another BLAS (Debian's reference BLAS, for example).
std::string blas_description();

}  // namespace replicator::launch
