"""The floor under bench_switch.py's figures: a relay in Python with no logic.

Relays every sensor topic of the contract from the robot namespace to ``--namespace`` with raw
subscriptions and the contract's QoS, and nothing else (no switch logic, no counting, no status).
Its endpoints keep rclpy's default QoS event handlers, as a relay written with rclpy's defaults
would (backend_switch's relay endpoints have none: each handler is a waitable the executor visits
on every wake-up). bench_switch.py starts it beside backend_switch and measures both hops in the same run.
Run: .venv/bin/python bench/bare_relay.py --namespace /bench_floor [--contract g2_gdk]
"""

from __future__ import annotations

import argparse

import rclpy
from rclpy.executors import ExternalShutdownException

from gesim_ros.contract.contract import load_contract, message_class, ros_qos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namespace", required=True, help="namespace to publish the relayed topics under")
    parser.add_argument("--contract", default="g2_gdk", help="contract profile or YAML path")
    args = parser.parse_args()
    contract = load_contract(args.contract)
    rclpy.init()
    node = rclpy.create_node("bare_relay")
    for spec in contract.topics_with_role("sensor"):
        msg_type, qos = message_class(spec.type), ros_qos(spec.qos)
        publisher = node.create_publisher(msg_type, spec.resolve(args.namespace), qos)
        node.create_subscription(msg_type, spec.resolve(contract.namespace("robot")), publisher.publish, qos, raw=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
