"""Benchmark: one 25-frame step through the whole path against GE-Sim-V2's own server (example model).

The path the product runs in world_model mode: a policy's action chunk published on the policy
namespace -> backend_switch (mode world_model: validation, forwarding) -> world_model node (gesim_http:
trajectory band by forward kinematics, /set_episode_traj, /step) -> GE-Sim-V2's server (their code,
through gesim_ros.tools.gesim_v2_peer) -> the predicted frames published on the contract topics, relayed
by the switch to the policy namespace. Timed per chunk from its publication to its receipt in the
node and its predictions back in the node (the node's BackendStatus counts), and to the chunk's last
predicted head frame on /gesim/policy/gdk/camera/head_color (the node shows the frames on its own
timeline, /clock, which stops while a step is pending and then catches up with the wall clock).
In the same run, their server straight from a client (the gesim_http backend in this process, no ROS):
/set_episode_traj with a 25-frame band plus /step of 25 actions, so the ROS path's overhead shows.
Their example model echoes the actions as state; the node is told so (gripper_state_units normalised),
so a chunk holding the start is valid against the model's state.
Run: .venv/bin/python bench/bench_gesim_step.py [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gesim_ros.ros.process_harness import ProcessGroup, isolate_dds, spin_until
from gesim_ros.tools.gesim_v2_peer import GesimV2Error, GesimV2Unavailable, prepare

DT = 1.0 / 30.0
STEPS = 25


def figures(name: str, seconds: list[float]) -> str:
    ms = np.array(seconds) * 1e3
    return (f"  {name:58s} median {statistics.median(ms):8.1f} ms  p90 {np.percentile(ms, 90):8.1f} ms  "
            f"(n={len(ms)}, min {ms.min():.1f}, max {ms.max():.1f})")


def bare_http(url: str, steps: int) -> tuple[list[float], list[float]]:
    """(/set_episode_traj + /step, /step alone) per step, straight from the gesim_http client."""
    from gesim_ros.world_model.backends.gesim_http import GeSimHttpWorldModel

    model = GeSimHttpWorldModel(url, timeout_s=60.0)
    rng = np.random.default_rng(0)
    model.reset()
    model.set_task("bench")
    model.set_camera_params(np.tile(np.eye(3, dtype=np.float32), (3, 1, 1)),
                            np.tile(np.eye(4, dtype=np.float32), (3, 1, 1)))
    model.set_episode_data(rng.random((3, 3, 384, 512), dtype=np.float32))
    band = rng.random((3, 3, STEPS, 384, 512), dtype=np.float32)
    c2w = np.tile(np.eye(4, dtype=np.float32), (3, STEPS, 1, 1))
    actions = np.full((STEPS, 16), 0.05, np.float32)
    both, alone = [], []
    for _ in range(steps + 1):  # the first is a warm-up
        started = time.perf_counter()
        model.set_episode_traj(band, c2w)
        stepping = time.perf_counter()
        result = model.step(actions)
        done = time.perf_counter()
        assert result.frames.shape[0] == STEPS
        both.append(done - started)
        alone.append(done - stepping)
    model.close()
    return both[1:], alone[1:]


def save_start(folder: Path) -> np.ndarray:
    """One recorded start for the world model's initial_observation (the twin-free world_model mode)."""
    from gesim_ros.contract.contract import load_contract
    from gesim_ros.episodes.data import EpisodeRecord

    names = list(load_contract().arm_joint_names)
    rng = np.random.default_rng(1)
    frames = {v: rng.integers(0, 255, (2, 96, 128, 3), np.uint8) for v in ("head", "left_wrist", "right_wrist")}
    start = np.full(16, 0.05)
    start[-2:] = 0.04
    positions = np.tile(start, (2, 1)).astype(np.float32)
    EpisodeRecord(episode_id="rec-stack", task="stack", task_text="stack the blocks", seed=1, success=True,
                  label="success", control_period_s=DT, joint_names=names, actions=positions[:1],
                  joint_positions=positions, frames=frames).save_npz(folder / "stack.npz")
    return start


