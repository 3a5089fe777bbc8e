"""The env server's replies, field by field, against gymnasium stepped here with the same seeds.

Usage: env_server_replies.py SERVER_PY

Starts SERVER_PY (python/env_server.py) as the docs do, and calls it over gRPC with the
messages of env.proto: Open, Reset, Steps with random actions through several episodes of
CartPole-v1, and Close. Beside it, the same CartPole-v1 environments made here, seeded as the
server's docstring says (numpy's SeedSequence), stepped with the batched environments'
contract (include/replicator/rl/env.h): observations, rewards, flags, episode returns and
lengths must agree bit for bit. Then the errors: an unknown id, no environments, a wrong
action count, an unknown or closed session, and a session closed by the idle timeout.
Exits 1 on any difference.
"""
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import gymnasium as gym
import numpy as np

ENV, NUM_ENVS, SEED, STEPS = "CartPole-v1", 3, 7, 400


def load_server_module(path):
    spec = importlib.util.spec_from_file_location("env_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Server:
    """An env server process on a free loopback port, and a stub for each of its rpcs."""

    def __init__(self, server_py, log, *flags):
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, server_py, "--port", "0", *flags], stderr=open(log, "w"))
        address = None
        for _ in range(600):
            text = Path(log).read_text()
            if "env server listening on " in text:
                address = text.split("env server listening on ", 1)[1].split()[0]
                break
            if self.process.poll() is not None:
                sys.exit(f"the env server did not start: {text}")
            time.sleep(0.1)
        if address is None:
            sys.exit("the env server named no address within 60 s")
        self.channel = grpc.insecure_channel(address)

    def stub(self, service, messages, name):
        method = service.methods_by_name[name]
        return self.channel.unary_unary(
            f"/{service.full_name}/{name}",
            request_serializer=messages[method.input_type.name].SerializeToString,
            response_deserializer=messages[method.output_type.name].FromString)

    def stop(self):
        self.channel.close()
        self.process.terminate()
        self.process.wait(10)


def expect(condition, what):
    if not condition:
        sys.exit(f"FAIL: {what}")


def expect_error(call, request, code, words, what):
    try:
        call(request, timeout=60)
    except grpc.RpcError as e:
        expect(e.code() == code and words in e.details(),
               f"{what}: {e.code()} '{e.details()}', expected {code} naming '{words}'")
        return
    sys.exit(f"FAIL: {what} succeeded")


class Reference:
    """The session's environments stepped here, with the next-step auto-reset."""

    def __init__(self):
        self.envs = [gym.make(ENV) for _ in range(NUM_ENVS)]
        seeds = [int(c.generate_state(1)[0]) for c in np.random.SeedSequence(SEED).spawn(NUM_ENVS)]
        for env, seed in zip(self.envs, seeds):
            env.reset(seed=seed)
        self.resetting = [False] * NUM_ENVS
        self.running = [(0.0, 0)] * NUM_ENVS

    def reset(self):
        self.resetting = [False] * NUM_ENVS
        self.running = [(0.0, 0)] * NUM_ENVS
        obs = [env.reset()[0] for env in self.envs]
        zeros = [0.0] * NUM_ENVS
        return obs, zeros, [False] * NUM_ENVS, [False] * NUM_ENVS, zeros, [0] * NUM_ENVS

    def step(self, actions):
        out = []
        for i, env in enumerate(self.envs):
            if self.resetting[i]:
                o, r, te, tr = env.reset()[0], 0.0, False, False
                self.resetting[i] = False
            else:
                o, r, te, tr, _ = env.step(int(actions[i]))
                ret, length = self.running[i]
                self.running[i] = (ret + r, length + 1)
            episode = (0.0, 0)
            if te or tr:
                episode, self.running[i], self.resetting[i] = self.running[i], (0.0, 0), True
            out.append((o, r, te, tr, *episode))
        return [list(column) for column in zip(*out)]


def check_reply(reply, expected, what):
    obs, rewards, terminated, truncated, episode_return, episode_length = expected
    expect(reply.dtype == "f32", f"{what}: dtype '{reply.dtype}'")
    fields = [("observations", np.asarray(obs, np.float32).reshape(-1)),
              ("rewards", np.asarray(rewards, np.float32)),
              ("terminated", np.asarray(terminated, np.uint8)),
              ("truncated", np.asarray(truncated, np.uint8)),
              ("episode_return", np.asarray(episode_return, np.float32)),
              ("episode_length", np.asarray(episode_length, np.int32))]
    for name, want in fields:
        got = getattr(reply, name)
        expect(got == want.tobytes(),
               f"{what}: {name} {np.frombuffer(got, want.dtype)}, expected {want}")


