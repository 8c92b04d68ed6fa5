"""Benchmark: the `world_model` node per backend, as a policy sees it over ROS 2.

For each available backend (kinematic; gesim_http against `gesim-ros serve-wm --backend kinematic` on
loopback; `learned` when its entry point is registered) the node runs in its own process in
world_model mode (wall-clock timeline, 3 views at the contract's default resolution, JPEG) and this
process measures:

* command-to-first-predicted-frame latency: an idle node gets a 25-step chunk; the time from publishing
  it to receiving the first head-camera frame stamped at or after the chunk's first predicted step. It
  cannot be below one control period (33 ms): the predicted observation of step 1 is due one period
  after the command, as on the robot; then up to one camera period for the frame slot;
* real-time factor: CHUNKS chunks queued at once; simulated seconds predicted (steps x control period)
  per wall second until BackendStatus reports them all predicted: inference plus resizing and JPEG
  encoding of every view, with the node publishing at the contract rates meanwhile.

The first frame is smooth synthetic texture (blurred noise: JPEG sizes like camera images, not like
noise). The figures depend on the machine's load, printed with them: other processes share the CPUs.

``--learned-checkpoint CKPT`` measures `learned` with that checkpoint (default: the shipped one);
``--learned-untrained`` with an untrained model of the current architecture at the default
settings, made through train-wm's path with no steps (speed does not depend on the weights).

Run: .venv/bin/python bench/bench_world_model.py [--iterations N] [--chunks N] [--camera-scale S] [--backends B ...]
     [--learned-checkpoint CKPT | --learned-untrained]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from gesim_ros.ros.process_harness import ProcessGroup, isolate_dds, spin_until

isolate_dds()  # before rclpy is imported

import rclpy  # noqa: E402
from gesim_ros_interfaces.msg import ActionChunk, BackendStatus  # noqa: E402
from gesim_ros_interfaces.srv import ResetEpisode  # noqa: E402
from sensor_msgs.msg import CompressedImage  # noqa: E402

from gesim_ros.contract.contract import load_contract, ros_qos  # noqa: E402
from gesim_ros.episodes.data import SCENE_STATE_NAMES, EpisodeRecord  # noqa: E402
from gesim_ros.contract.messages import action_chunk_msg, seconds  # noqa: E402
from gesim_ros.world_model.api import available_world_models  # noqa: E402

CONTRACT = load_contract()
WM, ROBOT = CONTRACT.namespace("world_model"), CONTRACT.namespace("robot")
ARM = list(CONTRACT.arm_joint_names)
DT = 1.0 / 30.0
STEPS = 25


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def home() -> np.ndarray:
    pose = np.full(len(ARM), 0.05)
    pose[-2:] = 0.02
    return pose


def bench_record() -> EpisodeRecord:
    rng = np.random.default_rng(0)
    frames = {v: np.stack([cv2.GaussianBlur(rng.integers(0, 255, (400, 640, 3), np.uint8), (0, 0), 3)] * 2)
              for v in ("head", "left_wrist", "right_wrist")}
    positions = np.tile(home(), (2, 1)).astype(np.float32)
    return EpisodeRecord(episode_id="bench", task="bench", task_text="benchmark", seed=0, success=True,
                         label="success", control_period_s=DT, joint_names=ARM, actions=positions[:1],
                         joint_positions=positions, frames=frames,
                         scene_state=np.zeros((2, len(SCENE_STATE_NAMES)), np.float32))


def untrained_checkpoint(path: Path) -> Path:
    """An untrained model of the current architecture at the default settings, written by train-wm's
    training path with no steps."""
    from gesim_ros.world_model.training import TrainConfig, train

    train([bench_record()], path, TrainConfig(epochs=0), resume=False, progress=None)
    return path


class Client:
    """The policy side: sync, chunks, the head camera and the world model's BackendStatus."""

    def __init__(self, node):
        self.node = node
        head = CONTRACT.camera_for_view("head")
        self.frame_stamps: list[tuple[float, float]] = []  # (received wall time, stamp)
        node.create_subscription(CompressedImage, head.resolve(WM),
                                 lambda m: self.frame_stamps.append((time.time(), seconds(m.header.stamp))),
                                 ros_qos(head.qos))
        self.status: BackendStatus | None = None
        status = CONTRACT.topic("backend_status")
        node.create_subscription(BackendStatus, status.resolve(WM), lambda m: setattr(self, "status", m),
                                 ros_qos(status.qos))
        chunk = CONTRACT.topic("action_chunk")
        self.chunks = node.create_publisher(ActionChunk, chunk.resolve(WM), ros_qos(chunk.qos))
        self.sync_client = node.create_client(ResetEpisode, CONTRACT.service("world_model_sync").resolve(ROBOT))
        self.sequence = 0

    def wait(self, condition, timeout: float) -> bool:
        return spin_until(self.node, condition, timeout)

    def sync(self) -> None:
        if not self.sync_client.wait_for_service(timeout_sec=60):
            raise RuntimeError("world_model_sync never appeared; see the node log")
        for _ in range(30):
            future = self.sync_client.call_async(ResetEpisode.Request(episode_id="bench", task="bench"))
            self.wait(future.done, 120)
            if future.result() is not None and future.result().success:
                break
            self.wait(lambda: False, 1.0)
        else:
            raise RuntimeError(f"world_model_sync failed: {future.result()}")
        self.wait(lambda: self.chunks.get_subscription_count() > 0 and self.status is not None, 30)
        self.wait(lambda: len(self.frame_stamps) > 3, 30)

    def send(self, steps: int = STEPS) -> float:
        """A chunk of small moves around home; returns its publishing wall time."""
        offsets = 0.02 * np.sin(np.linspace(0, np.pi, steps) + self.sequence)[:, None]
        positions = home() + offsets * np.r_[np.ones(14), 0, 0]
        sent = time.time()
        self.chunks.publish(action_chunk_msg(sent, "base_link", "bench", self.sequence, ARM, positions, DT))
        self.sequence += 1
        return sent

    def predicted(self) -> int:
        return self.status.message_counts[1] if self.status else 0


