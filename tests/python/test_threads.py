"""replicator.Replicator from Python: replica threads of one process, their collectives on
torch tensors and numpy arrays, and the errors run raises."""

import os
import threading

import numpy as np
import pytest
import torch

import replicator
from markers import line_of

HERE = os.path.abspath(__file__)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.uint8]


def _line_of(marker):
    return line_of(HERE, marker)


@pytest.fixture(autouse=True)
def _no_job_environment(monkeypatch):
    # Config reads REPLICATOR_*: a test run inside a launched job must still be one process.
    for name in [n for n in os.environ if n.startswith("REPLICATOR_")]:
        monkeypatch.delenv(name)


def _ok_after(rep):
    """The Replicator still runs a step after a failed one."""
    got = rep.run(lambda ctx: ctx.all_reduce(torch.ones(2)))
    for t in got:
        assert torch.equal(t, torch.full((2,), float(rep.num_replicas)))


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_on_tensors_and_arrays(n):
    rep = replicator.Replicator(local_replicas=n, timeout="60s")
    assert rep.num_replicas == n and rep.num_local_replicas == n

    def step(ctx):
        r = ctx.replica_id
        assert ctx.num_replicas == n and ctx.local_replica_id == r
        out = {}
        for dtype in DTYPES:
            t = torch.tensor([r + 1, 2 * r, 7], dtype=dtype)
            assert ctx.all_reduce(t) is t
            out[f"sum {dtype}"] = t
        for op in ("sum", "mean", "min", "max", "prod"):
            t = torch.tensor([float(r + 1), float(n - r)])
            ctx.all_reduce(t, op=op)
            out[op] = t
        a = np.array([r + 1, 10 * r], dtype=np.int64)
        assert ctx.all_reduce(a, op="max") is a  # in place, the same array
        out["numpy max"] = torch.from_numpy(a.copy())
        a32 = np.full((2, 3), r + 0.5, dtype=np.float32)
        ctx.all_reduce(a32)
        out["numpy sum"] = torch.from_numpy(a32.copy())
        # A list is one fused all_reduce, in place, dtypes and layouts mixed.
        grads = [torch.full((2, 3), float(r + 1)), torch.tensor([r, 1], dtype=torch.int64),
                 torch.full((3, 2), float(r)).t(), np.full((2,), r + 1.0, dtype=np.float32)]
        assert ctx.all_reduce(grads, op="mean") is grads
        out["list"] = [torch.as_tensor(g).clone() for g in grads]
        b = torch.full((4,), float(r))
        ctx.broadcast(b, root=n - 1)
        out["broadcast"] = b
        bn = np.full((3,), r, dtype=np.uint8)
        ctx.broadcast(bn, root=1)
        out["numpy broadcast"] = torch.from_numpy(bn.copy())
        g = ctx.all_gather(torch.tensor([[r, -r]], dtype=torch.int32))
        out["all_gather"] = g
        gn = ctx.all_gather(np.array([r], dtype=np.float64))
        assert isinstance(gn, np.ndarray)
        out["numpy all_gather"] = torch.from_numpy(gn)
        rows = torch.arange(2 * n * 2, dtype=torch.float32).reshape(2 * n, 2) + 100 * r
        out["reduce_scatter"] = ctx.reduce_scatter(rows.clone())
        out["reduce_scatter max"] = ctx.reduce_scatter(rows.clone(), op="max")
        rs = ctx.reduce_scatter(rows.numpy().copy())
        assert isinstance(rs, np.ndarray)
        out["numpy reduce_scatter"] = torch.from_numpy(rs)
        out["all_to_all"] = ctx.all_to_all(rows.clone())
        ctx.barrier()
        return out

    results = rep.run(step)
    assert isinstance(results, replicator.PerReplica) and len(results) == n
    k = torch.arange(n)
    for r, out in enumerate(results):
        for dtype in DTYPES:
            want = torch.tensor([n * (n + 1) // 2, n * (n - 1), 7 * n], dtype=dtype)
            assert torch.equal(out[f"sum {dtype}"], want), dtype
        first, second = (k + 1).double(), (n - k).double()
        for op, f in (("sum", torch.sum), ("mean", torch.mean), ("min", torch.min),
                      ("max", torch.max), ("prod", torch.prod)):
            want = torch.stack([f(first), f(second)]).float()
            assert torch.allclose(out[op], want, rtol=1e-6, atol=0), (op, out[op], want)
        mean = (n + 1) / 2
        want_list = [torch.full((2, 3), mean), torch.tensor([n * (n - 1) // 2 // n, 1]),
                     torch.full((2, 3), (n - 1) / 2), torch.full((2,), mean)]
        for got, want in zip(out["list"], want_list):
            assert torch.allclose(got.double(), want.double(), rtol=1e-6), (got, want)
        assert torch.equal(out["numpy max"], torch.tensor([n, 10 * (n - 1)]))
        assert torch.equal(out["numpy sum"], torch.full((2, 3), n * n / 2, dtype=torch.float32))
        assert torch.equal(out["broadcast"], torch.full((4,), float(n - 1)))
        assert torch.equal(out["numpy broadcast"], torch.ones(3, dtype=torch.uint8))
        assert torch.equal(out["all_gather"], torch.stack([k, -k], 1)[:, None, :].int())
        assert torch.equal(out["numpy all_gather"], k.double()[:, None])
        rows = [torch.arange(4 * n, dtype=torch.float32).reshape(2 * n, 2) + 100 * q
                for q in range(n)]
        assert torch.equal(out["reduce_scatter"], sum(rows)[2 * r:2 * r + 2])
        assert torch.equal(out["reduce_scatter max"], rows[n - 1][2 * r:2 * r + 2])
        assert torch.equal(out["numpy reduce_scatter"], sum(rows)[2 * r:2 * r + 2])
        want = torch.cat([rows[q][2 * r:2 * r + 2] for q in range(n)])
        assert torch.equal(out["all_to_all"], want)

    ids = rep.run(lambda ctx: ctx.replica_id)
    assert list(ids) == list(range(n))
    assert rep.reduce("sum", ids) == n * (n - 1) / 2
    assert rep.reduce("mean", ids) == (n - 1) / 2
    assert rep.reduce("max", ids) == n - 1
    assert rep.reduce("min", ids) == 0
    with pytest.raises(replicator.InvalidArgument):
        rep.reduce("median", ids)


@pytest.mark.parametrize("n", [2, 3])
def test_a_step_error_is_raised_by_run_and_releases_the_others(n):
    # The deadline is far: the waiting replicas must be released by the failure, not by it.
    rep = replicator.Replicator(local_replicas=n, timeout="120s")
    seen = {}

    def step(ctx):
        if ctx.replica_id == n - 1:
            raise ValueError(f"bad batch on replica {ctx.replica_id}")
        try:
            ctx.all_reduce(torch.ones(3))
        except replicator.ReplicatorError as e:
            seen[ctx.replica_id] = e
            raise

    with pytest.raises(ValueError, match=f"bad batch on replica {n - 1}"):
        rep.run(step)
    assert sorted(seen) == list(range(n - 1))
    for e in seen.values():
        assert isinstance(e, replicator.Aborted), f"{type(e).__name__}: {e}"
    _ok_after(rep)


def test_mismatch_between_threads_names_both_lines():
    rep = replicator.Replicator(local_replicas=2, timeout="60s")

    def step(ctx):
        t = torch.ones(4)
        if ctx.replica_id == 0:
            ctx.all_reduce(t)  # threads: all_reduce
        else:
            ctx.broadcast(t, root=0)  # threads: broadcast

    with pytest.raises(replicator.CollectiveMismatch) as caught:
        rep.run(step)
    message = str(caught.value)
    assert "all_reduce" in message and "broadcast" in message, message
    for marker in ("threads: all_reduce", "threads: broadcast"):
        assert f"test_threads.py:{_line_of(marker)}" in message, message
    _ok_after(rep)


def test_timeout_when_a_replica_skips_a_collective():
    rep = replicator.Replicator(local_replicas=2, timeout="60s")
    left = threading.Event()

    def step(ctx):
        if ctx.replica_id == 0:
            try:
                ctx.all_reduce(torch.ones(2), timeout=0.5)  # threads: timed out
            finally:
                left.set()
        else:
            left.wait()  # skips the collective, and does not return before replica 0 gave up

    with pytest.raises(replicator.Timeout) as caught:
        rep.run(step)
    message = str(caught.value)
    assert f"test_threads.py:{_line_of('threads: timed out')}" in message, message
    assert "replica 1" in message, message
    _ok_after(rep)


def test_a_replica_that_returns_early_is_a_mismatch():
    rep = replicator.Replicator(local_replicas=2, timeout="60s")

    def step(ctx):
        if ctx.replica_id == 0:
            ctx.all_reduce(torch.ones(2))  # threads: left alone

    with pytest.raises(replicator.CollectiveMismatch) as caught:
        rep.run(step)
    assert f"test_threads.py:{_line_of('threads: left alone')}" in str(caught.value)
    _ok_after(rep)


def test_refused_inputs():
    rep = replicator.Replicator(local_replicas=2, timeout="60s")

    def step(ctx):
        errors = []
        for bad in ([1.0, 2.0], np.ones(2, dtype=np.int16), torch.ones(2, dtype=torch.bool)):
            try:
                ctx.all_reduce(bad)
            except (replicator.ReplicatorError, TypeError, ValueError) as e:
                errors.append(type(e).__name__)
        return errors

    for errors in rep.run(step):
        assert len(errors) == 3, errors
    with pytest.raises(replicator.ConfigError):
        replicator.Replicator(local_replicas=2, no_such_option=1)
