#!/usr/bin/env python3
"""The peer of `replicator bench train`: PyTorch DDP over gloo on the same network, data,
batch and memory setting (the caller sets glibc's malloc variables). Batch norm is per
process (PyTorch's SyncBatchNorm has no CPU implementation). With --channels-last the
network's weights are laid out channels last, as the job does by default (the images have
one channel, the same in either layout). Prints one JSON line:
{"type": "train", "engine": "ddp-gloo", ..., "images_per_s": ...} from rank 0.

--backend picks the process group's backend (gloo by default; "replicator" imports
replicator.torch, which registers it). Started by torchrun or `replicator launch` (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set), every process runs one rank, which
meets the others through env:// and --processes is the world size; otherwise the script
spawns --processes ranks itself. --record FILE writes rank 0's loss at every step and a digest
of the trained parameters' bytes to FILE (JSON), to compare runs bit for bit."""
import argparse
import gzip
import hashlib
import json
import os
import sys
import shutil
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.project = None
        if stride != 1 or cin != cout:
            self.project = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                         nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.project is None else self.project(x)))


class ResNet(nn.Module):
    """examples/models/resnet.h: 3x3 stem, a block per stage at 16/32/64 channels, pool, linear."""

    def __init__(self, widths=(16, 32, 64), classes=10):
        super().__init__()
        self.stem = nn.Conv2d(1, widths[0], 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(widths[0])
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(Block(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem_bn(self.stem(x))))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def load_train():
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.tensor(x).float().div_(255).sub_(0.2860).div_(0.3530)
    return x, torch.tensor(y).long()


def launched():
    """True under torchrun or `replicator launch`: the rank and the meeting place are given."""
    return all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                               "MASTER_PORT"))


def parameter_digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def worker(rank, args, rendezvous, queue):
    torch.set_num_threads(args.threads)
    if "replicator" in args.backend:
        import replicator.torch  # noqa: F401  (registers the backend)
    if rendezvous is None:
        dist.init_process_group(args.backend, init_method="env://", rank=rank,
                                world_size=args.processes)
    else:
        dist.init_process_group(args.backend, init_method=f"file://{rendezvous}", rank=rank,
                                world_size=args.processes)
    torch.manual_seed(0)
    net = ResNet()
    if args.channels_last:
        net.to(memory_format=torch.channels_last)
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    x, y = load_train()
    per = args.batch // args.processes
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=g)
    start = None
    losses = []
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        base = (step * args.batch) % (len(x) - args.batch)
        idx = perm[base + rank * per: base + (rank + 1) * per]
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if args.record:
            losses.append(loss.item())
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        if args.record:
            with open(args.record, "w") as f:
                json.dump({"backend": args.backend, "processes": args.processes,
                           "losses": losses, "parameters": parameter_digest(model)}, f)
        if queue is None:
            report(args, args.steps * args.batch / seconds)
        else:
            queue.put(args.steps * args.batch / seconds)
    dist.destroy_process_group()
    # As in ddp_gan.py: leave without the interpreter's finalization, where torch 2.x now
    # and then aborts, once the result is through the queue.
    if queue is not None:
        queue.close()
        queue.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def report(args, rate):
    engine = "ddp-gloo" if args.backend == "gloo" else f"ddp-{args.backend}"
    print(json.dumps({"type": "train", "engine": engine, "processes": args.processes,
                      "replicas": args.processes, "threads": args.threads,
                      "batch": args.batch, "steps": args.steps,
                      "memory_format": "channels-last" if args.channels_last else "contiguous",
                      "images_per_s": rate}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--channels-last", action="store_true",
                   help="lay out the network's weights channels last")
    p.add_argument("--backend", default="gloo",
                   help="the process group's backend: gloo, replicator (import replicator.torch)")
    p.add_argument("--record", metavar="FILE",
                   help="write rank 0's losses and a digest of the trained parameters (JSON)")
    args = p.parse_args()
    if launched():
        args.processes = int(os.environ["WORLD_SIZE"])
        worker(int(os.environ["RANK"]), args, None, None)  # leaves the process
    # Rendezvous through a file, not a port picked here and bound later: no other program
    # can take it in between.
    folder = tempfile.mkdtemp(prefix="ddp-rendezvous-")
    rendezvous = os.path.join(folder, "store")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    try:
        mp.spawn(worker, args=(args, rendezvous, queue), nprocs=args.processes, join=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(args, queue.get())


if __name__ == "__main__":
    main()
