"""bench/ddp_train.py, PyTorch DDP unchanged but for its backend, on 2 processes: the
replicator backend gives gloo's loss curve, and the same bits on every run, whether the
script spawns its processes or torchrun or `replicator launch` starts them."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import replicator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "ddp_train.py")
DATA = "/usr/share/datasets/fashion-mnist"
ARGS = ["--steps", "4", "--warmup", "0", "--batch", "32"]
JOB_SECONDS = 240
TORCHRUN_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")

pytestmark = pytest.mark.skipif(not os.path.isdir(DATA), reason=f"no Fashion-MNIST in {DATA}")


def replicator_bin():
    """REPLICATOR_BIN, else the binary beside the package's build folder (build/python/..)."""
    given = os.environ.get("REPLICATOR_BIN")
    if given:
        return given
    package = os.path.dirname(os.path.abspath(replicator.__file__))
    built = os.path.join(os.path.dirname(os.path.dirname(package)), "replicator")
    return built if os.access(built, os.X_OK) else shutil.which("replicator")


def train(tmp_path, name, backend, launcher=()):
    """Runs the script to the end; returns its record (losses, parameter digest)."""
    record = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICATOR_")}
    env["OMP_NUM_THREADS"] = "1"
    command = [*launcher, sys.executable, SCRIPT, *ARGS, "--processes", "2", "--backend", backend,
               "--record", str(record)]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=JOB_SECONDS)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n" \
                                 f"{done.stdout[-6000:]}"
    report = [line for line in done.stdout.splitlines() if '"type": "train"' in line]
    assert len(report) == 1, done.stdout[-3000:]
    assert f'"engine": "ddp-{backend}"' in report[0]
    result = json.loads(record.read_text())
    assert result["processes"] == 2 and len(result["losses"]) == 4
    return result


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    return {"gloo": train(tmp, "gloo", "gloo"),
            "replicator": train(tmp, "replicator", "replicator"),
            "replicator again": train(tmp, "replicator-again", "replicator")}


def test_same_loss_curve_as_gloo(spawned):
    ours = torch.tensor(spawned["replicator"]["losses"], dtype=torch.float64)
    gloo = torch.tensor(spawned["gloo"]["losses"], dtype=torch.float64)
    assert torch.allclose(ours, gloo, rtol=1e-4, atol=1e-6), (ours.tolist(), gloo.tolist())


def test_same_bits_on_two_runs(spawned):
    assert spawned["replicator"] == spawned["replicator again"]


def test_same_bits_under_torchrun(spawned, tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2", "--no-python"]
    assert train(tmp_path, "torchrun", "replicator", torchrun) == spawned["replicator"]


def test_same_bits_under_replicator_launch(spawned, tmp_path):
    binary = replicator_bin()
    if not binary:
        pytest.skip("no replicator binary (set REPLICATOR_BIN)")
    launch = [binary, "launch", "-n", "2", "--"]
    probe = f"import os; print('missing:', *[n for n in {TORCHRUN_ENV} if n not in os.environ])"
    seen = subprocess.run([*launch, sys.executable, "-c", probe], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60).stdout
    missing = sorted({n for line in seen.splitlines() if "missing:" in line
                      for n in line.split("missing:")[1].split()})
    if missing:
        pytest.skip(f"replicator launch does not set {', '.join(missing)} for its workers")
    assert train(tmp_path, "launch", "replicator", launch) == spawned["replicator"]
