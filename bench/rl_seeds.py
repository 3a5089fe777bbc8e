#!/usr/bin/env python3
"""Runs one reinforcement-learning job over N seeds and reports what holds for every seed.

    bench/rl_seeds.py [--seeds 5] [--base 0] [--out DIR] [--threshold X] [--parallel K]
                      [--reference LABEL=VALUE ...] -- ARGS...

ARGS are the job's own (`train impala --env breakout --frames 5000000`, `train d4pg ...`);
each seed runs `replicator ARGS --seed S --out DIR/seed-S --json --no-progress`, in turn, or K
at a time with --parallel K (each then shares the machine with the others). The
seeds are drawn from --base (the same base draws the same seeds). A seed whose folder holds a
finished result is not run again, and an unfinished one resumes from its newest checkpoint
(give ARGS a --checkpoint-every), so a long sweep can be stopped and started again.

Prints, and writes into DIR: a table per seed (final mean return, frames, seconds, frames/s)
with the mean, the 95 % interval of the mean (Student's t over the seeds), the worst seed and,
with --threshold, how many seeds reached it (summary.md, summary.json); the learning curves,
every seed thin and the mean with its 95 % band, beside the random policy and any published
figures given with --reference (markers at the last frame) (curve.png). Run again on a finished
folder, it runs nothing and draws the chart anew.
"""

import argparse
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def draw_seeds(base, n):
    """N distinct seeds in [0, 2^31), a fixed function of the base."""
    rng = random.Random(base)
    seeds = []
    while len(seeds) < n:
        s = rng.randrange(2**31)
        if s not in seeds:
            seeds.append(s)
    return seeds


def curve_of(metrics):
    """(frames, mean_return) of a job's metrics.jsonl, and the random policy's return."""
    frames, returns, random_return = [], [], math.nan
    with open(metrics) as f:
        for line in f:
            try:
                m = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(m, dict) or m.get("type") != "train":
                continue
            random_return = m.get("random_return", random_return)
            if "frames" in m and "mean_return" in m:
                # A resumed run repeats the steps after its checkpoint: keep the newest.
                while frames and frames[-1] >= m["frames"]:
                    frames.pop()
                    returns.pop()
                frames.append(float(m["frames"]))
                returns.append(float(m["mean_return"]))
    return frames, returns, random_return


def run_seed(binary, args, seed, folder):
    """Runs (or resumes) one seed; returns its result object. Raises on a failed job."""
    result_file = folder / "result.json"
    if result_file.exists():
        return json.loads(result_file.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    command = [str(binary), *args, "--seed", str(seed), "--out", str(folder), "--json",
               "--no-progress"]
    started = time.monotonic()
    with open(folder / "job.log", "a") as log:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"seed {seed}: `{' '.join(command)}` exited with "
                           f"{done.returncode}; see {folder / 'job.log'}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_seconds"] = time.monotonic() - started
    result_file.write_text(json.dumps(result) + "\n")
    return result


def interval95(values):
    """Mean and half-width of the 95 % interval of the mean (Student's t); 0 for one value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    from scipy.stats import t
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def band(curves, points=200):
    """The seeds' curves on a common frame grid: grid, mean, low and high of the 95 % band."""
    import numpy as np
    end = min(c[0][-1] for c in curves)
    start = max(c[0][0] for c in curves)
    grid = np.linspace(start, end, points)
    ys = np.array([np.interp(grid, c[0], c[1]) for c in curves])
    mean = ys.mean(axis=0)
    if len(curves) < 2:
        return grid, mean, mean, mean
    from scipy.stats import t
    half = t.ppf(0.975, len(curves) - 1) * ys.std(axis=0, ddof=1) / math.sqrt(len(curves))
    return grid, mean, mean - half, mean + half


def parse_reference(text):
    """"LABEL=VALUE" (a published return at the run's last frame) -> (label, value)."""
    label, sep, value = text.rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or not label or math.isnan(number):
        raise argparse.ArgumentTypeError(f"--reference wants LABEL=VALUE, got {text!r}")
    return label, number


