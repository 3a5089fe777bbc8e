// LibTorch's CPU kernels on several threads of one process.
//
// The MKL inside the torch wheel's LibTorch sets up each of its routines at the routine's
// first call, and a thread whose first calls race with another's may get a wrong kernel
// for good (a tanh off by 7e-5, seen in about one run in twenty): its replica then rounds
// differently from the others, and the job's bits depend on timing. A Replicator with more
// than one local replica calls prepare_cpu_kernels() itself before its threads start, once
// per process (when the program links the torch layer's collectives, as every user of
// ReplicatedOptimizer, CrossReplicaBatchNorm or the tensor collectives does). Call it
// yourself before starting threads of your own that run LibTorch (actor threads, for
// example); the train jobs do.
#pragma once

#include <string>

namespace replicator::torch {

// Makes the first call of every MKL routine LibTorch's CPU kernels reach (matrix products,
// batched and matrix-vector; the vector math of tanh, exp, log and the other elementwise
// functions), in float32 and float64, on the calling thread, the first time it is called in
// the process; later calls wait for that one and return. Blocks for about a millisecond;
// does nothing visible with a LibTorch built without MKL. Throws what LibTorch throws
// (nothing is expected; after a throw the next call tries again).
void prepare_cpu_kernels();

// What the bits of this process's CPU computations depend on besides their inputs and
// shapes, as far as LibTorch tells: its intra-op threads, its version, the CPU code branch
// its kernels dispatch to (ATEN_CPU_CAPABILITY can lower it) and MKL's branch where
// MKL_CBWR sets one; e.g. "intra-op threads 1, LibTorch 2.15.0, CPU kernels AVX2". Two
// processes that print the same text run the same kernels the same way. Never blocks;
// throws nothing expected.
std::string kernel_conditions();

}  // namespace replicator::torch
