"""Benchmark: the per-topic rates an outside subscriber receives from the synthetic G2.

For each contract profile, `contract_publisher` in one process and `topic_monitor` in another (what
`gesim-ros contract-demo` runs): messages, achieved rate against the contract's nominal one, and the
conformance columns test_contract_on_the_wire.py asserts (frames, encodings, stamps, reliable losses).
Rates depend on the machine and its load, so they are printed here, never asserted in tests.
Run: .venv/bin/python bench/bench_contract_rates.py [--seconds 10] [--camera-scale 0.25]
"""

from __future__ import annotations

import argparse
import sys

from gesim_ros.tools.contract_demo import run as watch_contract_publisher


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", nargs="+", default=["g2_gdk", "genie_sim"])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long topic_monitor watches each profile")
    parser.add_argument("--camera-scale", type=float, default=0.25, help="camera resolution vs the contract's")
    args = parser.parse_args(argv)
    failed = 0
    for profile in args.profiles:
        print(f"\n== contract_publisher, profile {profile}, cameras x{args.camera_scale} ==", flush=True)
        failed |= watch_contract_publisher(argparse.Namespace(contract=profile, seconds=args.seconds,
                                                              camera_scale=args.camera_scale))
    return failed


if __name__ == "__main__":
    sys.exit(main())
