"""``import replicator.torch`` registers the torch.distributed backend ``"replicator"``.

    import torch.distributed as dist
    import replicator.torch  # noqa: F401
    dist.init_process_group("replicator")          # or "cpu:replicator,cuda:nccl"

Under torchrun (or ``replicator launch``) the processes meet in the c10d store that
init_process_group makes; nothing else is configured. Every collective is replicator's:
checked on every rank (a mismatch raises CollectiveMismatch on every rank, naming both
calls and their Python lines), the same bits on every run and layout, and a failed or
killed rank releases the others (Aborted, PeerLost) instead of leaving them to the
timeout. ``REPLICATOR_TRACE_DIR`` and ``REPLICATOR_TIMELINE`` work as for C++ jobs.
"""

import atexit

import torch.distributed as dist

from replicator import _replicator

BACKEND = "replicator"


def _create(store, rank, size, timeout):
    return _replicator._create_backend(store, rank, size, timeout)


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
    # A process group still alive at exit (no destroy_process_group, or a backend object
    # kept) stops here, while its thread can still hand tensors back to Python.
    atexit.register(_replicator._stop_backends)
