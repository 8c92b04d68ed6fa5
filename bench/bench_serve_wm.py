"""Benchmark: serve-wm's per-request overhead against GE-Sim-V2's own server, in the same run.

Both servers run as processes of their own on loopback: `gesim-ros serve-wm --backend kinematic` and
GE-Sim-V2's `python -m gesim.server --model example` (their code through gesim_ros.tools.gesim_v2_peer).
One client (http.client, one connection each) sends small requests, interleaved in rounds so that a
change in the host's load touches both alike: POST /set_task (JSON in and out, a session check and
a backend call), GET /healthz, GET /api/status. Per endpoint: median and p95 in ms of each server,
and the ratio of the medians, serve-wm over GE-Sim (target <= 1.2x).
GE-Sim's server speaks HTTP/1.0 and closes the connection after each reply, so its client reconnects
for every request; serve-wm keeps the connection (HTTP/1.1 keep-alive).
Run: .venv/bin/python bench/bench_serve_wm.py [--requests 600] [--rounds 6]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gesim_ros.ros.process_harness import NodeProcess
from gesim_ros.tools.gesim_v2_peer import GesimV2Error, GesimV2Unavailable, prepare

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


@contextlib.contextmanager
def server_process(name: str, args: list[str], log_dir: Path, env: dict[str, str] | None = None):
    """Start executable ``name``; yield its process once its log says 'listening on http://...'; stop it."""
    proc = NodeProcess(name, args, log_dir, env)
    try:
        deadline = time.monotonic() + 120
        while not LISTENING.search(proc.log()):
            if not proc.running or time.monotonic() > deadline:
                raise RuntimeError(f"{name} {' '.join(args)} did not start:\n{proc.log()}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.stop()


def listening_port(proc: NodeProcess) -> int:
    return int(LISTENING.search(proc.log()).group(1))


class Client:
    """One http.client connection (it reconnects by itself where a server closes after each reply)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.client_id = self.call("POST", "/init", {"user_name": "bench"})["client_id"]

    def call(self, method: str, path: str, obj: dict | None = None, close: bool = False) -> dict:
        body = None if obj is None else json.dumps(obj).encode()
        headers = {} if obj is None else {"Content-Type": "application/json"}
        if close:
            headers["Connection"] = "close"
        self.conn.request(method, path, body, headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{method} {path} -> {resp.status}: {data[:200]!r}")
        return json.loads(data)

    def requests(self) -> dict[str, tuple[str, str, dict | None, bool]]:
        set_task = ("POST", "/set_task", {"client_id": self.client_id, "task": "bench"})
        return {
            "POST /set_task": (*set_task, False),
            "GET /healthz": ("GET", "/healthz", None, False),
            "GET /api/status": ("GET", "/api/status", None, False),
            "POST /set_task, Connection: close": (*set_task, True),  # both reconnect: like for like
        }


def time_batch(client: Client, request: tuple[str, str, dict | None, bool], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.call(*request)
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=600, help="requests per endpoint and server")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds the requests are split into")
    args = parser.parse_args(argv)
    if args.requests < args.rounds or args.rounds < 1:
        parser.error("--requests must be at least --rounds, and --rounds at least 1")
    try:
        peer = prepare()
    except (GesimV2Unavailable, GesimV2Error) as exc:
        print(f"bench_serve_wm: cannot prepare GE-Sim-V2's code: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench_serve_wm-") as tmp, \
            server_process("gesim-ros", ["serve-wm", "--backend", "kinematic", "--port", "0"], Path(tmp)) as ours, \
            peer.server(Path(tmp)) as theirs:
        clients = {"serve-wm": Client(listening_port(ours)), "GE-Sim": Client(theirs.port)}
        plans = {name: client.requests() for name, client in clients.items()}
        times: dict[tuple[str, str], list[float]] = {}
        per_round = args.requests // args.rounds
        for name, client in clients.items():  # warm up: imports, first allocations, the first connection
            for request in plans[name].values():
                time_batch(client, request, 20)
        for _ in range(args.rounds):
            for endpoint in plans["serve-wm"]:
                for name, client in clients.items():
                    times.setdefault((endpoint, name), []).extend(time_batch(client, plans[name][endpoint], per_round))
        for client in clients.values():
            client.conn.close()
    print(f"per-request time on loopback, {per_round * args.rounds} requests per endpoint and server, "
          f"{args.rounds} interleaved rounds (serve-wm --backend kinematic: one keep-alive connection; "
          "GE-Sim --model example: HTTP/1.0, a new connection per request)")
    for endpoint in plans["serve-wm"]:
        ours, theirs = times[(endpoint, "serve-wm")], times[(endpoint, "GE-Sim")]
        ours_ms, theirs_ms = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        print(f"  {endpoint:34s} serve-wm median {ours_ms:.3f} ms (p95 {np.percentile(ours, 95) * 1e3:.3f}), "
              f"GE-Sim median {theirs_ms:.3f} ms (p95 {np.percentile(theirs, 95) * 1e3:.3f}); "
              f"ratio {ours_ms / theirs_ms:.2f}x (target <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
