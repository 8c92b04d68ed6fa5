"""Benchmark: how long the gesim_http client takes to answer, to give up, and to fail fast.

Against `world_model_server` on loopback (in this process, a thread) serving the kinematic baseline:
- step round trip for a 25-step chunk of 3 views (JPEG both ways), p50/p95 over --steps calls;
- a step the model is still working on (a server held longer than the client waits): the time from
  the call to the timeout error, against timeout_s;
- an unreachable server: the time to the "cannot connect" error with connect_retries and
  retry_backoff_s (the backoff sleeps are the floor).
test_gesim_http.py asserts what happens in each case; the figures are here.
Run: .venv/bin/python bench/bench_gesim_http.py [--steps 50] [--timeout 0.3] [--size 64x48]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time

import numpy as np

from gesim_ros.world_model.backends.gesim_http import GeSimHttpWorldModel
from gesim_ros.world_model.backends.kinematic import KinematicWorldModel
from gesim_ros.world_model.api import WorldModelBackendError
from gesim_ros.world_model.server import make_server


class HeldKinematic(KinematicWorldModel):
    """The baseline, whose steps wait while ``hold`` is set (a model busy beyond the client's patience)."""

    def __init__(self):
        super().__init__()
        self.hold, self.release = threading.Event(), threading.Event()

    def step(self, actions):
        if self.hold.is_set():
            self.release.wait(30)
        return super().step(actions)


def seconds_until_error(call) -> float:
    started = time.perf_counter()
    try:
        call()
    except WorldModelBackendError:
        return time.perf_counter() - started
    raise RuntimeError("the call succeeded; expected an error")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="round trips to time")
    parser.add_argument("--timeout", type=float, default=0.3, help="the client's timeout_s for the held step")
    parser.add_argument("--size", default="64x48", help="model image size WxH (GE-Sim's own: 512x384)")
    args = parser.parse_args(argv)
    width, height = map(int, args.size.split("x"))
    backend = HeldKinematic()
    server = make_server(backend, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rng = np.random.default_rng(0)
    first_frame = rng.uniform(0, 1, (3, 3, height, width)).astype(np.float32)
    intrinsic = np.tile(np.array([[300, 0, width / 2], [0, 300, height / 2], [0, 0, 1]], np.float32), (3, 1, 1))

    def start_episode(timeout_s: float) -> GeSimHttpWorldModel:
        client = GeSimHttpWorldModel(url, timeout_s=timeout_s, image_size=[height, width])
        client.reset()
        client.set_camera_params(intrinsic)
        client.set_episode_data(first_frame)
        client.set_task("bench")
        return client

    try:
        client = start_episode(timeout_s=60.0)
        chunk = rng.uniform(-0.5, 0.5, (25, 16)).astype(np.float32)
        trips = []
        for _ in range(args.steps):
            started = time.perf_counter()
            client.step(chunk)
            trips.append(time.perf_counter() - started)
        p50, p95 = statistics.median(trips) * 1e3, np.percentile(trips, 95) * 1e3
        print(f"step round trip, 25 steps x 3 views {width}x{height}: p50 {p50:.1f} ms, p95 {p95:.1f} ms "
              f"({args.steps} calls)")
        client.close()
        client = start_episode(timeout_s=args.timeout)
        backend.hold.set()
        held = seconds_until_error(lambda: client.step(chunk))
        backend.release.set()
        print(f"step held by the server: timeout error after {held:.3f} s (timeout_s={args.timeout:g}, "
              f"overshoot {(held - args.timeout) * 1e3:.0f} ms)")
        client.close()
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    for retries, backoff in ((0, 0.05), (2, 0.05), (3, 0.5)):
        client = GeSimHttpWorldModel(f"http://127.0.0.1:{port}", connect_retries=retries, retry_backoff_s=backoff)
        spent = seconds_until_error(client.reset)
        floor = sum(backoff * 2 ** i for i in range(retries))
        print(f"unreachable server, connect_retries={retries} retry_backoff_s={backoff:g}: error after "
              f"{spent:.3f} s (backoff sleeps {floor:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
