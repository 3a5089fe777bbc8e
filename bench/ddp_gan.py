#!/usr/bin/env python3
"""The PyTorch peer of the project's GAN job: a BigGAN-style class-conditional GAN on
Fashion-MNIST (28x28 grey, 10 classes, pixels in [-1, 1]), trained with PyTorch's
DistributedDataParallel over gloo, one process per replica, CPU only.

Networks (the job's, same names):
- G: z (96) in 3 chunks of 32. linear(z0) -> [4ch, 7, 7]; GBlock(4ch -> 2ch) and
  GBlock(2ch -> ch), each upsampling x2 and conditioned on cat(z_i, shared(y)) (96);
  BatchNorm2d(ch) -> relu -> conv3x3(ch -> 1) -> tanh. shared = Embedding(10, 64).
  GBlock: relu(CBN1) -> up -> conv3x3 -> relu(CBN2) -> conv3x3, plus up -> conv1x1.
  CBN: BatchNorm2d without affine, times (1 + gain(cond)) plus bias(cond), gain and bias
  linear(96 -> C) without bias. G's layers whose output goes into a batch norm (the first
  linear and every conv of the blocks) have no bias.
- D (projection): DBlock(1 -> ch, down, no pre-activation), DBlock(ch -> 2ch, down),
  DBlock(2ch -> 4ch); relu, sum over H and W; linear(4ch -> 1) + <embed(y), h>.
- Spectral norm (one power iteration per training-mode forward) on every conv and linear
  of both networks and on D's embedding; orthogonal init, zero biases.
- Hinge loss; Adam(betas 0, 0.999, eps 1e-6), lr G 1e-4, lr D 4e-4. One step is --d-steps
  D steps (each with a fresh real batch, fresh z and uniform fake classes; fakes made
  without a graph through G) then one G step (fresh z and classes; D's parameters do not
  require grad).

Differences from the job, all forced by PyTorch on CPU:
- Batch norm in G is per process: SyncBatchNorm is CUDA-only, the job's is cross-replica.
- DDP runs with broadcast_buffers=False. The buffers are the spectral-norm vectors u, v
  and G's batch-norm running statistics. u and v start equal on every replica (same
  seed, and DDP broadcasts rank 0's state once at construction) and every power
  iteration computes them from weights that are equal on every replica, so they stay
  equal without a broadcast (--check verifies it, bit for bit); the running statistics
  are never read, as G only runs in training mode. The default (True) also works with
  PyTorch 1.13's spectral_norm, which clones u before using it, so the in-place broadcast
  breaks no autograd graph; it gives the same losses but costs a collective per forward
  (three per step) and replaces every replica's running statistics with rank 0's.
- The G step runs D's plain module, not its DDP wrapper: D's parameters do not require
  grad then, so a DDP forward would wait for gradients that never come. Likewise the D
  step makes its fakes under no_grad, so G's DDP wrapper expects no backward.

Data: every process reads the whole training set, shuffles it with the same seed, and
takes its slice (global batch / processes) of each global batch, consecutive batches for
consecutive D steps. z and fake classes come from a generator seeded per rank.

With --channels-last both networks' weights and G's first activation are laid out channels
last (as the job does by default); real images have one channel, the same in either layout.

Usage: ddp_gan.py [--processes P] [--threads K] [--batch B] [--width ch] [--d-steps N]
                  [--steps S] [--warmup W] [--seed S] [--report-every N] [--json]
                  [--channels-last]
       ddp_gan.py --check
images/s = global batch x timed steps / seconds of the timed steps (after --warmup steps),
one step being the D steps plus the G step. With --json the last stdout line is
{"type": "gan", "engine": "ddp-gloo", "processes": .., "replicas": .., "threads": ..,
"batch": .., "width": .., "d_steps": .., "steps": .., "warmup": .., "seconds": ..,
"images_per_s": .., "loss_d": .., "loss_g": ..}, the losses those of the last step
averaged over replicas. The caller sets the allocator (glibc's default is several times
slower for these small tensors than jemalloc without purging; see docs/performance.md).

--check is the self-test: 2 processes, 3 steps at global batch 8, width 8; it fails unless
the losses are finite and every replica ends with the same parameters and the same
spectral-norm vectors. It takes a few seconds; run it as `.venv/bin/python bench/ddp_gan.py --check`.
"""
import argparse
import gzip
import json
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import spectral_norm

DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = 10
Z_DIM = 96
Z_CHUNKS = 3
SHARED_DIM = 64
COND_DIM = Z_DIM // Z_CHUNKS + SHARED_DIM  # 96


def sn(module):
    """Orthogonal init, zero bias, then spectral norm with one power iteration."""
    nn.init.orthogonal_(module.weight)
    if getattr(module, "bias", None) is not None:
        nn.init.zeros_(module.bias)
    return spectral_norm(module, n_power_iterations=1)


def conv3x3(cin, cout, bias=True):
    return sn(nn.Conv2d(cin, cout, 3, 1, 1, bias=bias))


def conv1x1(cin, cout, bias=True):
    return sn(nn.Conv2d(cin, cout, 1, bias=bias))


class CBN(nn.Module):
    """Class-conditional batch norm: BN without affine, then x (1 + gain) + bias."""

    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1, affine=False)
        self.gain = sn(nn.Linear(COND_DIM, channels, bias=False))
        self.bias = sn(nn.Linear(COND_DIM, channels, bias=False))

    def forward(self, x, cond):
        gain = 1 + self.gain(cond)[:, :, None, None]
        bias = self.bias(cond)[:, :, None, None]
        return self.bn(x) * gain + bias


class GBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.cbn1 = CBN(cin)
        self.conv1 = conv3x3(cin, cout, bias=False)  # into a batch norm: no bias, as the job
        self.cbn2 = CBN(cout)
        self.conv2 = conv3x3(cout, cout, bias=False)
        self.shortcut = conv1x1(cin, cout, bias=False)

    def forward(self, x, cond):
        h = F.relu(self.cbn1(x, cond))
        h = self.conv1(F.interpolate(h, scale_factor=2, mode="nearest"))
        h = self.conv2(F.relu(self.cbn2(h, cond)))
        return h + self.shortcut(F.interpolate(x, scale_factor=2, mode="nearest"))


