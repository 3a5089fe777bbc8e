"""The torch.distributed backend "replicator" against gloo, in real processes.

Each test starts one job of 2 or 3 processes running this file as a script (``python
test_c10d_backend.py SCENARIO``, with torchrun's variables RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT), so that the Python lines replicator names are this file's. Every worker prints
one ``RESULT {json}`` line; the tests read those.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from markers import line_of

HERE = os.path.abspath(__file__)
JOB_SECONDS = 240  # a hung job fails its test after this long instead of hanging the suite


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _line_of(marker):
    return line_of(HERE, marker)


def run_job(scenario, world, extra_env=None):
    """Runs `world` workers of `scenario`; returns [(returncode, result or None, output)] by
    rank. A job that meets a port taken in between is run again on another port."""
    for _ in range(3):
        port = _free_port()
        procs = []
        for rank in range(world):
            env = dict(os.environ)
            for name in [n for n in env if n.startswith("REPLICATOR_")]:
                del env[name]
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                       WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo",
                       OMP_NUM_THREADS="1")
            env.update(extra_env or {})
            procs.append(subprocess.Popen([sys.executable, HERE, scenario], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        deadline = time.monotonic() + JOB_SECONDS
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    if q.poll() is None:
                        q.kill()
                out, _ = p.communicate()
                out += f"\n[killed: the job ran past {JOB_SECONDS} s]"
            outs.append((p.returncode, out))
        if not any("address already in use" in o.lower() for _, o in outs):
            break
    results = []
    for code, out in outs:
        found = [line[len("RESULT "):] for line in out.splitlines() if line.startswith("RESULT ")]
        results.append((code, json.loads(found[-1]) if found else None, out))
    return results


def _result(job, rank):
    code, result, out = job[rank]
    assert result is not None, f"rank {rank} printed no result (exit {code}):\n{out[-6000:]}"
    return result


# ---------------------------------------------------------------------------------------------
# Tests (run by pytest)


@pytest.mark.parametrize("world", [2, 3])
def test_collectives_match_gloo(world):
    job = run_job("collectives", world)
    for rank in range(world):
        result = _result(job, rank)
        assert result["checks"] > 100, result
        assert result["failures"] == [], "\n".join(result["failures"])
        # Each refusal is a clear error from the backend on every rank that made the call.
        refused = {"bool tensor", "int16 tensor", "sparse tensor", "BAND",
                   "all_to_all_single uneven splits"}
        assert set(result["refusals"]) == refused, result["refusals"]
        for name, message in result["refusals"].items():
            assert "replicator" in message, (name, message)
    for rank in range(world):
        assert job[rank][0] == 0, f"rank {rank} exited {job[rank][0]}:\n{job[rank][2][-4000:]}"


def test_mismatch_raises_on_every_rank_naming_both_calls(tmp_path):
    job = run_job("mismatch", 2, {"REPLICATOR_TRACE_DIR": str(tmp_path)})
    lines = (_line_of("mismatch: all_reduce"), _line_of("mismatch: broadcast"))
    for rank in range(2):
        result = _result(job, rank)
        assert result["raised"], f"rank {rank}: the mismatched call returned"
        detail = f"rank {rank} raised {result['class']}: {result['message']}"
        assert result["is_mismatch"], detail
        message = result["message"]
        assert "all_reduce" in message and "broadcast" in message, detail
        for line in lines:
            assert f"test_c10d_backend.py:{line}" in message, detail
        # The backend is failed: later collectives raise, through Work.wait() and through
        # the Future, with replicator's error.
        assert result["after"].startswith("replicator.CollectiveMismatch"), result["after"]
        assert result["after future"].startswith("replicator.CollectiveMismatch"), \
            result["after future"]
    # Each process's flight recorder was dumped to REPLICATOR_TRACE_DIR.
    dumps = {}
    for path in tmp_path.glob("flight_recorder.rank*.json"):
        dump = json.loads(path.read_text())
        dumps[dump["rank"]] = dump["reason"]
    assert dumps == {0: "CollectiveMismatch", 1: "CollectiveMismatch"}, \
        f"{dumps} from {sorted(p.name for p in tmp_path.iterdir())}"


def test_killed_rank_releases_the_others():
    job = run_job("kill", 3)
    assert job[2][0] == -signal.SIGKILL, f"rank 2 exited {job[2][0]}:\n{job[2][2][-3000:]}"
    for rank in range(2):
        result = _result(job, rank)
        assert result["first"] == [3.0] * 4, result
        assert result["raised"], f"rank {rank}: the collective after the kill returned"
        detail = f"rank {rank} raised {result['class']} after {result['seconds']:.1f} s: " \
                 f"{result['message']}"
        assert result["class"] in ("replicator.PeerLost", "replicator.Aborted"), detail
        assert re.search(r"(rank|process|replica|peer)\s+2\b", result["message"]), detail
        assert result["seconds"] < 20, detail  # the group's timeout is 60 s


@pytest.mark.parametrize("world", [2, 3])
def test_send_recv_match_gloo(world):
    job = run_job("point_to_point", world)
    for rank in range(world):
        result = _result(job, rank)
        assert result["checks"] == 24, result
        assert result["failures"] == [], "\n".join(result["failures"])
    for rank in range(world):
        assert job[rank][0] == 0, f"rank {rank} exited {job[rank][0]}:\n{job[rank][2][-4000:]}"


def test_send_recv_mismatch_raises_on_both_ranks_naming_both_calls():
    job = run_job("p2p_mismatch", 2)
    lines = (_line_of("p2p mismatch: send"), _line_of("p2p mismatch: recv"))
    for rank in range(2):
        result = _result(job, rank)
        detail = f"rank {rank}: {result}"
        assert result["raised"], detail
        assert result["class"] == "replicator.CollectiveMismatch", detail
        message = result["message"]
        assert "send(f32 x 4, to rank 1" in message and "recv(f32 x 8, from rank 0" in message, \
            detail
        for line in lines:
            assert f"test_c10d_backend.py:{line}" in message, detail
        # The backend is failed: a later collective raises the same error.
        assert result["after"].startswith("replicator.CollectiveMismatch"), detail


def test_killed_rank_releases_a_recv_waiting_for_it():
    job = run_job("p2p_kill", 2)
    assert job[1][0] == -signal.SIGKILL, f"rank 1 exited {job[1][0]}:\n{job[1][2][-3000:]}"
    result = _result(job, 0)
    detail = f"rank 0: {result}"
    assert result["class"] in ("replicator.PeerLost", "replicator.Aborted"), detail
    assert re.search(r"process\s+1\b", result["message"]), detail
    assert result["seconds"] < 20, detail  # the group's timeout is 60 s


def test_all_reduce_is_bitwise_deterministic_over_jobs():
    digests = []
    for backend in ("replicator", "cpu:replicator"):  # the second by device routing
        job = run_job("determinism", 3, {"BACKEND": backend})
        ranks = [_result(job, rank)["digest"] for rank in range(3)]
        assert len(set(ranks)) == 1, f"ranks of one job disagree: {ranks}"
        digests.append(ranks[0])
    assert digests[0] == digests[1]


def test_a_group_left_alive_at_exit_ends_cleanly():
    # Asynchronous collectives whose tensor only a module global holds, and the backend object
    # kept, without destroy_process_group: the interpreter's exit must not abort the process
    # (the backend's thread releasing the last tensor reference into a finalizing Python).
    for _ in range(3):
        job = run_job("left_alive", 2)
        for rank, (code, result, out) in enumerate(job):
            assert code == 0, f"rank {rank} exited {code}:\n{out[-3000:]}"
            assert result["value"] == 2.0 ** 10, result


def test_a_stopped_backend_refuses_collectives():
    job = run_job("stopped", 2)
    for rank in range(2):
        result = _result(job, rank)
        assert result["after_stop"] == "replicator.Aborted", result
        assert "stopped" in result["message"], result


@pytest.mark.parametrize("asked", [False, True])
def test_torch_recorder_hook_only_when_asked(asked):
    # replicator records every collective itself; torch's recorder hook is attached to its
    # groups only with REPLICATOR_TORCH_FLIGHT_RECORDER=on (a gloo group keeps torch's own).
    env = {"REPLICATOR_TORCH_FLIGHT_RECORDER": "on"} if asked else {}
    job = run_job("recorder", 2, env)
    for rank in range(2):
        result = _result(job, rank)
        assert result["hooked"] is asked, result
        assert result["value"] == 2.0, result


# ---------------------------------------------------------------------------------------------
# Workers (this file run as a script)


def _report(**result):
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


def _class_name(e):
    return f"{type(e).__module__}.{type(e).__qualname__}"


def worker_collectives(rank, world):
    """Every collective on the replicator group and on a gloo group, same inputs, every dtype
    DDP uses and the integer ones; then asynchronous use and inputs it must refuse."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    W = world
    failures, refusals = [], {}
    checks = 0

    def data(dtype, shape, low, high, salt):
        g = torch.Generator().manual_seed(1000 * rank + salt)
        return torch.randint(low, high, shape, generator=g, dtype=torch.int64).to(dtype)

    def compare(name, ours, ref):
        nonlocal checks
        checks += 1
        if len(ours) != len(ref):
            failures.append(f"rank {rank} {name}: {len(ours)} results, gloo {len(ref)}")
            return
        for i, (a, b) in enumerate(zip(ours, ref)):
            if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                failures.append(f"rank {rank} {name}[{i}]: replicator {a.dtype} "
                                f"{tuple(a.shape)} {a.flatten()[:8].tolist()} vs gloo {b.dtype} "
                                f"{tuple(b.shape)} {b.flatten()[:8].tolist()}")

    def check(name, run, reference=None):
        """run(group) -> tensors; reference(gloo) -> tensors (default: run on gloo)."""
        try:
            ours = run(None)
        except Exception as e:  # noqa: BLE001 (every failure is reported, then the next check)
            failures.append(f"rank {rank} {name}: replicator raised {_class_name(e)}: {e}")
            return
        try:
            ref = (reference or run)(gloo)
        except Exception as e:  # noqa: BLE001
            failures.append(f"rank {rank} {name}: gloo raised {_class_name(e)}: {e}")
            return
        compare(name, ours, ref)

    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
              torch.int32, torch.uint8]
    shape = (5, 7)
    for dtype in dtypes:
        d = str(dtype).replace("torch.", "")

        def all_reduce(op, low, high, salt, make=None):
            def run(group):
                t = data(dtype, shape, low, high, salt)
                if make is not None:
                    t = make(t)
                dist.all_reduce(t, op=op, group=group)
                return [t]
            return run

        check(f"all_reduce SUM {d}", all_reduce(ReduceOp.SUM, 0, 20, 1))
        check(f"all_reduce PRODUCT {d}", all_reduce(ReduceOp.PRODUCT, 1, 4, 2))
        check(f"all_reduce MIN {d}", all_reduce(ReduceOp.MIN, 0, 100, 3))
        check(f"all_reduce MAX {d}", all_reduce(ReduceOp.MAX, 0, 100, 4))
        check(f"all_reduce SUM large {d}",
              lambda group: [dist.all_reduce(t := data(dtype, (3, 1031), 0, 20, 5),
                                             group=group) or t])
        check(f"all_reduce SUM non-contiguous {d}",
              all_reduce(ReduceOp.SUM, 0, 20, 6, make=lambda t: t.t()))

        # AVG (gloo has none): each rank's value is base + W*c, so the mean is exact.
        def avg_input():
            base = torch.randint(0, 20, shape, generator=torch.Generator().manual_seed(7))
            return (base + W * data(torch.int64, shape, 0, 5, 8)).to(dtype)

        def avg_ours(group):
            t = avg_input()
            dist.all_reduce(t, op=ReduceOp.AVG, group=group)
            return [t]

        def avg_ref(group):
            t = avg_input()
            dist.all_reduce(t, op=ReduceOp.SUM, group=group)
            exact = t.to(torch.int64) // W if not dtype.is_floating_point else t / W
            return [exact.to(dtype)]

        check(f"all_reduce AVG {d}", avg_ours, avg_ref)

        for src in (0, W - 1):
            check(f"broadcast src={src} {d}",
                  lambda group, src=src: [dist.broadcast(t := data(dtype, shape, 0, 100, 9),
                                                         src=src, group=group) or t])

        for dst, op in ((1, ReduceOp.SUM), (0, ReduceOp.MAX)):
            def reduce(group, dst=dst, op=op):
                t = data(dtype, shape, 0, 20, 10)
                dist.reduce(t, dst=dst, op=op, group=group)
                return [t] if rank == dst else []  # elsewhere the tensor's value is undefined
            check(f"reduce dst={dst} {op} {d}", reduce)

        def all_gather(group):
            out = [torch.zeros(shape, dtype=dtype) for _ in range(W)]
            dist.all_gather(out, data(dtype, shape, 0, 100, 11), group=group)
            return out
        check(f"all_gather {d}", all_gather)

        def all_gather_into_tensor(group):
            flat = torch.zeros((W * shape[0], shape[1]), dtype=dtype)
            dist.all_gather_into_tensor(flat, data(dtype, shape, 0, 100, 12), group=group)
            stacked = torch.zeros((W, *shape), dtype=dtype)
            if group is None:
                dist.all_gather_into_tensor(stacked, data(dtype, shape, 0, 100, 13))
            else:  # gloo takes only the flat form
                dist.all_gather_into_tensor(stacked.view(W * shape[0], shape[1]),
                                            data(dtype, shape, 0, 100, 13), group=group)
            return [flat, stacked]
        check(f"all_gather_into_tensor {d}", all_gather_into_tensor)

        def gather(group):
            out = [torch.zeros(shape, dtype=dtype) for _ in range(W)] if rank == 0 else None
            dist.gather(data(dtype, shape, 0, 100, 14), out, dst=0, group=group)
            return out or []
        check(f"gather dst=0 {d}", gather)

        def scatter(group):
            src = W - 1
            ins = [data(dtype, shape, 0, 100, 15 + r) for r in range(W)] if rank == src else None
            out = torch.zeros(shape, dtype=dtype)
            dist.scatter(out, ins, src=src, group=group)
            return [out]
        check(f"scatter src={W - 1} {d}", scatter)

        def reduce_scatter(group):
            out = torch.zeros(shape, dtype=dtype)
            dist.reduce_scatter(out, [data(dtype, shape, 0, 20, 20 + r) for r in range(W)],
                                group=group)
            return [out]
        check(f"reduce_scatter SUM {d}", reduce_scatter)

        for op in (ReduceOp.SUM, ReduceOp.MAX):
            def reduce_scatter_tensor(group, op=op):
                out = torch.zeros(shape, dtype=dtype)
                dist.reduce_scatter_tensor(out, data(dtype, (W * shape[0], shape[1]), 0, 20, 30),
                                           op=op, group=group)
                return [out]
            check(f"reduce_scatter_tensor {op} {d}", reduce_scatter_tensor)

        def all_to_all(group):
            out = [torch.zeros(shape, dtype=dtype) for _ in range(W)]
            dist.all_to_all(out, [data(dtype, shape, 0, 100, 40 + r) for r in range(W)],
                            group=group)
            return out

        def all_to_all_ref(group):  # gloo has only the single-tensor form
            out = torch.zeros((W, *shape), dtype=dtype)
            ins = torch.stack([data(dtype, shape, 0, 100, 40 + r) for r in range(W)])
            dist.all_to_all_single(out, ins, group=group)
            return list(out.unbind(0))
        check(f"all_to_all {d}", all_to_all, all_to_all_ref)

        for splits in (None, [2] * W):
            def all_to_all_single(group, splits=splits):
                out = torch.zeros((2 * W, 3), dtype=dtype)
                dist.all_to_all_single(out, data(dtype, (2 * W, 3), 0, 100, 50), splits, splits,
                                       group=group)
                return [out]
            check(f"all_to_all_single splits={splits} {d}", all_to_all_single)

        # The coalesced forms (what DDP and FSDP issue), against one gloo call per tensor.
        def coalesced_all_reduce(group):
            ts = [data(dtype, (3 + i,), 0, 20, 60 + i) for i in range(3)]
            if group is None:
                with dist._coalescing_manager(async_ops=True) as cm:
                    for t in ts:
                        dist.all_reduce(t)
                cm.wait()
            else:
                for t in ts:
                    dist.all_reduce(t, group=group)
            return ts
        check(f"coalesced all_reduce {d}", coalesced_all_reduce)

        def coalesced(collective, salt, high, in_scale, out_scale):
            """Two calls of `collective` (output, input) in one coalescing manager on the
            replicator group, one by one on gloo."""
            def run(group):
                ins = [data(dtype, (in_scale * (2 + i),), 0, high, salt + i) for i in range(2)]
                outs = [torch.zeros(out_scale * (2 + i), dtype=dtype) for i in range(2)]
                with dist._coalescing_manager() if group is None else contextlib.nullcontext():
                    for o, i in zip(outs, ins):
                        collective(o, i, group=group)
                return outs
            return run
        check(f"coalesced all_gather_into_tensor {d}",
              coalesced(dist.all_gather_into_tensor, 70, 100, 1, W))
        check(f"coalesced reduce_scatter_tensor {d}",
              coalesced(dist.reduce_scatter_tensor, 80, 20, W, 1))

        def all_reduce_coalesced(group):
            ts = [data(dtype, (4 + i,), 0, 20, 90 + i) for i in range(2)]
            dist.all_reduce_coalesced(ts, group=group)
            return ts
        check(f"all_reduce_coalesced {d}", all_reduce_coalesced)

    # Complex tensors travel as their real view.
    check("all_reduce SUM complex64",
          lambda group: [dist.all_reduce(t := torch.complex(data(torch.float32, (4,), 0, 9, 95),
                                                            data(torch.float32, (4,), 0, 9, 96)),
                                         group=group) or t])
    dist.barrier()
    checks += 1

    # Asynchronous: Work.wait() and get_future() deliver, several in flight at once.
    def expect(name, got, want):
        nonlocal checks
        checks += 1
        if not torch.equal(got, want):
            failures.append(f"rank {rank} {name}: {got.tolist()} != {want.tolist()}")

    ones = [torch.full((6,), float(i + 1)) for i in range(5)]
    works = [dist.all_reduce(t, async_op=True) for t in ones]
    for i in reversed(range(5)):
        works[i].wait()
        expect(f"async all_reduce {i}", ones[i], torch.full((6,), float(W * (i + 1))))
        if not works[i].is_completed():
            failures.append(f"rank {rank} async all_reduce {i}: not completed after wait()")
    t = torch.full((3,), float(rank + 1))
    fut = dist.all_reduce(t, async_op=True).get_future()
    value = fut.wait()
    expect("get_future().wait()", value[0], torch.full((3,), float(W * (W + 1) // 2)))
    t = torch.full((3,), float(rank + 1))
    halved = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] / 2)
    expect("get_future().then()", halved.wait(), torch.full((3,), W * (W + 1) / 4))
    out = [torch.zeros(2) for _ in range(W)]
    dist.all_gather(out, torch.full((2,), float(rank)), async_op=True).wait()
    expect("async all_gather", torch.stack(out), torch.arange(W).float()[:, None].expand(W, 2))
    t = torch.full((2,), float(rank))
    dist.broadcast(t, src=W - 1, async_op=True).get_future().wait()
    expect("async broadcast", t, torch.full((2,), float(W - 1)))
    dist.barrier(async_op=True).wait()

    # What it cannot take: a clear error on the calling rank, and the group still works.
    def refuse(name, call):
        nonlocal checks
        checks += 1
        if call is not None:
            try:
                call()
                failures.append(f"rank {rank} {name}: no error")
            except Exception as e:  # noqa: BLE001
                refusals[name] = f"{_class_name(e)}: {str(e).splitlines()[0]}"
        t = torch.ones(2)
        try:
            dist.all_reduce(t)
            expect(f"all_reduce after {name}", t, torch.full((2,), float(W)))
        except Exception as e:  # noqa: BLE001
            failures.append(f"rank {rank} all_reduce after {name}: {_class_name(e)}: {e}")

    refuse("bool tensor", lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool)))
    refuse("int16 tensor", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)))
    refuse("sparse tensor", lambda: dist.all_reduce(torch.eye(3).to_sparse()))
    refuse("BAND", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64), op=ReduceOp.BAND))
    uneven = [1] * (W - 1) + [W + 1]
    refuse("all_to_all_single uneven splits",
           lambda: dist.all_to_all_single(torch.zeros(2 * W), torch.zeros(2 * W), uneven, uneven))

    dist.barrier()
    dist.destroy_process_group()
    _report(checks=checks, failures=failures, refusals=refusals)


