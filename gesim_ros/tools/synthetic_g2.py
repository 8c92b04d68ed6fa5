"""Node `contract_publisher`: a synthetic G2 that publishes every sensor topic of the contract.

It is the load generator for tests and benchmarks (a stand-in robot or world-model publisher at
full contract rate and resolution) and the first thing to run on a new machine to see the
contract on the wire. Camera frames are a moving test pattern encoded once per frame slot and
reused, so the publisher itself costs little CPU.
"""

from __future__ import annotations

import math
import time

import numpy as np
from rclpy.node import Node

from gesim_ros.contract.contract import message_class, ros_qos
from gesim_ros.contract.image_codec import colour_camera_msg, to_image_msg
from gesim_ros.contract.messages import imu_msg, joint_state_msg, point_cloud_msg, tactile_msg, time_msg
from gesim_ros.ros.node_setup import declare, declare_contract, run_node

PATTERN_FRAMES = 8  # distinct pre-encoded frames per camera


class _Grid:
    rows = cols = 4
    resolution_x_mm = resolution_y_mm = 4.0

    def __init__(self, phase: float):
        self.normal = np.full(16, 100.0 + 50.0 * math.sin(phase), np.float32)
        self.shear_x = self.shear_y = np.zeros(16, np.float32)
        self.contact = self.normal > 0
        self.valid = np.ones(16, bool)


class ContractPublisher(Node):
    def __init__(self):
        super().__init__("contract_publisher")
        self.contract = declare_contract(self)
        side = declare(self, "side", "robot", "namespace to publish under: robot, world_model or policy",
                       read_only=True)
        self.marker = declare(self, "joint_offset", 0.0,
                              "added to every joint position (tells two synthetic sources apart)",
                              read_only=True)
        scale = declare(self, "camera_scale", 1.0, "camera resolution relative to the contract's",
                        read_only=True)
        self.stamp_marker = declare(self, "stamp_marker", 0,
                                    "0, or 1-999: every stamp's nanoseconds modulo 1000 (tells sources apart "
                                    "on any topic from the header alone, e.g. behind the backend switch)",
                                    read_only=True)
        if not 0 <= self.stamp_marker <= 999:
            raise ValueError(f"parameter stamp_marker is {self.stamp_marker}; use 0 (off) or 1-999")
        namespace = self.contract.namespace(side)
        self.names = list(self.contract.joint_names)
        self.mid = np.array([np.mean(self.contract.joint_limits[n]) for n in self.names])
        self.sequence = 0
        self.start = time.monotonic()
        self.publishers_ = {}
        self.frames = {}
        for spec in self.contract.topics_with_role("sensor"):
            pub = self.create_publisher(message_class(spec.type), spec.resolve(namespace), ros_qos(spec.qos))
            self.publishers_[spec.key] = pub
            if spec.is_camera:
                self.frames[spec.key] = self._pattern(spec, scale)
            self.create_timer(1.0 / spec.rate_hz, lambda s=spec: self._publish(s))
        self.get_logger().info(f"publishing {len(self.publishers_)} contract topics under '{namespace}' "
                               f"({self.contract.profile})")

    def _pattern(self, spec, scale: float) -> list:
        w, h = max(8, int(spec.width * scale)), max(8, int(spec.height * scale))
        x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
        y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
        frames = []
        for k in range(PATTERN_FRAMES):
            shift = k / PATTERN_FRAMES
            if spec.encoding in ("16UC1", "32FC1"):
                depth_m = 0.5 + 1.5 * ((x + shift) % 1.0) * np.ones_like(y)
                img = (depth_m * 1000).astype(np.uint16) if spec.encoding == "16UC1" else depth_m.astype(np.float32)
                frames.append(to_image_msg(img, spec.encoding))
                continue
            rgb = np.stack([(x + shift) % 1.0 * np.ones_like(y), y * np.ones_like(x),
                            np.full((h, w), 0.5 + 0.1 * self.marker, np.float32)], -1)
            rgb = (np.clip(rgb, 0, 1) * 255).astype(np.uint8)
            frames.append(colour_camera_msg(rgb, spec.type, spec.encoding))
        return frames

    def _publish(self, spec) -> None:
        now = self.get_clock().now().nanoseconds * 1e-9
        t = time.monotonic() - self.start
        if spec.is_camera:
            msg = self.frames[spec.key][int(t * spec.rate_hz) % PATTERN_FRAMES]
            msg.header.stamp = time_msg(now)
            msg.header.frame_id = spec.frame_id
        elif spec.type.endswith("JointState"):
            pos = self.mid + 0.1 * math.sin(t) + self.marker
            msg = joint_state_msg(now, spec.frame_id, self.names, pos, np.full(len(pos), 0.1 * math.cos(t)),
                                  np.zeros(len(pos)))
        elif spec.type.endswith("Imu"):
            msg = imu_msg(now, spec.frame_id, (0, 0, 0, 1), (0, 0, 0.01 * math.sin(t)), (0, 0, 9.81))
        elif spec.type.endswith("PointCloud2"):
            az = np.linspace(-math.pi, math.pi, 360, endpoint=False)
            pts = np.stack([3 * np.cos(az), 3 * np.sin(az), np.zeros_like(az)], -1)
            msg = point_cloud_msg(now, spec.frame_id, pts)
        elif spec.type.endswith("Tactile"):
            msg = tactile_msg(now, spec.frame_id, _Grid(t))
        else:
            raise ValueError(f"contract_publisher cannot synthesise {spec.type} for topic '{spec.key}'")
        if self.stamp_marker:
            stamp = msg.header.stamp
            stamp.nanosec += self.stamp_marker - stamp.nanosec % 1000
        self.publishers_[spec.key].publish(msg)


def main(args=None):
    run_node(ContractPublisher, args)
