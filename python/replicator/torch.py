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

The backend records every collective in replicator's own flight recorder (the last 256 per
rank, with their Python lines; dumped on a failure and on SIGUSR1 into
``REPLICATOR_TRACE_DIR``, read by ``replicator diagnose``), so torch's generic recorder hook
(``TORCH_FR_BUFFER_SIZE``), which would record each call a second time and keep a Python
traceback of it, is not attached to groups served by this backend alone. Set
``REPLICATOR_TORCH_FLIGHT_RECORDER=on`` before the import to have torch's as well.
"""

import atexit
import os

import torch.distributed as dist

from replicator import _replicator

BACKEND = "replicator"


def _create(store, rank, size, timeout):
    return _replicator._create_backend(store, rank, size, timeout)


def _records_itself():
    """Tells torch.distributed that groups on this backend alone need no recorder hook."""
    if os.environ.get("REPLICATOR_TORCH_FLIGHT_RECORDER", "off") in ("on", "1", "true"):
        return
    # torch 2.15 keeps the backends that record themselves in this set; where it has none,
    # nothing changes.
    from torch.distributed import distributed_c10d

    recording = getattr(distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if isinstance(recording, set):
        recording.add(BACKEND)


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
    # A process group still alive at exit (no destroy_process_group, or a backend object
    # kept) stops here, while its thread can still hand tensors back to Python.
    atexit.register(_replicator._stop_backends)
    _records_itself()