def worker_mismatch(rank, world):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator
    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    t = torch.ones(4)
    dist.all_reduce(t)
    result = {"raised": False}
    try:
        if rank == 0:
            dist.all_reduce(t)  # mismatch: all_reduce
        else:
            dist.broadcast(t, src=0)  # mismatch: broadcast
    except Exception as e:  # noqa: BLE001
        result = {"raised": True, "class": _class_name(e), "message": str(e),
                  "is_mismatch": isinstance(e, replicator.CollectiveMismatch)}
    for name, wait in (("after", lambda work: work.wait()),
                       ("after future", lambda work: work.get_future().wait())):
        try:
            wait(dist.all_reduce(t, async_op=True))
            result[name] = "no error"
        except Exception as e:  # noqa: BLE001
            result[name] = f"{_class_name(e)}: {e}"
    _report(**result)
    dist.destroy_process_group()


def worker_kill(rank, world):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(4)
    dist.all_reduce(t)
    store.set(f"first-{rank}", "done")
    if rank == 2:
        store.wait(["first-0", "first-1"])  # the others are through the first collective
        os.kill(os.getpid(), signal.SIGKILL)
    result = {"first": t.tolist(), "raised": False}
    start = time.monotonic()
    try:
        dist.all_reduce(t)
    except Exception as e:  # noqa: BLE001
        result.update(raised=True, **{"class": _class_name(e)}, message=str(e))
    result["seconds"] = time.monotonic() - start
    _report(**result)
    # Rank 0 serves the store: it leaves after rank 1 has reported.
    store.set(f"reported-{rank}", "done")
    store.wait(["reported-0", "reported-1"])
    os._exit(0)


