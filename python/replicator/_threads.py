"""Replica threads: Replicator, ReplicaContext and PerReplica over the extension module."""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, List, Optional, TypeVar

import numpy as np
import torch

from replicator import _replicator

T = TypeVar("T")
_OPS = ("sum", "mean", "min", "max", "prod")


class PerReplica(Generic[T]):
    """One value per local replica, indexed by local replica id (what ``run`` returns)."""

    def __init__(self, values: List[T]):
        self._values = list(values)

    def __getitem__(self, local_replica: int) -> T:
        return self._values[local_replica]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[T]:
        return iter(self._values)

    def __repr__(self) -> str:
        return f"PerReplica({self._values!r})"


def _tensor(data: Any) -> torch.Tensor:
    if isinstance(data, torch.Tensor):
        return data
    if isinstance(data, np.ndarray):
        if not data.flags.writeable:
            raise _replicator.InvalidArgument("a collective's numpy array must be writeable")
        return torch.from_numpy(data)  # shares the array's memory: in-place calls write it
    raise _replicator.InvalidArgument(
        f"collectives take torch tensors or numpy arrays, not {type(data).__name__}")


def _like(result: torch.Tensor, data: Any) -> Any:
    return result.numpy() if isinstance(data, np.ndarray) else result


class ReplicaContext:
    """The replica a step runs as, and its collectives (valid during the step only).

    Every collective blocks until all replicas made the same call, and raises
    CollectiveMismatch on every replica when they did not (naming each side's call and
    Python line), Timeout past the deadline (``timeout`` in seconds, else the Replicator's),
    and Aborted or PeerLost when another replica or process failed. Tensors are CPU tensors
    of float32, float64, bfloat16, float16, int32, int64 or uint8; numpy arrays of those
    dtypes work the same (in-place calls write into the array).
    """

    def __init__(self, ctx: Any):
        self._ctx = ctx

    @property
    def replica_id(self) -> int:
        return self._ctx.replica_id

    @property
    def num_replicas(self) -> int:
        return self._ctx.num_replicas

    @property
    def local_replica_id(self) -> int:
        return self._ctx.local_replica_id

    @property
    def num_local_replicas(self) -> int:
        return self._ctx.num_local_replicas

    def all_reduce(self, data: Any, op: str = "sum", timeout: Optional[float] = None) -> Any:
        """Combines ``data`` over all replicas with ``op`` (sum, mean, min, max, prod), in
        place; returns ``data``. A list or tuple of tensors (or arrays; dtypes may differ) is
        one fused collective over all of them, with no copy of the contiguous ones: a
        model's gradients in one call."""
        if isinstance(data, (list, tuple)):
            self._ctx.all_reduce_many([_tensor(d) for d in data], op, timeout)
        else:
            self._ctx.all_reduce(_tensor(data), op, timeout)
        return data

    def broadcast(self, data: Any, root: int = 0, timeout: Optional[float] = None) -> Any:
        """Copies replica ``root``'s ``data`` into ``data`` on every replica; returns it."""
        self._ctx.broadcast(_tensor(data), root, timeout)
        return data

    def all_gather(self, data: Any, timeout: Optional[float] = None) -> Any:
        """A new [R, *shape] tensor (or array): row r is replica r's ``data``."""
        return _like(self._ctx.all_gather(_tensor(data), timeout), data)

    def reduce_scatter(self, data: Any, op: str = "sum", timeout: Optional[float] = None) -> Any:
        """``data`` has R*k rows; returns this replica's k rows of the reduction."""
        return _like(self._ctx.reduce_scatter(_tensor(data), op, timeout), data)

    def all_to_all(self, data: Any, timeout: Optional[float] = None) -> Any:
        """``data`` has R*k rows; block j goes to replica j; returns the blocks received,
        block r from replica r."""
        return _like(self._ctx.all_to_all(_tensor(data), timeout), data)

    def barrier(self, timeout: Optional[float] = None) -> None:
        """Returns once every replica has called barrier."""
        self._ctx.barrier(timeout)


class Replicator:
    """Runs one replica's step on every replica: threads of this process and, with engine
    ``mpi`` or ``gloo``, the other processes of the job.

    Options are Config's, by name (``local_replicas=2``, ``timeout="30s"``,
    ``engine="gloo"``, ``store="file:///tmp/job"``, ``rank=0``, ``world_size=2``, ...), over the
    ``REPLICATOR_*`` environment variables. Raises ConfigError on a bad option. Construction
    blocks while the processes of a job meet.
    """

    def __init__(self, **options: Any):
        self._impl = _replicator.Replicator(**options)

    @property
    def num_replicas(self) -> int:
        return self._impl.num_replicas

    @property
    def num_local_replicas(self) -> int:
        return self._impl.num_local_replicas

    def run(self, step: Callable[[ReplicaContext], T]) -> PerReplica[T]:
        """Calls ``step(ctx)`` on every local replica's thread, blocks until all return, and
        returns their results. The GIL is released inside collectives and torch's kernels,
        so replicas compute at once. If a step raises, the others are released from their
        collectives and run raises that error."""
        return PerReplica(self._impl.run(lambda ctx: step(ReplicaContext(ctx))))

    def reduce(self, op: str, values: PerReplica) -> float:
        """Combines one number per local replica over all replicas of the job with ``op``
        (sum, mean, min, max, prod; float64, in the collectives' fixed order)."""
        if op not in _OPS:
            raise _replicator.InvalidArgument(f"reduce op '{op}' is not one of {', '.join(_OPS)}")
        return self._impl.reduce(op, [float(v) for v in values])
