#!/usr/bin/env python3
"""The PyTorch peer of `replicator train impala`: IMPALA on gymnasium's CartPole-v1 in the
style of TorchBeast's MonoBeast, the single-machine design a Python user would reach for.

Design (MonoBeast's):
- Actor processes (torch.multiprocessing, fork by default) each step --envs-per-actor
  plain `gym.make("CartPole-v1")` environments, reset by hand when an episode ends, and
  write unrolls of T steps into a pool of preallocated shared-memory tensors. One pool slot
  holds one environment's unroll: observations [T+1] (x_0..x_T; x_0 is the previous
  unroll's x_T), actions, rewards, done flags, the behaviour policy's logits [T] and, at a
  done step, the finished episode's return. Slot indices travel over a free queue (learner
  -> actors) and a full queue (actors -> learner).
- The learner (the main process) takes B slots from the full queue, copies them out,
  hands the slots back, and runs V-trace (rho-bar = c-bar = 1, lambda = 1) and the IMPALA
  loss: -sum(log pi(a|x) * pg_advantage) + baseline_cost * 0.5 * sum((vs - V)^2)
  - entropy_cost * sum(H(pi)), sums over T and B, optimised with RMSProp. Actors read the
  policy from a shared-memory model (`model.share_memory()`) that the learner overwrites
  in place after every step.

Network and hyperparameters are our job's defaults: MLP 4 -> 64 tanh -> 64 tanh with a
policy head (2 logits) and a value head (1); T = 20, B = 32, discount 0.99, RMSProp
(lr 2e-3 annealed linearly to 0 over the run, alpha 0.99, eps 0.01, no momentum), baseline
cost 0.25, entropy cost 0.01, no gradient clip. A step that ends an episode (terminated or
truncated) has discount 0; its next observation is the reset one, never a transition.
The pool holds as many unrolls as our job keeps in flight: a batch being learned, a batch
queued, one unroll being written per environment.

Usage: impala_peer.py [--actors N] [--envs-per-actor M] [--frames F] [--threads K]
                      [--seed S] [--json] [--start-method fork|spawn|forkserver]
(--unroll, --batch, --hidden, --learning-rate, --discount, --baseline-cost and
--entropy-cost override the defaults above; keep them equal to the job's for a comparison.)
frames = learner steps x B x T. Progress goes to stderr every few seconds; with --json the
last stdout line is {"type": "impala_peer", "actors": .., "envs_per_actor": .., "frames": ..,
"steps": .., "seconds": .., "frames_per_s": .., "mean_return": .., "episodes": ..}, where
seconds is the wall time of the learning loop (actors already started), mean_return the
mean of the newest 100 finished episodes and episodes those the learner saw.
"""
import argparse
import collections
import json
import os
import queue
import signal
import sys
import time
import traceback

import gymnasium as gym
import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

OBSERVATION_SIZE = 4
NUM_ACTIONS = 2
POLL_S = 1.0  # queue waits wake this often to check on the other side
STALL_S = 120.0  # the learner fails when no unroll arrives for this long


