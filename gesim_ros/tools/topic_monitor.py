"""Node `topic_monitor`: what an external subscriber sees on every contract topic.

For each sensor topic of the contract (under the chosen namespace) it reports the message count,
the achieved rate against the nominal one, whether frame ids and camera encodings match the contract,
whether stamps increase and, on reliable streams, messages lost (gaps in the publisher's sequence
numbers). Used by the README's first run, by tests (as the external subscriber) and on a robot
workstation to check a robot against the contract.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from functools import partial

import rclpy
from rclpy.node import Node

from gesim_ros.contract.contract import Contract, TopicSpec, message_class, relay_qos
from gesim_ros.contract.messages import seconds
from gesim_ros.ros.node_setup import declare, declare_contract
from gesim_ros.ros.sequence_numbers import messages_missed


@dataclass
class TopicStats:
    key: str
    topic: str
    type: str
    nominal_hz: float
    expected_frame_id: str
    expected_encoding: str | None = None   # cameras: the contract's encoding
    reliable: bool = False                 # lost messages are counted on reliable streams only
    count: int = 0
    first_rx: float | None = None
    last_rx: float | None = None
    last_stamp: float | None = None
    stamp_regressions: int = 0
    wrong_frame_ids: int = field(default=0)
    wrong_encodings: int = 0
    lost: int = 0
    last_sequence: int | None = None

    def add(self, stamp_s: float, frame_id: str, rx_s: float, encoding: str | None = None,
            sequence: int | None = None) -> None:
        """One message: its header, when it arrived, its camera encoding and its publication sequence
        number (None where the middleware gives none)."""
        self.count += 1
        self.first_rx = rx_s if self.first_rx is None else self.first_rx
        self.last_rx = rx_s
        if self.last_stamp is not None and stamp_s <= self.last_stamp:
            self.stamp_regressions += 1
        self.last_stamp = stamp_s
        if frame_id != self.expected_frame_id:
            self.wrong_frame_ids += 1
        if self.expected_encoding is not None and encoding != self.expected_encoding:
            self.wrong_encodings += 1
        if self.reliable and sequence is not None:
            self.lost += messages_missed(self.last_sequence, sequence)
            self.last_sequence = sequence

    def rate_hz(self, window_s: float) -> float:
        return self.count / window_s if window_s > 0 else 0.0

    def row(self, window_s: float) -> dict:
        rate = self.rate_hz(window_s)
        return {**asdict(self), "rate_hz": round(rate, 2),
                "rate_ratio": round(rate / self.nominal_hz, 3) if self.nominal_hz else None}


def camera_encoding(msg) -> str | None:
    """What a contract's camera ``encoding`` names for this message: an Image's encoding, or the
    compression of a CompressedImage ("rgb8; jpeg compressed bgr8" -> "jpeg"); None for other types."""
    if hasattr(msg, "format"):
        words = msg.format.split(";")[-1].split()
        return words[0] if words else ""
    return getattr(msg, "encoding", None)


def format_table(rows: list[dict]) -> str:
    lines = [f"{'topic':42} {'type':34} {'msgs':>6} {'rate Hz':>8} {'nominal':>8} {'ratio':>6} "
             f"{'frame ok':>8} {'enc ok':>6} {'stamps ok':>9} {'lost':>5}"]
    for r in rows:
        lines.append(f"{r['topic']:42} {r['type']:34} {r['count']:>6} {r['rate_hz']:>8.1f} "
                     f"{r['nominal_hz']:>8.1f} {r['rate_ratio'] if r['rate_ratio'] is not None else '-':>6} "
                     f"{'yes' if r['wrong_frame_ids'] == 0 and r['count'] else 'NO':>8} "
                     f"{'yes' if r['wrong_encodings'] == 0 and r['count'] else 'NO':>6} "
                     f"{'yes' if r['stamp_regressions'] == 0 and r['count'] else 'NO':>9} "
                     f"{r['lost'] if r['reliable'] else '-':>5}")
    return "\n".join(lines)


class TopicMonitor(Node):
    def __init__(self):
        super().__init__("topic_monitor")
        self.contract: Contract = declare_contract(self)
        side = declare(self, "side", "robot", "namespace to watch: robot, world_model or policy", read_only=True)
        self.duration = declare(self, "duration", 5.0, "seconds to watch before reporting and exiting (<=0: forever)")
        self.warmup = declare(self, "warmup", 1.0, "seconds to wait for discovery before counting")
        self.json_out = declare(self, "json_out", "", "also write the per-topic figures to this JSON file")
        namespace = self.contract.namespace(side)
        self.stats: dict[str, TopicStats] = {}
        self.counting = False
        for spec in self.contract.topics_with_role("sensor"):
            topic = spec.resolve(namespace)
            self.stats[spec.key] = TopicStats(spec.key, topic, spec.type, spec.rate_hz or 0.0, spec.frame_id,
                                              spec.encoding, spec.qos.reliability == "reliable")
            # (msg, info): rclpy passes the message info, with the publication sequence number. A reliable
            # stream keeps the switch's 1 s of history, so a stall of this process loses nothing: a
            # message lost is one the publisher or DDS lost.
            self.create_subscription(message_class(spec.type), topic, partial(self._on_msg, spec), relay_qos(spec))

    def _on_msg(self, spec: TopicSpec, msg, info) -> None:
        if self.counting:
            self.stats[spec.key].add(seconds(msg.header.stamp), msg.header.frame_id, time.monotonic(),
                                     camera_encoding(msg), info.get("publication_sequence_number"))

    def watch(self) -> list[dict]:
        deadline = time.monotonic() + self.warmup
        while rclpy.ok() and time.monotonic() < deadline:
            rclpy.spin_once(self, timeout_sec=0.05)
        self.counting = True
        start = time.monotonic()
        while rclpy.ok() and (self.duration <= 0 or time.monotonic() - start < self.duration):
            rclpy.spin_once(self, timeout_sec=0.05)
        window = time.monotonic() - start
        rows = [s.row(window) for s in self.stats.values()]
        if self.json_out:
            with open(self.json_out, "w") as f:
                json.dump({"window_s": window, "topics": rows}, f, indent=2)
        return rows


def main(args=None):
    rclpy.init(args=args)
    node = TopicMonitor()
    try:
        rows = node.watch()
        print(format_table(rows), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
