"""Benchmark of the `g2_twin` node and of `gesim-ros collect`.

Part 1 (real time): g2_twin with every sensor on, at its default camera size (320x200) unless
``--camera-width/--camera-height`` say otherwise, in its own process; topic_monitor in another
process reports what an external subscriber receives per topic against the nominal rate, and the
twin's own diagnostics give the real-time factor (sim s per wall s; paced to at most 1.0) and how
much sim time it had to skip (slips) because the host could not keep up. Target: RTF >= 1.0.
Part 2 (publish_clock): the same node with publish_clock:=true, running as fast as it can: the
RTF there is the headroom (topic rates then scale with it, in wall time).
Part 3 (collect): `gesim-ros collect --task all` for a few episodes: episodes per minute, and the
200-episode estimate.

CPU figures are the twin process's user+system time per sim second (the fairer measure on a shared
machine; wall time is the pace). Run: .venv/bin/python bench/bench_twin.py [--duration 20]
[--episodes 6] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gesim_ros.ros.process_harness import ProcessGroup, executable_path, isolate_dds
from gesim_ros.tools.topic_monitor import format_table


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its reaped children (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12)) / os.sysconf("SC_CLK_TCK")


class TwinStatus:
    """The g2_twin diagnostics (sim time, slips), with when each arrived and the twin's CPU time then."""

    def __init__(self):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray

        from gesim_ros.contract.contract import load_contract, ros_qos

        rclpy.init()
        self.node = rclpy.create_node("bench_twin")
        self.pid: int | None = None
        self.history: list[tuple[float, float, dict[str, str]]] = []   # (monotonic s, twin CPU s, values)
        spec = load_contract().topic("diagnostics")
        self.node.create_subscription(DiagnosticArray, spec.resolve("/"), self._on, ros_qos(spec.qos))

    def _on(self, msg) -> None:
        for status in msg.status:
            if status.name == "g2_twin" and self.pid is not None:
                self.history.append((time.monotonic(), cpu_seconds(self.pid),
                                     {kv.key: kv.value for kv in status.values}))

    def spin(self, seconds: float) -> None:
        import rclpy

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.05)

    def close(self) -> None:
        import rclpy

        self.node.destroy_node()
        rclpy.try_shutdown()


def run_twin(status: TwinStatus, log_dir: Path, duration: float, width: int, height: int,
             publish_clock: bool) -> dict:
    """One g2_twin process watched by topic_monitor for ``duration`` s; its figures over that window."""
    procs = ProcessGroup(log_dir)
    try:
        twin = procs.start("g2_twin", "--ros-args", "-p", f"camera_width:={width}", "-p", f"camera_height:={height}",
                           "-p", f"publish_clock:={str(publish_clock).lower()}")
        status.pid, status.history = twin.process.pid, []
        deadline = time.monotonic() + 120.0
        while len(status.history) < 2:                 # up, and past the first renders
            if time.monotonic() > deadline or not twin.running:
                raise RuntimeError(f"g2_twin did not report its diagnostics:\n{twin.log()}")
            status.spin(0.5)
        report = log_dir / f"monitor-{int(publish_clock)}.json"
        monitor = procs.start("topic_monitor", "--ros-args", "-p", "side:=robot", "-p", f"duration:={duration}",
                              "-p", "warmup:=1.0", "-p", f"json_out:={report}")
        first = len(status.history)
        while monitor.running:
            status.spin(0.5)
        (t0, cpu0, v0), (t1, cpu1, v1) = status.history[first], status.history[-1]
        sim = float(v1["sim_time_s"]) - float(v0["sim_time_s"])
        topics = json.loads(report.read_text())["topics"]
        return {"mode": "publish_clock" if publish_clock else "real time", "camera": [width, height],
                "rtf": sim / (t1 - t0), "cpu_s_per_sim_s": (cpu1 - cpu0) / sim,
                "slipped_s": float(v1["slipped_s"]) - float(v0["slipped_s"]), "wall_s": t1 - t0, "topics": topics}
    finally:
        procs.stop_all()
        status.pid = None


def run_collect(out: Path, episodes: int, width: int, height: int) -> dict:
    """`gesim-ros collect --task all` as a process; episodes per minute from its summary."""
    t0 = time.monotonic()
    proc = subprocess.run([executable_path("gesim-ros"), "collect", "--task", "all", "--episodes", str(episodes),
                           "--failure-rate", "0.3", "--out", str(out), "--camera-width", str(width),
                           "--camera-height", str(height)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"collect failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    summary = json.loads((out / "summary.json").read_text())
    wall = time.monotonic() - t0
    size = sum(f.stat().st_size for f in out.rglob("*.mcap"))
    return {"episodes": episodes, "camera": [width, height], "wall_s": wall,
            "episodes_per_min": summary["episodes_per_min"], "minutes_for_200": 200 / summary["episodes_per_min"],
            "mb_per_episode": size / episodes / 1e6, "labels": summary["labels"]}


def print_twin(r: dict) -> None:
    w, h = r["camera"]
    print(f"\n== g2_twin, {r['mode']}, {w}x{h} cameras: RTF {r['rtf']:.2f} (sim s / wall s), "
          f"{r['cpu_s_per_sim_s']:.2f} CPU s per sim s, skipped {r['slipped_s']:.2f} s of {r['wall_s']:.0f} s ==")
    print(format_table(r["topics"]))
    ratios = {t["topic"]: t["rate_ratio"] for t in r["topics"]}
    lowest = min(ratios, key=ratios.get)
    print(f"lowest rate: {ratios[lowest]:.2f} of nominal ({lowest})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds topic_monitor watches (per mode)")
    parser.add_argument("--camera-width", type=int, default=320)
    parser.add_argument("--camera-height", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=6, help="collect episodes for the throughput (0: skip)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    isolate_dds()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench_twin_") as tmp:
        status = TwinStatus()
        try:
            for publish_clock in (False, True):
                r = run_twin(status, Path(tmp), args.duration, args.camera_width, args.camera_height, publish_clock)
                results["publish_clock" if publish_clock else "real_time"] = r
                print_twin(r)
        finally:
            status.close()
        if args.episodes:
            c = run_collect(Path(tmp) / "collect", args.episodes, args.camera_width, args.camera_height)
            results["collect"] = c
            print(f"\n== collect --task all, {c['camera'][0]}x{c['camera'][1]} cameras: {c['episodes_per_min']:.1f} "
                  f"episodes/min ({c['episodes']} episodes in {c['wall_s']:.0f} s, {c['mb_per_episode']:.0f} MB each): "
                  f"200 episodes in ~{c['minutes_for_200']:.0f} min; labels {c['labels']} ==")
    rt = results["real_time"]
    print(f"\ntarget RTF >= 1.0 in real time: {'met' if rt['rtf'] >= 0.99 else 'NOT met'} ({rt['rtf']:.2f}); "
          f"headroom with publish_clock: {results['publish_clock']['rtf']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