def plot(path, title, rows, random_return, threshold, references=(), y_label="mean return"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curves = [(r["frames_curve"], r["return_curve"]) for r in rows if len(r["frames_curve"]) > 1]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for r in rows:
        ax.plot(r["frames_curve"], r["return_curve"], lw=0.8, alpha=0.45,
                label=f"seed {r['seed']}")
    if curves:
        grid, mean, low, high = band(curves)
        ax.fill_between(grid, low, high, color="black", alpha=0.15, lw=0,
                        label="95 % interval of the mean")
        ax.plot(grid, mean, color="black", lw=2, label=f"mean of {len(curves)} seeds")
    if not math.isnan(random_return):
        ax.axhline(random_return, color="grey", ls="--", lw=1, label="random policy")
    if threshold is not None:
        ax.axhline(threshold, color="tab:red", ls=":", lw=1, label=f"target {threshold:g}")
    # Published figures are values at the end of a run, not curves: a marker at the last frame.
    end = max((r["frames_curve"][-1] for r in rows), default=0)
    for (label, value), marker in zip(references, "D^svP*"):
        ax.plot([end], [value], marker=marker, ms=7, ls="none", color="tab:purple",
                markerfacecolor="none", label=f"{label}: {value:g}")
    ax.set_title(title)
    ax.set_xlabel("frames")
    ax.set_ylabel(y_label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def y_label_of(args):
    """What the job's mean_return is: the noiseless policy's evaluation for D4PG, the actors'
    newest 100 episodes for IMPALA."""
    if args[:2] == ["train", "d4pg"]:
        return "mean return (the noiseless policy, evaluation episodes)"
    return "mean return (newest 100 episodes)"


def title_of(args):
    """The job's arguments without those that do not change what it learns, wrapped."""
    import textwrap
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("--checkpoint-every", "--report-every", "--keep-checkpoints"):
            skip = True
        elif not a.startswith("--no-progress") and a != "--json":
            kept.append(a)
    return "\n".join(textwrap.wrap(" ".join(kept), 70))


def summarise(rows, args, threshold):
    finals = [r["final_return"] for r in rows]
    mean, half = interval95(finals)
    worst = min(rows, key=lambda r: r["final_return"])
    lines = [f"# {' '.join(args)}", "",
             "| seed | final mean return | frames | seconds | frames/s |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['final_return']:.2f} | {r['frames']:.0f} | "
                     f"{r['seconds']:.0f} | {r['frames_per_s']:.0f} |")
    lines += ["", f"mean {mean:.2f} ± {half:.2f} (95 % interval of the mean over "
                  f"{len(rows)} seeds); worst seed {worst['seed']}: {worst['final_return']:.2f}"]
    summary = {"args": args, "seeds": [r["seed"] for r in rows], "final_returns": finals,
               "mean": mean, "interval95": half, "worst": worst["final_return"]}
    if threshold is not None:
        reached = sum(v >= threshold for v in finals)
        lines.append(f"{reached} of {len(rows)} seeds reached {threshold:g}")
        summary.update(threshold=threshold, reached=reached)
    return "\n".join(lines) + "\n", summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="how many seeds (default 5)")
    p.add_argument("--base", type=int, default=0, help="the seeds are drawn from it (default 0)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder of the runs and the summary (default: rl-seeds-<base>)")
    p.add_argument("--threshold", type=float, default=None,
                   help="a final mean return every seed should reach (counted and drawn)")
    p.add_argument("--reference", type=parse_reference, action="append", default=[],
                   metavar="LABEL=VALUE",
                   help="a published return at the run's last frame, drawn as a marker there "
                        "(repeatable), e.g. 'MinAtar paper, AC(0.8)=17.5'")
    p.add_argument("--parallel", type=int, default=1,
                   help="seeds run at once (default 1: in turn)")
    p.add_argument("--build", type=Path, default=ROOT / "build", help="build folder")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then the job's arguments")
    o = p.parse_args()
    args = o.args[1:] if o.args[:1] == ["--"] else o.args
    if not args:
        p.error("give the job after --, e.g. -- train impala --env breakout")
    if o.seeds < 1:
        p.error("--seeds must be at least 1")
    if o.parallel < 1:
        p.error("--parallel must be at least 1")
    if any(a in ("--seed", "--out") for a in args):
        p.error("the job's --seed and --out are this script's to set")
    binary = o.build / "replicator"
    if not binary.exists():
        p.error(f"{binary} not found; build first (scripts/build.sh)")
    out = o.out or Path(f"rl-seeds-{o.base}")
    seeds = draw_seeds(o.base, o.seeds)
    print(f"{len(seeds)} seeds from base {o.base}: {' '.join(map(str, seeds))}", flush=True)
    rows, random_return = [], math.nan
    with concurrent.futures.ThreadPoolExecutor(max_workers=o.parallel) as pool:
        runs = {pool.submit(run_seed, binary, args, seed, out / f"seed-{seed}"): seed
                for seed in seeds}
        for run in concurrent.futures.as_completed(runs):
            print(f"seed {runs[run]}: done", flush=True)
        results = [run.result() for run in runs]
    for i, (seed, result) in enumerate(zip(seeds, results)):
        folder = out / f"seed-{seed}"
        frames, returns, rr = curve_of(folder / "metrics.jsonl")
        if not returns:
            sys.exit(f"seed {seed}: {folder / 'metrics.jsonl'} holds no mean_return")
        random_return = rr if math.isnan(random_return) else random_return
        rows.append({"seed": seed, "final_return": returns[-1], "frames": frames[-1],
                     "seconds": result.get("seconds", math.nan),
                     "frames_per_s": frames[-1] / max(result.get("seconds", math.nan), 1e-9),
                     "frames_curve": frames, "return_curve": returns})
        print(f"seed {i + 1}/{len(seeds)} ({seed}): final mean return {returns[-1]:.2f} "
              f"at {frames[-1]:.0f} frames ({result.get('wall_seconds', math.nan):.0f} s)",
              flush=True)
    text, summary = summarise(rows, args, o.threshold)
    print(text, end="")
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(out / "curve.png", title_of(args), rows, random_return, o.threshold, o.reference,
         y_label_of(args))
    print(f"wrote {out / 'summary.md'}, {out / 'summary.json'}, {out / 'curve.png'}")


if __name__ == "__main__":
    main()
