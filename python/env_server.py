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

The messages are env.proto's, read and written by protobuf's runtime: protoc (Debian's
protobuf-compiler) compiles the .proto when the server starts (load_messages). It needs protoc,
grpcio, protobuf and gymnasium (and ale-py for Atari). Prints "env server listening on
HOST:PORT" once it serves. One Python process steps one environment at a time (the GIL): start
one server per core and list them all in --env-servers.

    python env_server.py --bench ALE/Breakout-v5 --envs 16 [--seconds 5]

steps a session in this process instead, with uniformly random actions, as a Python program
would without a server, and prints one JSON line: steps/s (environment steps, all M counted)
of the steps alone and with the reply encoded as the server sends it (`replicator bench
env-server` sets this beside the same session stepped over gRPC).
"""
import argparse
import itertools
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import gymnasium as gym
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SERVICE = "replicator.rl.remote.EnvServer"
PROTO = Path(__file__).resolve().parent.parent / "src" / "rl" / "remote" / "env.proto"


def load_messages(proto=PROTO):
    """env.proto's EnvServer service and its message classes, by message name.

    protoc compiles the .proto to its descriptors each time the server starts (milliseconds), and
    protobuf's runtime makes the classes from them. So the .proto the C++ side is generated from
    stays the one definition: no generated Python file to go stale, none to find in a build
    folder (docs and tests start this file by its path alone). Debian's protoc is the one the
    C++ build runs; grpcio-tools' is not used, since its release for our grpcio (1.76) requires
    a protobuf older than the one in the venv, and descriptors, unlike generated Python, do not
    tie the runtime to the generator's version.
    """
    protoc = shutil.which("protoc")
    if protoc is None:
        sys.exit(f"env server: no protoc on PATH to compile {proto} (Debian's protobuf-compiler; "
                 "scripts/install_deps.sh installs it)")
    if not proto.is_file():
        sys.exit(f"env server: {proto} not found (this file reads it from its source tree)")
    compiled = subprocess.run([protoc, f"-I{proto.parent}", "--descriptor_set_out=/dev/stdout",
                               proto.name], capture_output=True)
    if compiled.returncode != 0:
        sys.exit(f"env server: protoc cannot compile {proto}: {compiled.stderr.decode().strip()}")
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(compiled.stdout).file:
        pool.Add(file)
    service = pool.FindServiceByName(SERVICE)
    messages = {name: message_factory.GetMessageClass(m)
                for name, m in service.file.message_types_by_name.items()}
    return service, messages


# env.proto's integers travel as little-endian bytes fields, as its arrays do.
def value_bytes(value, dtype):
    return np.asarray(value, dtype).tobytes()


def value_of(data, dtype, what, context):
    """The one value a bytes field holds; 0 where it is unset, as an unset integer field is."""
    if not data:
        return 0
    if len(data) != np.dtype(dtype).itemsize:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"{what} is {len(data)} bytes, not {np.dtype(dtype).itemsize}")
    return int(np.frombuffer(data, dtype)[0])


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

    def reply(self, step_reply):
        """This step as a `step_reply` (env.proto's StepReply class)."""
        return step_reply(observations=self.obs.tobytes(), dtype="u8" if self.images else "f32",
                          rewards=self.rewards.tobytes(), terminated=self.terminated.tobytes(),
                          truncated=self.truncated.tobytes(),
                          episode_return=self.episode_return.tobytes(),
                          episode_length=self.episode_length.tobytes())


class Server:
    """The EnvServer service: a method per rpc (Open -> open), on env.proto's messages."""

    def __init__(self, idle_timeout, messages):
        self.sessions = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.idle_timeout = idle_timeout
        self.messages = messages

    def session(self, request, context):
        sid = value_of(request.session, "<u8", "session", context)
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
        env_id = request.env
        num_envs = value_of(request.num_envs, "<i4", "num_envs", context)
        seed = value_of(request.seed, "<u8", "seed", context)
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
        return self.messages["OpenReply"](session=value_bytes(sid, "<u8"),
                                          num_actions=value_bytes(s.num_actions, "<i4"),
                                          shape=value_bytes(s.shape, "<i4"))

    def reset(self, request, context):
        s = self.session(request, context)
        with s.lock:
            s.reset()
            return s.reply(self.messages["StepReply"])

    def step(self, request, context):
        s = self.session(request, context)
        actions = np.frombuffer(request.actions, np.int32)
        if actions.size != len(s.envs):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"{actions.size} actions for {len(s.envs)} environments")
        with s.lock:
            s.step(actions)
            return s.reply(self.messages["StepReply"])

    def close(self, request, context):
        sid = value_of(request.session, "<u8", "session", context)
        with self.lock:
            s = self.sessions.pop(sid, None)
        if s is not None:
            with s.lock:
                for e in s.envs:
                    e.close()
        return self.messages["CloseReply"]()

    def handler(self, service):
        """gRPC's handler of `service` (env.proto's EnvServer) on this object's methods."""
        handlers = {}
        for method in service.methods:
            request = self.messages[method.input_type.name]
            reply = self.messages[method.output_type.name]
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                getattr(self, method.name.lower()), request_deserializer=request.FromString,
                response_serializer=reply.SerializeToString)
        return grpc.method_handlers_generic_handler(service.full_name, handlers)


def bench(env_id, num_envs, seconds, seed):
    """Steps/s of a session stepped in this process: the steps alone, and with the reply."""
    step_reply = load_messages()[1]["StepReply"]
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
                s.reply(step_reply).SerializeToString()
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
    service, messages = load_messages()
    impl = Server(args.idle_timeout, messages)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads),
                         options=[("grpc.max_receive_message_length", -1),
                                  ("grpc.max_send_message_length", -1)])
    server.add_generic_rpc_handlers((impl.handler(service),))
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
