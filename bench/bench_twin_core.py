"""Benchmark of the MuJoCo twin's physics core (in-process, no ROS).

Part 1 plays one clean scripted episode per task with every sensor read at its contract rate
(cameras and head depth 30 Hz, joint states and IMU 100 Hz, tactile 50 Hz, lidar 10 Hz; commands at
the controller's 30 Hz) and prints the real-time factor (simulated s / wall s) and each sensor's cost.
Part 2 runs scripted episodes at a failure rate and prints the outcome mix per task: the success
fraction against 1 - failure_rate, and which label each injected failure mode produced.

Run: .venv/bin/python bench/bench_twin_core.py [--episodes 30] [--failure-rate 0.3] [--width 320 --height 200]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from gesim_ros.contract.contract import load_contract
from gesim_ros.twin.controllers import make_controller, run_episode
from gesim_ros.twin.physics import G2Twin
from gesim_ros.twin.tasks import TASKS


def sensor_jobs(twin: G2Twin, ctrl, clock: list[float]) -> dict[str, tuple[float, Callable[[], object]]]:
    """name -> (rate Hz, call); rates from the contract. RGB precedes depth at equal times so the
    depth render reuses the head camera's scene."""
    c = twin.contract
    names = ctrl.plan.joint_names
    return {
        "control": (1.0 / ctrl.period_s, lambda: twin.set_joint_targets(names, ctrl.chunk_at(clock[0])[0])),
        "cameras_rgb_x3": (c.topic("head_color").rate_hz, twin.render_cameras),
        "head_depth": (c.topic("head_depth").rate_hz, twin.render_head_depth),
        "joint_state": (c.topic("joint_states").rate_hz, twin.joint_state),
        "imu": (c.topic("imu").rate_hz, twin.imu),
        "tactile_x2": (c.topic("tactile_left").rate_hz, twin.tactile),
        "lidar": (c.topic("lidar").rate_hz, twin.lidar),
    }


class Meter:
    """Wall and process-CPU seconds and call counts per named cost. CPU time includes the software
    GL threads; on a shared machine it is the fairer measure of the work, wall time of the pace."""

    def __init__(self):
        self.cost: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])

    def run(self, name: str, fn: Callable[[], object], *args) -> None:
        w, c = time.perf_counter(), time.process_time()
        fn(*args)
        entry = self.cost[name]
        entry[0] += time.perf_counter() - w
        entry[1] += time.process_time() - c
        entry[2] += 1

    def total(self, index: int, exclude: str = "reset+renderer") -> float:
        return sum(v[index] for k, v in self.cost.items() if k != exclude)


def bench_sensors(twin: G2Twin, task: str, seed: int, meter: Meter) -> tuple[float, str]:
    """Play one clean episode with all sensors at their rates, metering each call;
    -> (simulated s, outcome label)."""
    ctrl = make_controller(task, seed)

    def reset() -> None:
        twin.reset(task, seed)
        twin.render_cameras()   # the renderer (GL context) is created on first use after each reset

    meter.run("reset+renderer", reset)
    clock = [0.0]
    jobs = sensor_jobs(twin, ctrl, clock)
    due = {name: 0.0 for name in jobs}
    while not twin.done:
        name = min(due, key=due.get)
        if due[name] > clock[0]:
            meter.run("physics", twin.step, due[name] - clock[0])
            clock[0] = due[name]
        meter.run(name, jobs[name][1])
        due[name] += 1.0 / jobs[name][0]
    return twin.time, twin.outcome().label


def report_sensors(twin: G2Twin, tasks: list[str], seed: int) -> None:
    print(f"== Real-time factor, all sensors at contract rates ({twin.camera_width}x{twin.camera_height} "
          f"cameras, physics dt {twin.physics_dt * 1000:.0f} ms) ==")
    total = Meter()
    sim = 0.0
    for task in tasks:
        meter = Meter()
        task_sim, label = bench_sensors(twin, task, seed, meter)
        phys = [meter.cost["physics"][i] + meter.cost["control"][i] for i in (0, 1)]
        print(f"{task:11s} sim {task_sim:4.2f} s | RTF with sensors: {task_sim / meter.total(0):5.2f} wall, "
              f"{task_sim / meter.total(1):5.2f} cpu | physics+control only: {task_sim / phys[0]:5.1f} wall, "
              f"{task_sim / phys[1]:5.1f} cpu ({label})")
        for k, v in meter.cost.items():
            total.cost[k] = [a + b for a, b in zip(total.cost[k], v)]
        sim += task_sim
    print(f"\n{'cost':15s} {'calls':>6s} {'wall ms/call':>13s} {'cpu ms/call':>12s} {'cpu ms/sim s':>13s} "
          f"{'cpu share':>9s}")
    cpu = total.total(1)
    for k, (w, c, n) in sorted(total.cost.items(), key=lambda kv: -kv[1][1]):
        share = f"{100 * c / cpu:8.1f}%" if k != "reset+renderer" else "   (once)"
        print(f"{k:15s} {n:6d} {1000 * w / n:13.3f} {1000 * c / n:12.3f} {1000 * c / sim:13.1f} {share}")
    print(f"all tasks: RTF {sim / total.total(0):.2f} wall, {sim / cpu:.2f} cpu "
          f"(simulated {sim:.1f} s in {total.total(0):.1f} s wall, {cpu:.1f} s cpu)\n")


def report_outcomes(twin: G2Twin, tasks: list[str], episodes: int, failure_rate: float, seed_start: int) -> None:
    print(f"== Outcome mix: {episodes} episodes per task at failure_rate {failure_rate} ==")
    for task in tasks:
        labels, by_mode, agree = Counter(), defaultdict(Counter), 0
        t0 = time.perf_counter()
        for seed in range(seed_start, seed_start + episodes):
            ctrl = make_controller(task, seed, failure_rate)
            outcome = run_episode(twin, ctrl)
            labels[outcome.label] += 1
            by_mode[ctrl.failure_mode or "none (clean)"][outcome.label] += 1
            agree += outcome.label == ctrl.plan.expected_label
        injected = episodes - sum(by_mode["none (clean)"].values())
        success = labels["success"] / episodes
        print(f"{task}: success {success:.2f} vs 1 - F = {1 - failure_rate:.2f} "
              f"({(success - (1 - failure_rate)) * 100:+.0f} points); injected {injected}/{episodes} "
              f"-> 1 - injected rate = {1 - injected / episodes:.2f}; label as expected {agree}/{episodes}; "
              f"{(time.perf_counter() - t0) / episodes:.2f} s wall per episode")
        print(f"   labels: {dict(labels.most_common())}")
        for mode, cnt in sorted(by_mode.items()):
            print(f"   {mode:14s} -> {dict(cnt.most_common())}")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=sorted(TASKS), choices=sorted(TASKS))
    parser.add_argument("--episodes", type=int, default=30, help="episodes per task for the outcome mix")
    parser.add_argument("--failure-rate", type=float, default=0.3)
    parser.add_argument("--seed-start", type=int, default=0)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=200)
    parser.add_argument("--skip-sensors", action="store_true", help="only the outcome mix")
    parser.add_argument("--skip-outcomes", action="store_true", help="only the real-time factor")
    args = parser.parse_args(argv)
    twin = G2Twin(load_contract(), camera_width=args.width, camera_height=args.height)
    if not args.skip_sensors:
        report_sensors(twin, args.tasks, args.seed_start)
    if not args.skip_outcomes:
        report_outcomes(twin, args.tasks, args.episodes, args.failure_rate, args.seed_start)
    twin.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