def worker_determinism(rank, world):
    import hashlib
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    dist.init_process_group(os.environ["BACKEND"], timeout=timedelta(seconds=60))
    g = torch.Generator().manual_seed(12345 + rank)
    # Magnitudes over many decades, so that the order of the additions shows in the bits.
    x = torch.randn(1 << 16, generator=g) * torch.exp(3 * torch.randn(1 << 16, generator=g))
    dist.all_reduce(x)
    _report(digest=hashlib.sha256(x.numpy().tobytes()).hexdigest())
    dist.destroy_process_group()


def worker_point_to_point(rank, world):
    """send/recv on the replicator group and on a gloo group, same inputs: a ring of
    isend/irecv in every dtype, blocking pairs, batch_isend_irecv, tags received out of their
    order, an empty tensor, and a send waiting for a recv that comes after a collective."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    W = world
    nxt, prv = (rank + 1) % W, (rank - 1) % W
    failures, checks = [], 0

    def data(dtype, shape, salt, who=rank):
        g = torch.Generator().manual_seed(1000 * who + salt)
        return torch.randint(0, 100, shape, generator=g, dtype=torch.int64).to(dtype)

    def check(name, run):
        nonlocal checks
        checks += 1
        try:
            ours = run(None)
            ref = run(gloo)
        except Exception as e:  # noqa: BLE001 (reported, then the next check)
            failures.append(f"rank {rank} {name}: {_class_name(e)}: {e}")
            return
        for i, (a, b) in enumerate(zip(ours, ref)):
            if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                failures.append(f"rank {rank} {name}[{i}]: replicator {a.flatten()[:8].tolist()}"
                                f" vs gloo {b.flatten()[:8].tolist()}")

    shape = (5, 7)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                  torch.int32, torch.uint8):
        d = str(dtype).replace("torch.", "")

        def ring(group, dtype=dtype):
            out = torch.zeros(shape, dtype=dtype)
            reqs = [dist.irecv(out, prv, group=group, tag=3),
                    dist.isend(data(dtype, shape, 1), nxt, group=group, tag=3)]
            for req in reqs:
                req.wait()
            return [out]
        check(f"isend/irecv ring {d}", ring)

        def pair(group, dtype=dtype):
            if rank == 0:
                dist.send(data(dtype, (3, 1031), 2), W - 1, group=group)
            elif rank == W - 1:
                out = torch.zeros((3, 1031), dtype=dtype)
                dist.recv(out, 0, group=group)
                return [out]
            return []
        check(f"send/recv 0 -> {W - 1} {d}", pair)

    def non_contiguous(group):
        out = torch.zeros((7, 5)).t()  # received into a transposed view on ours
        if group is not None:
            out = torch.zeros((5, 7))
        if rank == 0:
            dist.send(data(torch.float32, (5, 7), 3), 1, group=group)
        elif rank == 1:
            dist.recv(out, 0, group=group)
            return [out.contiguous()]
        return []
    check("recv into a non-contiguous tensor", non_contiguous)

    def batch(group):
        out = torch.zeros(16)
        ops = [dist.P2POp(dist.isend, data(torch.float32, (16,), 4), nxt, group=group),
               dist.P2POp(dist.irecv, out, prv, group=group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return [out]
    check("batch_isend_irecv ring", batch)

    def tags_out_of_order(group):
        if rank == 0:
            first = dist.isend(data(torch.float32, (4,), 5), 1, group=group, tag=1)
            second = dist.isend(data(torch.float32, (4,), 6), 1, group=group, tag=2)
            second.wait()
            first.wait()
        elif rank == 1:
            one, two = torch.zeros(4), torch.zeros(4)
            later = dist.irecv(two, 0, group=group, tag=2)
            dist.recv(one, 0, group=group, tag=1)
            later.wait()
            return [one, two]
        return []
    check("tags received out of their order", tags_out_of_order)

    def one_tag_in_order(group):
        # Sends with one tag arrive in the order they were made, however the backend's
        # threads are scheduled.
        outs = [torch.zeros(64) for _ in range(6)]
        if rank == 0:
            reqs = [dist.isend(data(torch.float32, (64,), 20 + k), 1, group=group, tag=4)
                    for k in range(6)]
        elif rank == 1:
            reqs = [dist.irecv(out, 0, group=group, tag=4) for out in outs]
        else:
            reqs = []
        for req in reqs:
            req.wait()
        return outs if rank == 1 else []
    for _ in range(3):
        check("sends with one tag in their order", one_tag_in_order)

    def empty(group):
        out = torch.zeros(0)
        if rank == 0:
            dist.send(torch.zeros(0), 1, group=group)
        elif rank == 1:
            dist.recv(out, 0, group=group)
        return [out]
    check("empty tensor", empty)

    def behind_a_collective(group):
        t = torch.full((3,), float(rank))
        out = torch.zeros(5)
        if rank == 0:
            req = dist.isend(data(torch.float32, (5,), 7), 1, group=group, tag=9)
            dist.all_reduce(t, group=group)
            req.wait()
        elif rank == 1:
            dist.all_reduce(t, group=group)
            dist.recv(out, 0, group=group, tag=9)
        else:
            dist.all_reduce(t, group=group)
        return [t, out]
    check("a send whose recv comes after a collective", behind_a_collective)

    def work_future(group):
        out = torch.zeros(4)
        if rank == 0:
            dist.isend(data(torch.float32, (4,), 8), 1, group=group).wait()
        elif rank == 1:
            got = dist.irecv(out, 0, group=group)
            if group is None:  # gloo's Work has no future for recv
                return [got.get_future().wait()[0]]
            got.wait()
        return [out]
    check("irecv's future", work_future)

    # A receive from any source is a clear error at once, and the group goes on.
    checks += 1
    try:
        dist.recv(torch.zeros(2))
        failures.append(f"rank {rank} recv from any source: no error")
    except Exception as e:  # noqa: BLE001
        if "recvAnysource" not in str(e):
            failures.append(f"rank {rank} recv from any source: {_class_name(e)}: {e}")
    dist.barrier()
    _report(checks=checks, failures=failures)
    dist.destroy_process_group()


def worker_p2p_mismatch(rank, world):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    result = {"raised": False}
    try:
        if rank == 0:
            dist.send(torch.ones(4), 1)  # p2p mismatch: send
        else:
            dist.recv(torch.ones(8), 0)  # p2p mismatch: recv
    except Exception as e:  # noqa: BLE001
        result = {"raised": True, "class": _class_name(e), "message": str(e)}
    try:
        dist.all_reduce(torch.ones(4))
        result["after"] = "no error"
    except Exception as e:  # noqa: BLE001
        result["after"] = f"{_class_name(e)}: {e}"
    _report(**result)
    dist.destroy_process_group()


def worker_p2p_kill(rank, world):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    store = dist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(4))
    if rank == 1:
        store.wait(["receiving"])  # rank 0's recv is posted
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    result = {"raised": False}
    start = time.monotonic()
    req = dist.irecv(torch.zeros(4), 1)
    store.set("receiving", "yes")
    try:
        req.wait()
    except Exception as e:  # noqa: BLE001
        result.update(raised=True, **{"class": _class_name(e)}, message=str(e))
    result["seconds"] = time.monotonic() - start
    _report(**result)
    os._exit(0)


KEPT = {}  # what worker_left_alive leaves to the interpreter's exit


def worker_left_alive(rank, world):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    KEPT["tensor"] = torch.ones(65536)
    KEPT["backend"] = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    for _ in range(10):
        dist.all_reduce(KEPT["tensor"], async_op=True).wait()
    _report(value=KEPT["tensor"][0].item())
    KEPT["tensor"].fill_(0.5)
    for _ in range(300):  # ends with the last collective's tensors released just after it
        KEPT["backend"].allreduce([KEPT["tensor"]], dist.AllreduceOptions()).wait()


def worker_stopped(rank, world):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401
    from replicator import _replicator

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    dist.all_reduce(torch.ones(4))
    _replicator._stop_backends()  # what the package calls at exit
    try:
        dist.all_reduce(torch.ones(4))
        _report(after_stop="returned")
    except Exception as e:  # noqa: BLE001 (its class is the result)
        _report(after_stop=_class_name(e), message=str(e))


def worker_recorder(rank, world):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import replicator.torch  # noqa: F401

    dist.init_process_group("replicator", timeout=timedelta(seconds=60))
    t = torch.ones(4)
    dist.all_reduce(t)
    hooks = dist.distributed_c10d._world.pg_flight_recorder_hooks
    _report(hooked=dist.group.WORLD in hooks, value=t[0].item())
    dist.destroy_process_group()


if __name__ == "__main__":
    workers = {"collectives": worker_collectives, "mismatch": worker_mismatch,
               "kill": worker_kill, "determinism": worker_determinism,
               "left_alive": worker_left_alive, "stopped": worker_stopped,
               "recorder": worker_recorder, "point_to_point": worker_point_to_point,
               "p2p_mismatch": worker_p2p_mismatch, "p2p_kill": worker_p2p_kill}
    workers[sys.argv[1]](int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
