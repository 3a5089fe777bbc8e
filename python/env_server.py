#!/usr/bin/env python3
"""An environment server: batches of gymnasium environments that replicator's C++ actors
step over gRPC (the EnvServer service of src/rl/remote/env.proto; the C++ side is
make_remote_env in include/replicator/rl/remote.h), as PolyBeast's environment servers do.

    python env_server.py --port 7100 [--host 0.0.0.0] [--threads 8]

Each Open makes a session of M environments, seeded from seed (numpy's SeedSequence),
stepped together with the batched environments' contract (include/replicator/rl/env.h):
auto-reset on the next step (its action ignored, reward 0), and the episode's return and
length on the step that ends it. A session unused for --idle-timeout seconds (10 minutes) is
closed: an actor that died cannot close its own. Atari ids ("ALE/Pong-v5") get gymnasium's
standard preprocessing: 84x84 grey, 4 frames skipped with max-pooling, up to 30 no-ops at
reset, 4 stacked frames, as uint8 height x width x frames. Other ids send their observations
as float32, flattened in C order.

The messages have only length-delimited fields, so this file reads and writes protobuf's
wire format itself: it needs grpcio and gymnasium (and ale-py for Atari), not protobuf.
Prints "env server listening on HOST:PORT" once it serves. One Python process steps one
environment at a time (the GIL): start one server per core and list them all in
--env-servers.

    python env_server.py --bench ALE/Breakout-v5 --envs 16 [--seconds 5]

steps a session in this process instead, with uniformly random actions, as a Python program
would without a server, and prints one JSON line: steps/s (environment steps, all M counted)
of the steps alone and with the reply encoded as the server sends it (`replicator bench
env-server` sets this beside the same session stepped over gRPC).
"""
import argparse
import itertools
import json
import signal
import struct
import sys
import threading
import time
from concurrent import futures

import grpc
import gymnasium as gym
import numpy as np

SERVICE = "replicator.rl.remote.EnvServer"


def decode(data):
    """Field number -> bytes, for a message whose fields are all length-delimited."""
    fields = {}
    i = 0

    def varint():
        nonlocal i
        value, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    while i < len(data):
        key = varint()
        if key & 7 != 2:
            raise ValueError(f"field {key >> 3} is not length-delimited")
        n = varint()
        fields[key >> 3] = bytes(data[i:i + n])
        i += n
    return fields


def encode(fields):
    """The wire format of {field number: bytes}."""
    out = bytearray()

    def varint(value):
        while True:
            b = value & 0x7F
            value >>= 7
            out.append(b | (0x80 if value else 0))
            if not value:
                return

    for number, value in sorted(fields.items()):
        varint(number << 3 | 2)
        varint(len(value))
        out += value
    return bytes(out)


def make(env_id):
    """One environment with its preprocessing, and whether it yields uint8 images."""
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        env = gym.make(env_id, frameskip=1)  # v5: sticky actions 0.25
        env = AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True,
                                 noop_max=30, scale_obs=False)
        return FrameStackObservation(env, 4), True
    return gym.make(env_id), False


class Session:
    """M environments stepped together, with the next-step auto-reset."""

    def __init__(self, env_id, num_envs, seed):
        made = [make(env_id) for _ in range(num_envs)]
        self.envs = [e for e, _ in made]
        self.images = made[0][1]
        space = self.envs[0].action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ValueError(f"{env_id}: only discrete action spaces, got {space}")
        self.num_actions = int(space.n)
        # Independent streams per environment, also across sessions with nearby seeds.
        seeds = [int(c.generate_state(1)[0]) for c in np.random.SeedSequence(seed).spawn(num_envs)]
        first = [e.reset(seed=s)[0] for e, s in zip(self.envs, seeds)]
        self.shape = self.observation(first[0]).shape
        m = num_envs
        self.obs = np.stack([self.observation(o) for o in first])
        self.rewards = np.zeros(m, np.float32)
        self.terminated = np.zeros(m, np.uint8)
        self.truncated = np.zeros(m, np.uint8)
        self.episode_return = np.zeros(m, np.float32)
        self.episode_length = np.zeros(m, np.int32)
        self.running_return = np.zeros(m, np.float64)
        self.running_length = np.zeros(m, np.int32)
        self.resetting = np.zeros(m, bool)
        self.lock = threading.Lock()
        self.last_used = time.monotonic()

    def reset(self):
        """Starts a new episode in every environment (reset(): rewards, flags, episodes 0)."""
        for i, env in enumerate(self.envs):
            self.obs[i] = self.observation(env.reset()[0])
        for a in (self.rewards, self.terminated, self.truncated, self.episode_return,
                  self.episode_length, self.running_return, self.running_length):
            a.fill(0)
        self.resetting.fill(False)

    def observation(self, o):
        o = np.asarray(o)
        if self.images:  # frames x H x W -> H x W x frames
            return np.ascontiguousarray(np.transpose(o, (1, 2, 0)), dtype=np.uint8)
        return o.astype(np.float32).reshape(-1)

    def step(self, actions):
        for i, env in enumerate(self.envs):
            if self.resetting[i]:
                o, _ = env.reset()
                r, te, tr = 0.0, False, False
                self.resetting[i] = False
            else:
                o, r, te, tr, _ = env.step(int(actions[i]))
                self.running_return[i] += r
                self.running_length[i] += 1
            self.obs[i] = self.observation(o)
            self.rewards[i] = r
            self.terminated[i] = te
            self.truncated[i] = tr
            if te or tr:
                self.episode_return[i] = self.running_return[i]
                self.episode_length[i] = self.running_length[i]
                self.running_return[i] = 0.0
                self.running_length[i] = 0
                self.resetting[i] = True
            else:
                self.episode_return[i] = 0.0
                self.episode_length[i] = 0

    def reply(self):
        return encode({1: self.obs.tobytes(), 2: b"u8" if self.images else b"f32",
                       3: self.rewards.tobytes(), 4: self.terminated.tobytes(),
                       5: self.truncated.tobytes(), 6: self.episode_return.tobytes(),
                       7: self.episode_length.tobytes()})