def main():
    server_py = sys.argv[1]
    service, messages = load_server_module(server_py).load_messages()
    with tempfile.TemporaryDirectory() as work:
        server = Server(server_py, f"{work}/server.log")
        try:
            calls = {name: server.stub(service, messages, name) for name in service.methods_by_name}
            u8 = lambda v: np.asarray(v, "<u8").tobytes()
            i4 = lambda v: np.asarray(v, "<i4").tobytes()

            opened = calls["Open"](messages["OpenRequest"](env=ENV, num_envs=i4(NUM_ENVS),
                                                           seed=u8(SEED)), timeout=60)
            expect(len(opened.session) == 8, f"session of {len(opened.session)} bytes")
            expect(opened.num_actions == i4(2), f"num_actions {opened.num_actions!r}")
            expect(opened.shape == i4([4]), f"shape {np.frombuffer(opened.shape, '<i4')}")
            session = messages["SessionRequest"](session=opened.session)

            reference = Reference()
            check_reply(calls["Reset"](session, timeout=60), reference.reset(), "reset")
            rng = np.random.default_rng(SEED)
            episodes = 0
            for t in range(STEPS):
                actions = rng.integers(0, 2, NUM_ENVS, dtype=np.int32)
                reply = calls["Step"](messages["StepRequest"](session=opened.session,
                                                              actions=actions.tobytes()),
                                      timeout=60)
                expected = reference.step(actions)
                check_reply(reply, expected, f"step {t}")
                episodes += sum(expected[2]) + sum(expected[3])
            expect(episodes >= 2 * NUM_ENVS, f"only {episodes} episodes ended in {STEPS} steps")
            print(f"{STEPS} steps of {NUM_ENVS} x {ENV}: every field as gymnasium's, "
                  f"{episodes} episodes")

            expect_error(calls["Open"], messages["OpenRequest"](env="NoSuchEnv-v0",
                                                                num_envs=i4(1)),
                         grpc.StatusCode.INVALID_ARGUMENT, "cannot make 'NoSuchEnv-v0'",
                         "an unknown id")
            expect_error(calls["Open"], messages["OpenRequest"](env=ENV, num_envs=i4(0)),
                         grpc.StatusCode.INVALID_ARGUMENT, "num_envs must be at least 1",
                         "no environments")
            expect_error(calls["Step"], messages["StepRequest"](session=opened.session,
                                                                actions=i4([0, 1])),
                         grpc.StatusCode.INVALID_ARGUMENT, "2 actions for 3 environments",
                         "a wrong action count")
            expect_error(calls["Reset"], messages["SessionRequest"](session=u8(1 << 40)),
                         grpc.StatusCode.NOT_FOUND, f"no session {1 << 40}", "an unknown session")
            closed = calls["Close"](session, timeout=60)
            expect(closed.SerializeToString() == b"", "Close replied with fields")
            expect_error(calls["Step"], messages["StepRequest"](session=opened.session,
                                                                actions=i4([0, 0, 0])),
                         grpc.StatusCode.NOT_FOUND, "no session", "a closed session")
            calls["Close"](session, timeout=60)  # closing twice is no error
        finally:
            server.stop()
        print("errors: unknown id, no environments, wrong action count, unknown and closed "
              "sessions")

        idle = Server(server_py, f"{work}/idle.log", "--idle-timeout", "1")
        try:
            opened = idle.stub(service, messages, "Open")(
                messages["OpenRequest"](env=ENV, num_envs=np.asarray(1, "<i4").tobytes()),
                timeout=60)
            for _ in range(300):
                if "closed: unused for" in Path(idle.log).read_text():
                    break
                time.sleep(0.1)
            expect_error(idle.stub(service, messages, "Reset"),
                         messages["SessionRequest"](session=opened.session),
                         grpc.StatusCode.NOT_FOUND, "idle for over 1 s", "an idle session")
        finally:
            idle.stop()
        print("a session unused for --idle-timeout: closed")


if __name__ == "__main__":
    main()