def measure(client: Client, iterations: int, chunks: int) -> dict:
    latencies = []
    for _ in range(iterations):
        before = client.predicted()
        sent = client.send()
        first = sent + DT - 1e-3  # the first predicted step is due one control period after the command
        ok = client.wait(lambda: any(s >= first for _, s in client.frame_stamps[-5:]), 60)
        if not ok:
            raise RuntimeError("no predicted frame within 60 s")
        received = next(r for r, s in client.frame_stamps if s >= first)
        latencies.append(received - sent)
        client.wait(lambda: client.predicted() >= before + STEPS, 60)
        client.wait(lambda: False, STEPS * DT + 0.1)  # let the chunk play out: the node is idle again
        client.frame_stamps.clear()
    before = client.predicted()
    started = time.time()
    for _ in range(chunks):
        client.send()
    if not client.wait(lambda: client.predicted() >= before + chunks * STEPS, 600):
        raise RuntimeError("the queued chunks were not all predicted within 600 s")
    wall = time.time() - started
    return {"latency_ms": np.percentile(np.array(latencies) * 1000, [50, 95]),
            "rtf": chunks * STEPS * DT / wall}


def run_backend(name: str, procs: ProcessGroup, episodes: Path, node, args, learned_ckpt: Path | None) -> dict:
    config = "{}"
    if name == "learned" and learned_ckpt is not None:
        config = f'{{"checkpoint": "{learned_ckpt}"}}'
    if name == "gesim_http":
        port = free_port()
        procs.start("gesim-ros", "serve-wm", "--backend", "kinematic", "--port", str(port))
        config = f'{{"url": "http://127.0.0.1:{port}"}}'
    wm = procs.start("world_model", "--ros-args", "-p", "mode:=world_model", "-p", f"initial_observation:={episodes}",
                     "-p", f"backend:={name}", "-p", f"backend_config:='{config}'",
                     "-p", f"camera_scale:={args.camera_scale}")
    client = Client(node)
    try:
        client.sync()
        return measure(client, args.iterations, args.chunks)
    except RuntimeError as exc:
        return {"error": f"{exc}; log: {wm.log()[-600:]}"}
    finally:
        procs.stop_all()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=15, help="latency samples per backend")
    parser.add_argument("--chunks", type=int, default=12, help="25-step chunks queued for the real-time factor")
    parser.add_argument("--camera-scale", type=float, default=1.0,
                        help="the node's camera_scale (1.0: the contract's resolution)")
    parser.add_argument("--backends", nargs="+", default=["kinematic", "gesim_http", "learned"],
                        help="backends to measure (default: %(default)s)")
    learned = parser.add_mutually_exclusive_group()
    learned.add_argument("--learned-checkpoint", type=Path, metavar="CKPT",
                         help="checkpoint of the learned backend (default: the shipped one)")
    learned.add_argument("--learned-untrained", action="store_true",
                         help="measure learned with an untrained model of the current architecture")
    args = parser.parse_args()
    available = available_world_models()
    backends = args.backends
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        episodes = Path(tmp)
        bench_record().save_npz(episodes / "bench.npz")
        learned_ckpt = untrained_checkpoint(episodes / "untrained.pt") if args.learned_untrained else args.learned_checkpoint
        rclpy.init()
        load_before = os.getloadavg()[0]
        for name in backends:
            if name not in available:
                rows.append((name, None, "not registered (no entry point)"))
                continue
            node = rclpy.create_node(f"bench_{name}")
            try:
                result = run_backend(name, ProcessGroup(episodes / "logs"), episodes / "bench.npz", node, args,
                                     learned_ckpt)
            finally:
                node.destroy_node()
            rows.append((name, result, result.get("error", "")))
        rclpy.try_shutdown()
    sizes = ", ".join(f"{t.key} {int(t.width * args.camera_scale)}x{int(t.height * args.camera_scale)}"
                      for t in CONTRACT.cameras if t.view)
    print(f"world_model node, world_model mode, {sizes} JPEG at 30 Hz; chunks of {STEPS} steps at {1 / DT:.0f} Hz")
    if "learned" in backends:
        print(f"learned: {learned_ckpt or 'the shipped checkpoint'}" + (" (untrained, current architecture)"
                                                                         if args.learned_untrained else ""))
    print(f"{os.cpu_count()} CPUs; 1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"{'backend':12} {'RTF':>6} {'latency p50 ms':>15} {'p95 ms':>8}  note")
    for name, result, note in rows:
        if result and "rtf" in result:
            p50, p95 = result["latency_ms"]
            print(f"{name:12} {result['rtf']:6.2f} {p50:15.0f} {p95:8.0f}  {note}")
        else:
            print(f"{name:12} {'-':>6} {'-':>15} {'-':>8}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