def ros_path(url: str, steps: int, tmp: Path) -> dict[str, list[float]]:
    """Per chunk, seconds from its publication on the policy namespace to: the world_model node's
    receipt (its BackendStatus command count; policy -> switch -> node), the step's predictions back in
    the node (its predicted-frame count up by 25: band, gesim_http, their server), and the chunk's last
    predicted head frame on the policy namespace (the first frame stamped at or after the newest frame
    at publication + 25 control periods, to within one frame: held frames between chunks are stamped
    before it)."""
    import rclpy
    from gesim_ros_interfaces.msg import ActionChunk, BackendStatus
    from gesim_ros_interfaces.srv import ResetEpisode

    from gesim_ros.contract.contract import load_contract, message_class, ros_qos
    from gesim_ros.contract.messages import action_chunk_msg, seconds

    contract = load_contract()
    policy_ns, robot_ns = contract.namespace("policy"), contract.namespace("robot")
    wm_ns = contract.namespace("world_model")
    names = list(contract.arm_joint_names)
    start = save_start(tmp)
    config = json.dumps({"url": url, "timeout_s": 60.0, "gripper_state_units": "normalised"})
    procs = ProcessGroup(tmp / "logs")
    rclpy.init()
    node = rclpy.create_node("bench_gesim_step")
    try:
        procs.start("world_model", "--ros-args", "-p", "mode:=world_model", "-p", f"initial_observation:={tmp}",
                    "-p", "publish_clock:=true", "-p", "backend:=gesim_http", "-p", f"backend_config:='{config}'")
        procs.start("backend_switch", "--ros-args", "-p", "mode:=world_model")
        head, frames = contract.topic("head_color"), []
        node.create_subscription(message_class(head.type), head.resolve(policy_ns),
                                 lambda msg: frames.append((time.perf_counter(), seconds(msg.header.stamp))),
                                 ros_qos(head.qos))
        status_spec, counts = contract.topic("backend_status"), []
        node.create_subscription(BackendStatus, status_spec.resolve(wm_ns),
                                 lambda msg: counts.append((time.perf_counter(), *msg.message_counts)),
                                 ros_qos(status_spec.qos))
        chunk_spec = contract.topic("action_chunk")
        chunks = node.create_publisher(ActionChunk, chunk_spec.resolve(policy_ns), ros_qos(chunk_spec.qos))
        sync = node.create_client(ResetEpisode, contract.service("world_model_sync").resolve(robot_ns))
        if not sync.wait_for_service(timeout_sec=60):
            raise RuntimeError(f"world_model_sync never appeared:\n{procs.logs()[-3000:]}")
        for _ in range(20):  # bounded: the node may still be connecting to the server
            future = sync.call_async(ResetEpisode.Request(episode_id="bench", task="stack", seed=1))
            spin_until(node, future.done, 60)
            if future.done() and future.result().success:
                break
            spin_until(node, lambda: False, 0.5)
        else:
            raise RuntimeError(f"world_model_sync failed: {future.result() and future.result().message}")
        if not spin_until(node, lambda: frames and counts and chunks.get_subscription_count() > 0, 60):
            raise RuntimeError(f"no head frame or status reached this node:\n{procs.logs()[-3000:]}")
        spin_until(node, lambda: False, 2.0)  # the switch sees the model's state
        times: dict[str, list[float]] = {"received": [], "predicted": [], "last frame": []}
        for sequence in range(steps + 1):  # the first is a warm-up
            spin_until(node, lambda: False, 0.5)
            commands, predicted = counts[-1][1:3]
            newest = max(stamp for _, stamp in frames)
            seen_frames, seen_counts = len(frames), len(counts)
            published = time.perf_counter()
            chunks.publish(action_chunk_msg(0.0, "base_link", "bench", sequence, names, np.tile(start, (STEPS, 1)), DT))
            last = lambda: [t for t, stamp in frames[seen_frames:] if stamp >= newest + (STEPS - 0.5) * DT]  # noqa: E731
            if not spin_until(node, lambda: bool(last()), 90):
                raise RuntimeError(f"chunk {sequence}: its last predicted frame did not come within 90 s:\n"
                                   f"{procs.logs()[-4000:]}")
            spin_until(node, lambda: counts[-1][2] >= predicted + STEPS, 5)
            received = next((t for t, c, _ in counts[seen_counts:] if c > commands), None)
            done = next((t for t, _, p in counts[seen_counts:] if p >= predicted + STEPS), None)
            if received is None or done is None:
                raise RuntimeError(f"chunk {sequence}: the node's status did not count it: {counts[seen_counts:]}")
            if sequence:
                for key, t in (("received", received), ("predicted", done), ("last frame", last()[0])):
                    times[key].append(t - published)
        return times
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        procs.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps per path (after one warm-up)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    domain = isolate_dds()
    try:
        peer = prepare()
    except (GesimV2Unavailable, GesimV2Error) as exc:
        print(f"bench_gesim_step: cannot prepare GE-Sim-V2's code: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench_gesim_step-") as tmp, peer.server(Path(tmp)) as server:
        both, alone = bare_http(server.url, args.steps)
        path = ros_path(server.url, args.steps, Path(tmp))
    print(f"one {STEPS}-frame step against GE-Sim-V2's server (--model example, 3 views 384x512) on loopback, "
          f"ROS_DOMAIN_ID={domain}, {args.steps} timed steps each")
    print(figures("their server straight: /set_episode_traj + /step", both))
    print(figures("their server straight: /step alone", alone))
    print(figures("whole path: chunk published -> in the world_model node", path["received"]))
    print(figures("whole path: chunk published -> its 25 predictions in the node", path["predicted"]))
    print(figures("whole path: chunk published -> last predicted head frame", path["last frame"]))
    median = statistics.median
    print(f"  medians: switch hop {median(path['received']) * 1e3:.1f} ms; node's step (band + HTTP + server) "
          f"{(median(path['predicted']) - median(path['received'])) * 1e3:.1f} ms against "
          f"{median(both) * 1e3:.1f} ms straight; predictions -> last frame on the policy namespace "
          f"{(median(path['last frame']) - median(path['predicted'])) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
