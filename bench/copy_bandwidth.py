"""The copy bandwidth a Python benchmark reports beside its figures (this machine's memory speed
changes from day to day): the best of 5 copies of 64 MiB by torch, counting read and write."""
import time

import torch


def copy_gbps() -> float:
    a = torch.ones(64 << 20, dtype=torch.uint8)
    b = torch.empty_like(a)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        b.copy_(a)
        best = max(best, 2 * a.numel() / (time.perf_counter() - start) / 1e9)
    return best
