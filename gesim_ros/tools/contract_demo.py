"""`gesim-ros contract-demo`: start a synthetic G2 (`contract_publisher`) in its own process and
report what an external subscriber (`topic_monitor`) sees on every contract topic."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from gesim_ros.contract.contract import DEFAULT_PROFILE
from gesim_ros.ros.process_harness import ProcessGroup, isolate_dds
from gesim_ros.tools.topic_monitor import format_table


def add_arguments(parser) -> None:
    parser.add_argument("--contract", default=DEFAULT_PROFILE, help="contract profile or YAML path")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to watch the topics")
    parser.add_argument("--camera-scale", type=float, default=0.5, help="camera resolution vs the contract's")


def run(args) -> int:
    domain = isolate_dds()
    with tempfile.TemporaryDirectory(prefix="gesim-demo-") as tmp:
        procs = ProcessGroup(Path(tmp))
        report = Path(tmp) / "topics.json"
        try:
            procs.start("contract_publisher", "--ros-args", "-p", f"contract:={args.contract}",
                        "-p", f"camera_scale:={args.camera_scale}")
            monitor = procs.start("topic_monitor", "--ros-args", "-p", f"contract:={args.contract}",
                                  "-p", f"duration:={args.seconds}", "-p", f"json_out:={report}")
            print(f"ROS_DOMAIN_ID={domain}, discovery localhost only; watching for {args.seconds:.0f} s ...",
                  flush=True)
            monitor.process.wait(timeout=args.seconds + 60)
        finally:
            procs.stop_all()
        if not report.exists():
            print(procs.logs())
            return 1
        rows = json.loads(report.read_text())["topics"]
        print(format_table(rows))
        return 0 if all(r["count"] for r in rows) else 1
