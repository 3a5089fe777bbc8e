"""replicator: SPMD replicas with collectives checked on every replica.

Two ways in from Python:

* ``import replicator.torch`` registers the torch.distributed backend ``"replicator"``:
  ``torch.distributed.init_process_group("replicator")`` under torchrun or
  ``replicator launch`` (see docs/python.md).
* ``Replicator(local_replicas=2).run(step)`` runs ``step(ctx)`` on replica threads of this
  process (and of the other processes of a job), with ``ctx``'s collectives on torch tensors
  and numpy arrays.

Errors are the classes below, all subclasses of :class:`ReplicatorError` (a RuntimeError).
"""

import torch  # noqa: F401  (the extension module links against the torch it was built for)

from replicator import _replicator
from replicator._replicator import (  # noqa: F401
    Aborted,
    CollectiveMismatch,
    ConfigError,
    DataError,
    InvalidArgument,
    PeerLost,
    ReplicaFailed,
    ReplicatorError,
    StoreError,
    Timeout,
)
from replicator._threads import PerReplica, ReplicaContext, Replicator  # noqa: F401

__all__ = [
    "Aborted",
    "CollectiveMismatch",
    "ConfigError",
    "DataError",
    "InvalidArgument",
    "PeerLost",
    "PerReplica",
    "ReplicaContext",
    "ReplicaFailed",
    "Replicator",
    "ReplicatorError",
    "StoreError",
    "Timeout",
]
