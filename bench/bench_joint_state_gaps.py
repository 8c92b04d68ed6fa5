"""Benchmark: how long the joint-state streams the backend switch checks commands against go quiet.

Starts the MuJoCo twin (g2_twin, its shipped camera size) as the robot and a synthetic G2
(contract_publisher, camera_scale 0.25) as the world model, and records when each joint state
arrives here (the middleware's reception timestamp). Prints the gaps between arrivals per stream
(p50, p99, p99.9, max) and how many exceed 0.1, 0.5 and 1 s: backend_switch refuses commands while
the newest joint state of the side they are checked against is older than max_state_age_s
(1.0 s shipped), so a gap above it on a healthy stream would refuse commands. The contract rate is
100 Hz (10 ms); run it beside the load the bound must survive (a test run, a lab graph).
Run: .venv/bin/python bench/bench_joint_state_gaps.py [--duration 60]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from gesim_ros.ros.process_harness import ProcessGroup, isolate_dds, spin_until

THRESHOLDS_S = (0.1, 0.5, 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds for start-up and discovery")
    args = parser.parse_args()
    isolate_dds()  # before rclpy is imported

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from gesim_ros.contract.contract import load_contract, message_class, ros_qos

    contract = load_contract()
    spec = contract.topic("joint_states")
    streams = {"g2_twin (robot)": contract.namespace("robot"),
               "contract_publisher (world model)": contract.namespace("world_model")}
    arrivals: dict[str, list[int]] = {name: [] for name in streams}
    procs = ProcessGroup(Path(tempfile.mkdtemp(prefix="bench_joint_state_gaps-")))
    rclpy.init()
    try:
        procs.start("g2_twin")
        procs.start("contract_publisher", "--ros-args", "-p", "side:=world_model", "-p", "camera_scale:=0.25")
        node = rclpy.create_node("bench_joint_state_gaps")
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        for name, namespace in streams.items():
            node.create_subscription(message_class(spec.type), spec.resolve(namespace),
                                     lambda _, info, store=arrivals[name]: store.append(info["received_timestamp"]),
                                     ros_qos(spec.qos), raw=True)

        def spin_for(seconds: float) -> None:
            spin_until(node, lambda: False, seconds, executor)

        spin_for(args.warmup)
        if not all(arrivals.values()):
            missing = [name for name, store in arrivals.items() if not store]
            print(f"no joint state from {', '.join(missing)} after {args.warmup} s of warm-up; logs:\n{procs.logs()}",
                  file=sys.stderr)
            return 2
        for store in arrivals.values():
            store.clear()
        spin_for(args.duration)
    finally:
        procs.stop_all()
        rclpy.try_shutdown()

    print(f"joint-state arrival gaps over {args.duration:.0f} s, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} (contract rate {spec.rate_hz:g} Hz)")
    for name, store in arrivals.items():
        gaps_s = np.diff(np.asarray(store, dtype=np.float64)) / 1e9
        if gaps_s.size == 0:
            print(f"{name:34} fewer than two messages")
            continue
        p50, p99, p999 = np.percentile(gaps_s, [50, 99, 99.9]) * 1e3
        over = ", ".join(f"{int((gaps_s > t).sum())} > {t:g} s" for t in THRESHOLDS_S)
        print(f"{name:34} {len(store) / args.duration:6.1f} msg/s; gaps p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
              f"p99.9 {p999:.1f} ms, max {gaps_s.max() * 1e3:.0f} ms; {over}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
