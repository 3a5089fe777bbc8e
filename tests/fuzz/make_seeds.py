#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets, except the checkpoint's (checkpoint_seed.cc
writes that one with save_checkpoint itself): valid inputs of each parser and a few edge
cases. Deterministic; run from anywhere: tests/fuzz/make_seeds.py"""
import gzip
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent


def write(target, name, data):
    folder = HERE / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data.encode() if isinstance(data, str) else data)


# ---- config: lines "name=value" (Config::set) or a duration alone (parse_duration) --------
write("config", "local", "local-replicas=4\ntimeout=30s\nspin=50us\n")
write("config", "gloo", "engine=gloo\nstore=file:///tmp/rendezvous\nrank=1\nworld-size=2\n"
      "host=10.0.0.2\njob=run-42\n")
write("config", "mpi", "engine=mpi\nhost-processes=2\nlocal-replicas=8\n")
write("config", "durations", "500ms\n2m\n10us\n1min\n30\n")
write("config", "limits", "timeout=525600m\nspin=31536000000000us\nlocal-replicas=4096\n")
write("config", "errors", "timeout=0\nlocal-replicas=4097\nengine=nccl\nbogus=1\nhost=\n")

# ---- store_url: the text of REPLICATOR_STORE / --store ------------------------------------
write("store_url", "file", "file:///nfs/rendezvous/run-42")
write("store_url", "redis", "redis://hostA:6379")
write("store_url", "redis_ipv6", "redis://[::1]:6380")
write("store_url", "redis_slash", "redis://10.0.0.1/")
write("store_url", "redis_no_port", "redis://host")
write("store_url", "relative", "file://relative/dir")

# ---- frames: P-1, L-1, rank, then P frames of 256 bytes (src/collectives/frames.h) --------
# FrameHeader: sequence, count, layout (u64), root (i32), kind, op, dtype, flags (u8),
# num_buffers, site_file, site_line (u32), 48 bytes; a kLocalMismatch frame's payload is a
# LocalMismatch:
# the other call's FrameHeader and other_local (u32).
ALL_REDUCE, ALL_GATHER, BROADCAST, BARRIER, END_STEP = 0, 1, 2, 7, 8
F32, I64 = 0, 5
SUM, MAX = 0, 3


def header(seq, kind, count=0, op=SUM, dtype=F32, root=0, layout=0, flags=0, buffers=1,
           site_file=0, site_line=0):
    return struct.pack("<QQQiBBBBIII", seq, count, layout, root, kind, op, dtype, flags,
                       buffers, site_file, site_line).ljust(48, b"\0")


def frame(head, payload=b""):
    return (head + payload).ljust(256, b"\0")


def frames(processes, local, rank, *each):
    assert len(each) == processes
    return bytes([processes - 1, local - 1, rank]) + b"".join(each)


ar = header(5, ALL_REDUCE, 1024, SUM)
write("frames", "match", frames(2, 2, 0, frame(ar), frame(ar)))
write("frames", "in_frame", frames(2, 1, 1, frame(ar, struct.pack("<4f", 1, 2, 3, 4)),
                                   frame(ar, struct.pack("<4f", 5, 6, 7, 8))))
write("frames", "kind", frames(2, 1, 1, frame(header(5, ALL_GATHER, 1024)), frame(ar)))
odd = header(5, BROADCAST, 1024, root=1) + struct.pack("<I", 1)
write("frames", "local_mismatch",
      frames(3, 2, 0, frame(ar), frame(ar), frame(header(5, ALL_REDUCE, 1024, flags=1), odd)))
fused = header(9, ALL_REDUCE, 3000, MAX, I64, layout=0x1234567, buffers=3)
write("frames", "fused", frames(4, 3, 2, frame(fused), frame(fused), frame(fused),
                                frame(header(9, ALL_REDUCE, 3001, MAX, I64, layout=0x1234567,
                                             buffers=3))))
write("frames", "end_step", frames(2, 4, 1, frame(header(12, END_STEP)),
                                   frame(header(12, BARRIER))))

# ---- fashion_mnist: mode, expected label count (u32 big endian), then the file ------------
# mode bit 0: images (else labels); bit 1: the target gzips the rest (else it is gzip).
LABELS, IMAGES, RAW = 0, 1, 2


def labels_idx(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def images_idx(count):
    pixels = bytes((i * 7 + i // 28) & 0xFF for i in range(count * 28 * 28))
    return struct.pack(">IIII", 0x803, count, 28, 28) + pixels


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def fashion(mode, expected, data):
    return bytes([mode]) + struct.pack(">I", expected) + data


write("fashion_mnist", "labels_gz", fashion(LABELS, 0, gz(labels_idx([0, 9, 4]))))
write("fashion_mnist", "labels_raw", fashion(LABELS | RAW, 0, labels_idx([3, 1, 4, 1, 5])))
write("fashion_mnist", "labels_empty", fashion(LABELS | RAW, 0, labels_idx([])))
two = labels_idx([7, 2, 0, 6])
write("fashion_mnist", "labels_two_members", fashion(LABELS, 0, gz(two[:6]) + gz(two[6:])))
write("fashion_mnist", "images_gz", fashion(IMAGES, 3, gz(images_idx(3))))
write("fashion_mnist", "images_raw", fashion(IMAGES | RAW, 1, images_idx(1)))