class PolicyNet(nn.Module):
    """src/rl/policy.cc for a vector observation: a tanh MLP torso, policy and value heads."""

    def __init__(self, hidden=64):
        super().__init__()
        self.torso = nn.Sequential(nn.Linear(OBSERVATION_SIZE, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())
        self.policy = nn.Linear(hidden, NUM_ACTIONS)
        self.value = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.torso(x)
        return self.policy(h), self.value(h).squeeze(-1)


def make_buffers(slots, unroll):
    """The shared pool: one tensor per field, slot-major."""
    t = unroll
    specs = {
        "obs": ((slots, t + 1, OBSERVATION_SIZE), torch.float32),
        "action": ((slots, t), torch.int64),
        "reward": ((slots, t), torch.float32),
        "done": ((slots, t), torch.bool),
        "logits": ((slots, t, NUM_ACTIONS), torch.float32),
        "episode_return": ((slots, t), torch.float32),
    }
    return {k: torch.zeros(shape, dtype=dtype).share_memory_() for k, (shape, dtype) in specs.items()}


def act(rank, args, model, buffers, free_q, full_q, stop, parent_pid):
    """One actor process: M environments, unrolls of T steps into pool slots."""
    full_q.cancel_join_thread()  # never block exit on unread puts
    try:
        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed * 100003 + rank)
        m, t_len = args.envs_per_actor, args.unroll
        envs = [gym.make("CartPole-v1", disable_env_checker=True) for _ in range(m)]
        obs = np.stack([env.reset(seed=args.seed * 100003 + rank * m + i)[0]
                        for i, env in enumerate(envs)]).astype(np.float32)
        running = np.zeros(m, dtype=np.float64)
        # The unroll being written, env-major like the pool (copied in one go at the end).
        l_obs = np.zeros((m, t_len + 1, OBSERVATION_SIZE), dtype=np.float32)
        l_action = np.zeros((m, t_len), dtype=np.int64)
        l_reward = np.zeros((m, t_len), dtype=np.float32)
        l_done = np.zeros((m, t_len), dtype=np.bool_)
        l_logits = np.zeros((m, t_len, NUM_ACTIONS), dtype=np.float32)
        l_return = np.zeros((m, t_len), dtype=np.float32)

        def free_slot():
            while True:
                if stop.is_set() or os.getppid() != parent_pid:
                    return None
                try:
                    return free_q.get(timeout=POLL_S)
                except queue.Empty:
                    continue

        while True:
            slots = []
            for _ in range(m):
                s = free_slot()
                if s is None:
                    return
                slots.append(s)
            l_obs[:, 0] = obs
            l_return.fill(0)
            for t in range(t_len):
                with torch.no_grad():
                    logits, _ = model(torch.from_numpy(obs))
                    action = torch.multinomial(F.softmax(logits, dim=1), 1).squeeze(1)
                a = action.numpy()
                l_action[:, t] = a
                l_logits[:, t] = logits.numpy()
                for i, env in enumerate(envs):
                    o, r, terminated, truncated, _ = env.step(int(a[i]))
                    running[i] += r
                    l_reward[i, t] = r
                    done = terminated or truncated
                    l_done[i, t] = done
                    if done:
                        l_return[i, t] = running[i]
                        running[i] = 0.0
                        o, _ = env.reset()
                    obs[i] = o
                l_obs[:, t + 1] = obs
            index = torch.tensor(slots, dtype=torch.int64)
            buffers["obs"][index] = torch.from_numpy(l_obs)
            buffers["action"][index] = torch.from_numpy(l_action)
            buffers["reward"][index] = torch.from_numpy(l_reward)
            buffers["done"][index] = torch.from_numpy(l_done)
            buffers["logits"][index] = torch.from_numpy(l_logits)
            buffers["episode_return"][index] = torch.from_numpy(l_return)
            for s in slots:
                full_q.put(s)
    except KeyboardInterrupt:
        return
    except Exception:  # the learner sees the exit code and fails with this on stderr
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def vtrace(behaviour_logp, target_logp, discounts, rewards, values, bootstrap):
    """V-trace targets and policy-gradient advantages, rho-bar = c-bar = 1, lambda = 1."""
    with torch.no_grad():
        rhos = (target_logp - behaviour_logp).exp().clamp_max(1.0)
        next_values = torch.cat([values[1:], bootstrap.unsqueeze(0)])
        deltas = rhos * (rewards + discounts * next_values - values)
        decay = discounts * rhos
        acc = torch.zeros_like(bootstrap)
        vs_minus_v = torch.empty_like(values)
        for t in range(values.shape[0] - 1, -1, -1):
            acc = deltas[t] + decay[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + values
        next_vs = torch.cat([vs[1:], bootstrap.unsqueeze(0)])
        pg_advantages = rhos * (rewards + discounts * next_vs - values)
    return vs, pg_advantages


def learn_step(args, model, optimizer, batch):
    """One IMPALA update on a batch of time-major tensors; returns the loss."""
    t_len, b = batch["action"].shape
    logits, values = model(batch["obs"].reshape((t_len + 1) * b, OBSERVATION_SIZE))
    logits = logits.view(t_len + 1, b, NUM_ACTIONS)[:-1]
    values = values.view(t_len + 1, b)
    bootstrap = values[-1].detach()
    values = values[:-1]
    log_pi = F.log_softmax(logits, dim=-1)
    actions = batch["action"].unsqueeze(-1)
    target_logp = log_pi.gather(-1, actions).squeeze(-1)
    behaviour_logp = F.log_softmax(batch["logits"], dim=-1).gather(-1, actions).squeeze(-1)
    discounts = (~batch["done"]).float() * args.discount
    vs, pg_adv = vtrace(behaviour_logp, target_logp.detach(), discounts, batch["reward"],
                        values.detach(), bootstrap)
    pg_loss = -(target_logp * pg_adv).sum()
    baseline_loss = args.baseline_cost * 0.5 * (vs - values).square().sum()
    entropy_loss = args.entropy_cost * (log_pi.exp() * log_pi).sum()  # -cost * H
    loss = pg_loss + baseline_loss + entropy_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--envs-per-actor", type=int, default=16)
    parser.add_argument("--frames", type=int, default=2_000_000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--unroll", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--discount", type=float, default=0.99)
    parser.add_argument("--baseline-cost", type=float, default=0.25)
    parser.add_argument("--entropy-cost", type=float, default=0.01)
    parser.add_argument("--start-method", choices=["fork", "spawn", "forkserver"],
                        default="fork")
    parser.add_argument("--report-every", type=float, default=5.0, help="seconds")
    args = parser.parse_args()
    if args.actors < 1 or args.envs_per_actor < 1 or args.unroll < 1 or args.batch < 1:
        parser.error("--actors, --envs-per-actor, --unroll and --batch must be >= 1")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_len, b = args.unroll, args.batch
    frames_per_step = b * t_len
    total_steps = max(1, -(-args.frames // frames_per_step))
    slots = 2 * b + args.actors * args.envs_per_actor

    ctx = mp.get_context(args.start_method)
    learner_model = PolicyNet(args.hidden)
    model = PolicyNet(args.hidden)  # the actors' copy, in shared memory
    model.load_state_dict(learner_model.state_dict())
    model.share_memory()
    model.eval()
    optimizer = torch.optim.RMSprop(learner_model.parameters(), lr=args.learning_rate,
                                    alpha=0.99, eps=0.01, momentum=0)
    buffers = make_buffers(slots, t_len)
    free_q, full_q = ctx.Queue(), ctx.Queue()
    for s in range(slots):
        free_q.put(s)
    stop = ctx.Event()

    actors = []
    returns = collections.deque(maxlen=100)
    episodes = 0
    step = 0
    failure = None
    started = time.perf_counter()
    elapsed = 0.0
    try:
        for rank in range(args.actors):
            p = ctx.Process(target=act, name=f"actor-{rank}", daemon=True,
                            args=(rank, args, model, buffers, free_q, full_q, stop, os.getpid()))
            p.start()
            actors.append(p)

        def terminated(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, terminated)  # shut the actors down on `timeout` / kill
        print(f"impala_peer: {args.actors} actors x {args.envs_per_actor} CartPole-v1, batch "
              f"{b} x {t_len}, {total_steps} learner steps, {slots} pool slots",
              file=sys.stderr, flush=True)

        def check_actors():
            for p in actors:
                if p.exitcode is not None:
                    raise RuntimeError(f"{p.name} exited with code {p.exitcode}")

        def full_slot():
            waited = 0.0
            while True:
                try:
                    return full_q.get(timeout=POLL_S)
                except queue.Empty:
                    waited += POLL_S
                    check_actors()
                    if waited >= STALL_S:
                        raise RuntimeError(f"no unroll arrived for {STALL_S:.0f} s")

        started = time.perf_counter()
        last_report = started
        loss = float("nan")
        while step < total_steps:
            check_actors()
            taken = [full_slot() for _ in range(b)]
            index = torch.tensor(taken, dtype=torch.int64)
            batch = {k: v[index].transpose(0, 1) for k, v in buffers.items()}
            for s in taken:
                free_q.put(s)
            finished = batch["episode_return"][batch["done"]]
            episodes += finished.numel()
            returns.extend(finished.tolist())
            for group in optimizer.param_groups:
                group["lr"] = args.learning_rate * (total_steps - step) / total_steps
            loss = learn_step(args, learner_model, optimizer, batch)
            with torch.no_grad():
                for shared, learned in zip(model.parameters(), learner_model.parameters()):
                    shared.copy_(learned)
            step += 1
            now = time.perf_counter()
            if now - last_report >= args.report_every or step == total_steps:
                last_report = now
                mean = sum(returns) / len(returns) if returns else float("nan")
                print(f"step {step}/{total_steps} frames {step * frames_per_step} "
                      f"{step * frames_per_step / (now - started):.0f} frames/s "
                      f"return {mean:.1f} episodes {episodes} loss {loss:.3f}",
                      file=sys.stderr, flush=True)
        elapsed = time.perf_counter() - started
    except KeyboardInterrupt:
        failure = "interrupted or terminated"
    except RuntimeError as e:
        failure = str(e)
    finally:
        stop.set()
        for _ in actors:
            free_q.put(None)
        deadline = time.perf_counter() + 5.0
        for p in actors:
            p.join(timeout=max(0.0, deadline - time.perf_counter()))
        for p in actors:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join()
        free_q.cancel_join_thread()
        free_q.close()
        full_q.close()
    if failure is not None:
        print(f"impala_peer: failed: {failure}", file=sys.stderr, flush=True)
        sys.exit(1)

    frames = step * frames_per_step
    result = {"type": "impala_peer", "actors": args.actors,
              "envs_per_actor": args.envs_per_actor, "frames": frames, "steps": step,
              "seconds": elapsed, "frames_per_s": frames / elapsed if elapsed > 0 else 0.0,
              "mean_return": sum(returns) / len(returns) if returns else None,
              "episodes": episodes}
    if args.json:
        print(json.dumps(result), flush=True)
    else:
        print(f"{frames} frames in {elapsed:.1f} s: {result['frames_per_s']:.0f} frames/s, "
              f"mean return {result['mean_return']} over the newest {len(returns)} of "
              f"{episodes} episodes", flush=True)


if __name__ == "__main__":
    main()