class Generator(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.ch = ch
        self.channels_last = False
        self.shared = nn.Embedding(CLASSES, SHARED_DIM)
        nn.init.orthogonal_(self.shared.weight)
        self.linear = sn(nn.Linear(Z_DIM // Z_CHUNKS, 4 * ch * 7 * 7, bias=False))
        self.blocks = nn.ModuleList([GBlock(4 * ch, 2 * ch), GBlock(2 * ch, ch)])
        self.out_bn = nn.BatchNorm2d(ch)
        self.out_conv = conv3x3(ch, 1)

    def forward(self, z, y):
        chunks = torch.split(z, Z_DIM // Z_CHUNKS, dim=1)
        shared = self.shared(y)
        h = self.linear(chunks[0]).view(-1, 4 * self.ch, 7, 7)
        if self.channels_last:
            h = h.contiguous(memory_format=torch.channels_last)
        for block, zi in zip(self.blocks, chunks[1:]):
            h = block(h, torch.cat([zi, shared], dim=1))
        return torch.tanh(self.out_conv(F.relu(self.out_bn(h))))


class DBlock(nn.Module):
    def __init__(self, cin, cout, down, preact=True):
        super().__init__()
        self.down, self.preact = down, preact
        self.conv1 = conv3x3(cin, cout)
        self.conv2 = conv3x3(cout, cout)
        self.shortcut = conv1x1(cin, cout) if cin != cout or down else None

    def forward(self, x):
        h = F.relu(x) if self.preact else x
        h = self.conv2(F.relu(self.conv1(h)))
        if self.down:
            h = F.avg_pool2d(h, 2)
        s = x
        if self.shortcut is not None:
            if self.preact:
                s = self.shortcut(s)
                if self.down:
                    s = F.avg_pool2d(s, 2)
            else:
                if self.down:
                    s = F.avg_pool2d(s, 2)
                s = self.shortcut(s)
        return h + s


class Discriminator(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.blocks = nn.Sequential(DBlock(1, ch, True, preact=False),
                                    DBlock(ch, 2 * ch, True), DBlock(2 * ch, 4 * ch, False))
        self.linear = sn(nn.Linear(4 * ch, 1))
        self.embed = sn(nn.Embedding(CLASSES, 4 * ch))

    def forward(self, x, y):
        h = F.relu(self.blocks(x)).sum([2, 3])
        return self.linear(h).squeeze(1) + (self.embed(y) * h).sum(1)


def load_train():
    def read(name, offset):
        path = os.path.join(DATA, name)
        try:
            with gzip.open(path) as f:
                return np.frombuffer(f.read(), np.uint8, offset=offset)
        except OSError as e:
            raise SystemExit(f"cannot read {path} ({e}); the Fashion-MNIST training files "
                             f"(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz) "
                             f"are expected in {DATA}")
    x = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    y = read("train-labels-idx1-ubyte.gz", 8)
    x = torch.tensor(x).float().div_(127.5).sub_(1)
    return x, torch.tensor(y).long()


def replicas_agree(modules):
    """Whether every parameter and spectral-norm vector equals rank 0's, bit for bit; also
    the tensors it gave to collectives (see the end of worker). Batch-norm running
    statistics differ by design (per-process batch norm) and are left out."""
    mine = torch.cat([t.detach().flatten() for m in modules
                      for name, t in list(m.named_parameters()) + list(m.named_buffers())
                      if not name.split(".")[-1].startswith(("running_", "num_batches"))])
    ref = mine.clone()
    dist.broadcast(ref, 0)
    ok = torch.tensor([1.0 if torch.equal(ref, mine) else 0.0])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok.item()), [mine, ref, ok]


def worker(rank, args, rendezvous, queue):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=args.processes)
    torch.manual_seed(args.seed)
    g_net = Generator(args.width)
    d_net = Discriminator(args.width)
    if args.channels_last:
        g_net.to(memory_format=torch.channels_last)
        d_net.to(memory_format=torch.channels_last)
        g_net.channels_last = True
    G = nn.parallel.DistributedDataParallel(g_net, broadcast_buffers=False)
    D = nn.parallel.DistributedDataParallel(d_net, broadcast_buffers=False)
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.999), eps=1e-6)
    opt_d = torch.optim.Adam(D.parameters(), lr=4e-4, betas=(0.0, 0.999), eps=1e-6)
    d_params = list(d_net.parameters())

    x, y = load_train()
    per = args.batch // args.processes
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    noise = torch.Generator().manual_seed(args.seed * 1000 + 1 + rank)
    cursor = 0

    def real_batch():
        nonlocal cursor
        if cursor + args.batch > len(x):
            cursor = 0
        idx = perm[cursor + rank * per: cursor + (rank + 1) * per]
        cursor += args.batch
        return x[idx], y[idx]

    def latent():
        return (torch.randn(per, Z_DIM, generator=noise),
                torch.randint(0, CLASSES, (per,), generator=noise))

    start = None
    losses = torch.zeros(2)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        for _ in range(args.d_steps):
            xr, yr = real_batch()
            z, yf = latent()
            with torch.no_grad():
                fake = G(z, yf)
            loss_d = F.relu(1 - D(xr, yr)).mean() + F.relu(1 + D(fake, yf)).mean()
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()
        for p in d_params:
            p.requires_grad_(False)
        z, yf = latent()
        loss_g = -d_net(G(z, yf), yf).mean()
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
        for p in d_params:
            p.requires_grad_(True)
        losses = torch.tensor([loss_d.item(), loss_g.item()])
        if rank == 0 and args.report_every and (step + 1) % args.report_every == 0:
            print(f"step {step + 1}: loss_d {losses[0]:.4f} loss_g {losses[1]:.4f} "
                  f"(rank 0)", file=sys.stderr, flush=True)
    dist.barrier()
    seconds = time.perf_counter() - start
    dist.all_reduce(losses)
    losses /= args.processes
    agree, held = replicas_agree([g_net, d_net]) if args.check else (True, [])
    if rank == 0:
        queue.put({"seconds": seconds, "loss_d": losses[0].item(),
                   "loss_g": losses[1].item(), "agree": agree})
    # Teardown order matters in PyTorch 1.13: the process group's destructor joins gloo's
    # worker threads with the GIL held, and a worker that drops the last reference to a
    # Python-owned tensor (losses, held) needs the GIL, so the process would hang. Free
    # the DDP wrappers (whose reducers also own the group) while the group is registered,
    # destroy the group, and only then let go of the tensors.
    del G, D
    dist.destroy_process_group()
    del losses, held
    # Under torch 2.x a worker now and then aborts in the interpreter's own finalization
    # ("terminate called without an active exception", no Python frame left): leave without
    # it, once the result is through the queue.
    queue.close()
    queue.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=2, help="replicas, one process each")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--width", type=int, default=32, help="channel width ch")
    p.add_argument("--d-steps", type=int, default=1, help="D steps per G step")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="steps before the timing starts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-every", type=int, default=0,
                   help="print rank 0's losses to stderr every N steps (0: never)")
    p.add_argument("--json", action="store_true", help="end with one JSON line")
    p.add_argument("--channels-last", action="store_true",
                   help="lay out both networks' weights and G's first activation channels last")
    p.add_argument("--check", action="store_true",
                   help="self-test: 2 processes, 3 steps, batch 8, width 8")
    args = p.parse_args()
    if args.check:
        args.processes, args.batch, args.width, args.steps, args.warmup = 2, 8, 8, 3, 0
    if args.processes < 1 or args.batch % args.processes or args.steps < 1 \
            or args.warmup < 0 or args.d_steps < 1 or args.width < 1:
        p.error(f"--batch {args.batch} must split evenly over --processes "
                f"{args.processes}; --steps, --d-steps and --width must be at least 1")
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
    r = queue.get()
    rate = args.steps * args.batch / r["seconds"]
    if args.check:
        ok = math.isfinite(r["loss_d"]) and math.isfinite(r["loss_g"]) and r["agree"]
        print(f"check {'passed' if ok else 'FAILED'}: loss_d {r['loss_d']:.4f} "
              f"loss_g {r['loss_g']:.4f}, replicas "
              f"{'agree' if r['agree'] else 'DIFFER'}")
        sys.exit(0 if ok else 1)
    print(f"{args.processes} process(es) x {args.threads} thread(s), batch {args.batch}, "
          f"width {args.width}, d-steps {args.d_steps}: {rate:.1f} images/s "
          f"({r['seconds']:.2f} s for {args.steps} steps); last step loss_d "
          f"{r['loss_d']:.4f} loss_g {r['loss_g']:.4f}")
    if args.json:
        print(json.dumps({"type": "gan", "engine": "ddp-gloo", "processes": args.processes,
                          "replicas": args.processes, "threads": args.threads,
                          "batch": args.batch, "width": args.width,
                          "d_steps": args.d_steps, "steps": args.steps,
                          "warmup": args.warmup, "seconds": r["seconds"],
                          "images_per_s": rate, "loss_d": r["loss_d"],
                          "loss_g": r["loss_g"]}))


if __name__ == "__main__":
    main()