class Server:
    def __init__(self, idle_timeout):
        self.sessions = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.idle_timeout = idle_timeout

    def session(self, fields, context):
        sid = struct.unpack("<Q", fields.get(1, b"\0" * 8))[0]
        with self.lock:
            s = self.sessions.get(sid)
        if s is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no session {sid} on this env server "
                          f"(closed, or idle for over {self.idle_timeout:g} s)")
        s.last_used = time.monotonic()
        return s

    def close_idle(self):
        """Closes the sessions unused for idle_timeout: their actor is gone without Close."""
        now = time.monotonic()
        with self.lock:
            idle = [(sid, s) for sid, s in self.sessions.items()
                    if now - s.last_used > self.idle_timeout]
            for sid, _ in idle:
                del self.sessions[sid]
        for sid, s in idle:
            with s.lock:
                for e in s.envs:
                    e.close()
            print(f"env server: session {sid} closed: unused for {now - s.last_used:.0f} s",
                  file=sys.stderr, flush=True)

    def open(self, request, context):
        f = decode(request)
        env_id = f.get(1, b"").decode()
        num_envs = struct.unpack("<i", f.get(2, b"\0" * 4))[0]
        seed = struct.unpack("<Q", f.get(3, b"\0" * 8))[0]
        if num_envs < 1:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "num_envs must be at least 1")
        try:
            s = Session(env_id, num_envs, seed)
        except Exception as e:  # an unknown id, a missing package: the caller's error
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cannot make {env_id!r}: {e}")
        with self.lock:
            sid = next(self.ids)
            self.sessions[sid] = s
        print(f"env server: session {sid}: {num_envs} x {env_id}, observations {s.shape}",
              file=sys.stderr, flush=True)
        return encode({1: struct.pack("<Q", sid), 2: struct.pack("<i", s.num_actions),
                       3: np.asarray(s.shape, np.int32).tobytes()})

    def reset(self, request, context):
        s = self.session(decode(request), context)
        with s.lock:
            s.reset()
            return s.reply()

    def step(self, request, context):
        f = decode(request)
        s = self.session(f, context)
        actions = np.frombuffer(f.get(2, b""), np.int32)
        if actions.size != len(s.envs):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"{actions.size} actions for {len(s.envs)} environments")
        with s.lock:
            s.step(actions)
            return s.reply()

    def close(self, request, context):
        sid = struct.unpack("<Q", decode(request).get(1, b"\0" * 8))[0]
        with self.lock:
            s = self.sessions.pop(sid, None)
        if s is not None:
            with s.lock:
                for e in s.envs:
                    e.close()
        return b""


def bench(env_id, num_envs, seconds, seed):
    """Steps/s of a session stepped in this process: the steps alone, and with the reply."""
    s = Session(env_id, num_envs, seed)
    rng = np.random.default_rng(seed)
    warm_until = time.perf_counter() + min(seconds, 1.0)  # caches, first episodes' resets
    while time.perf_counter() < warm_until:
        s.step(rng.integers(0, s.num_actions, num_envs, dtype=np.int32))
    rates = {}
    for encode_reply in (False, True):
        steps = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            s.step(rng.integers(0, s.num_actions, num_envs, dtype=np.int32))
            if encode_reply:
                s.reply()
            steps += num_envs
        rates[encode_reply] = steps / (time.perf_counter() - start)
    print(json.dumps({"type": "env_server_bench", "env": env_id, "envs": num_envs,
                      "steps_per_s": rates[False], "with_reply_steps_per_s": rates[True]}),
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--threads", type=int, default=8, help="calls served at once")
    parser.add_argument("--idle-timeout", type=float, default=600,
                        help="close a session unused this many seconds (its actor is gone)")
    parser.add_argument("--bench", metavar="ENV_ID",
                        help="step ENV_ID in this process and print steps/s; no server")
    parser.add_argument("--envs", type=int, default=16, help="--bench: environments")
    parser.add_argument("--seconds", type=float, default=5.0, help="--bench: per measurement")
    parser.add_argument("--seed", type=int, default=0, help="--bench: seed")
    args = parser.parse_args()
    if args.bench:
        if args.envs < 1 or args.seconds <= 0:
            sys.exit("env server: --envs must be at least 1 and --seconds positive")
        bench(args.bench, args.envs, args.seconds, args.seed)
        return
    if args.idle_timeout <= 0:
        sys.exit("env server: --idle-timeout must be positive")
    impl = Server(args.idle_timeout)
    raw = dict(request_deserializer=None, response_serializer=None)
    handlers = {name: grpc.unary_unary_rpc_method_handler(fn, **raw) for name, fn in
                (("Open", impl.open), ("Reset", impl.reset), ("Step", impl.step),
                 ("Close", impl.close))}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads),
                         options=[("grpc.max_receive_message_length", -1),
                                  ("grpc.max_send_message_length", -1)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    if port == 0:
        sys.exit(f"env server: cannot listen on {args.host}:{args.port}")
    server.start()
    print(f"env server listening on {args.host}:{port}", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(min(args.idle_timeout / 4, 10.0)):
        impl.close_idle()
    server.stop(1)


if __name__ == "__main__":
    main()
