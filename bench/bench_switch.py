"""Benchmark: the latency backend_switch adds to the policy's observations at the G2's full sensor load.

Starts a synthetic G2 (contract_publisher, camera_scale 1.0: every camera at contract resolution and
rate, joint states, IMU, tactile, LiDAR) and backend_switch (mode real) as processes of their own, and
subscribes here to every sensor topic twice in the same run: directly at the robot's namespace and
relayed at the policy namespace. Latency = receive time - header stamp, the receive time being the
middleware's reception timestamp, taken when the sample reached this process and before Python's
executor picks it up, so this subscriber is not what gets measured (its callbacks only parse the
stamp). Added latency = relayed minus direct latency at the same percentile.
Lost = gaps in the publisher's sequence numbers seen by each subscription; not relayed = messages
seen directly, stamped at least a second before the end, that never came through the switch.
The floor, measured in the same run: bench/bare_relay.py relays every sensor topic with raw
subscriptions and nothing else, the least any relay in Python does.
Target, over all topics: the switch's added p50 <= 1.10 x the bare relay's added p50, its added p99
<= 2 ms, and no message of a reliable stream lost or not relayed. Prints PASS or FAIL per criterion
and overall; exit status 1 on FAIL.
Run: .venv/bin/python bench/bench_switch.py [--duration 20] [--camera-scale 1.0]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gesim_ros.ros.process_harness import ProcessGroup, isolate_dds, spin_until

MAX_P50_OVER_FLOOR = 1.10
MAX_ADDED_P99_MS = 2.0
FLOOR_NAMESPACE = "/bench_floor"  # where bare_relay.py republishes (bench-only, not a contract topic)
EDGE_NS = 1_000_000_000  # messages stamped this close to the end may still be on their way


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def recorder(store: list):
    """A raw-subscription callback that keeps (stamp ns, reception ns, publication sequence number)."""
    from rclpy.serialization import deserialize_message
    from std_msgs.msg import Header

    def on_message(data: bytes, info) -> None:
        stamp = deserialize_message(data, Header).stamp
        store.append((stamp.sec * 1_000_000_000 + stamp.nanosec, info["received_timestamp"],
                      info["publication_sequence_number"]))
    return on_message


def lost(records: list) -> int:
    sequence = [r[2] for r in records if r[2] is not None]
    return (max(sequence) - min(sequence) + 1 - len(sequence)) if sequence else 0


def percentiles_ms(values_ns) -> tuple[float, float]:
    if len(values_ns) == 0:
        return math.nan, math.nan
    p50, p99 = np.percentile(np.asarray(values_ns, dtype=np.float64) / 1e6, [50, 99])
    return float(p50), float(p99)



def latencies_ns(records: list) -> list[int]:
    return [rx - stamp for stamp, rx, _ in records]


def summarise(key: str, reliability: str, direct: list[list], relayed: list[list], end_ns: int) -> dict:
    """One table row over the records of one or more topics (a list of record lists per path)."""
    relayed_stamps = {stamp for records in relayed for stamp, _, _ in records}
    row = {"topic": key, "qos": reliability, "direct": sum(map(len, direct)), "relayed": sum(map(len, relayed)),
           "lost_direct": sum(map(lost, direct)), "lost_relayed": sum(map(lost, relayed)),
           "not_relayed": sum(1 for records in direct for stamp, _, _ in records
                              if stamp < end_ns - EDGE_NS and stamp not in relayed_stamps)}
    row["direct_p50"], row["direct_p99"] = percentiles_ms([ns for r in direct for ns in latencies_ns(r)])
    row["relayed_p50"], row["relayed_p99"] = percentiles_ms([ns for r in relayed for ns in latencies_ns(r)])
    for p in ("p50", "p99"):
        row[f"added_{p}"] = row[f"relayed_{p}"] - row[f"direct_{p}"]
    row["ratio"] = row["added_p50"] / row["direct_p50"]
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'topic':17} {'qos':11} {'direct':>6} {'relayd':>6} {'lost d':>6} {'lost r':>6} {'not rel':>7} "
          f"{'direct p50/p99 ms':>17} {'relayed p50/p99 ms':>18} {'added p50/p99 ms':>16} {'added/direct':>12}")
    for r in rows:
        print(f"{r['topic']:17} {r['qos']:11} {r['direct']:>6} {r['relayed']:>6} {r['lost_direct']:>6} "
              f"{r['lost_relayed']:>6} {r['not_relayed']:>7} {r['direct_p50']:>8.3f}/{r['direct_p99']:<8.3f} "
              f"{r['relayed_p50']:>8.3f}/{r['relayed_p99']:<9.3f} {r['added_p50']:>7.3f}/{r['added_p99']:<8.3f} "
              f"{100 * r['ratio']:>11.0f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds for start-up and discovery")
    parser.add_argument("--camera-scale", type=float, default=1.0, help="camera size relative to the contract's")
    parser.add_argument("--contract", default="g2_gdk", help="contract profile or YAML path")
    args = parser.parse_args()
    isolate_dds()  # before rclpy is imported

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from gesim_ros.contract.contract import load_contract, message_class, ros_qos

    contract = load_contract(args.contract)
    sensors = contract.topics_with_role("sensor")
    procs = ProcessGroup(Path(tempfile.mkdtemp(prefix="bench_switch-")))
    rclpy.init()
    try:
        publisher = procs.start("contract_publisher", "--ros-args", "-p", f"contract:={args.contract}",
                                "-p", f"camera_scale:={args.camera_scale}")
        switch = procs.start("backend_switch", "--ros-args", "-p", f"contract:={args.contract}",
                             "-p", "mode:=real")
        procs.start("python", str(Path(__file__).with_name("bare_relay.py")), "--namespace", FLOOR_NAMESPACE,
                    "--contract", args.contract)
        node = rclpy.create_node("bench_switch")
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        paths = {"direct": contract.namespace("robot"), "relayed": contract.namespace("policy"),
                 "floor": FLOOR_NAMESPACE}
        stores = {(spec.key, path): [] for spec in sensors for path in paths}
        for spec in sensors:
            for path, namespace in paths.items():
                node.create_subscription(message_class(spec.type), spec.resolve(namespace),
                                         recorder(stores[spec.key, path]), ros_qos(spec.qos), raw=True)

        def spin_for(seconds: float) -> None:
            spin_until(node, lambda: False, seconds, executor)

        spin_for(args.warmup)
        if not all(stores.values()):
            missing = sorted(f"{key} ({path})" for (key, path), s in stores.items() if not s)
            print(f"nothing received on {', '.join(missing)} after {args.warmup} s of warm-up; logs:\n"
                  f"{procs.logs()}", file=sys.stderr)
            return 2
        for store in stores.values():
            store.clear()
        pids = {"contract_publisher": publisher.process.pid, "backend_switch": switch.process.pid,
                "bench subscriber": os.getpid()}
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        start = time.monotonic()
        spin_for(args.duration)
        window = time.monotonic() - start
        cpu = {name: (cpu_seconds(pid) - cpu0[name]) / window for name, pid in pids.items()}
        end_ns = time.time_ns()
    finally:
        procs.stop_all()
        rclpy.try_shutdown()

    rows = [summarise(s.key, s.qos.reliability, [stores[s.key, "direct"]], [stores[s.key, "relayed"]], end_ns)
            for s in sensors]
    rows.append(summarise("all topics", "", [stores[s.key, "direct"] for s in sensors],
                          [stores[s.key, "relayed"] for s in sensors], end_ns))
    floor = summarise("bare relay", "", [stores[s.key, "direct"] for s in sensors],
                      [stores[s.key, "floor"] for s in sensors], end_ns)
    print(f"backend_switch relay at full G2 sensor load ({contract.profile}, camera_scale {args.camera_scale}), "
          f"{window:.1f} s measured, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print_table(rows)
    print("CPU (share of one core): " + ", ".join(f"{name} {100 * share:.0f}%" for name, share in cpu.items()))
    switch = rows[-1]
    reliable = [s.key for s in sensors if s.qos.reliability == "reliable"]
    on_reliable = {path: summarise("", "", [stores[key, "direct"] for key in reliable],
                                   [stores[key, path] for key in reliable], end_ns) for path in ("relayed", "floor")}
    switch_missing, floor_missing = ((on_reliable[path]["lost_relayed"], on_reliable[path]["not_relayed"])
                                     for path in ("relayed", "floor"))
    print(f"floor, same run: a bare rclpy relay (raw subscribe -> publish, no logic) adds p50/p99 "
          f"{floor['added_p50']:.3f}/{floor['added_p99']:.3f} ms; on reliable streams {floor_missing[0]} lost, "
          f"{floor_missing[1]} not relayed; backend_switch adds {switch['added_p50'] - floor['added_p50']:.3f} ms "
          "p50 beyond it")
    ratio = switch["added_p50"] / floor["added_p50"]
    checks = [(f"added p50 {switch['added_p50']:.3f} ms = {ratio:.2f} x the bare relay's "
               f"(<= {MAX_P50_OVER_FLOOR:.2f} x)", ratio <= MAX_P50_OVER_FLOOR),
              (f"added p99 {switch['added_p99']:.3f} ms (<= {MAX_ADDED_P99_MS:g} ms)",
               switch["added_p99"] <= MAX_ADDED_P99_MS),
              (f"on reliable streams ({', '.join(reliable)}) {switch_missing[0]} lost, {switch_missing[1]} not "
               "relayed (0)", not any(switch_missing))]
    for what, met in checks:
        print(f"{'PASS' if met else 'FAIL'}  {what}")
    passed = all(met for _, met in checks)
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
