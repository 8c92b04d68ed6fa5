"""Whether the world-model process is alive, from DDS liveliness on its BackendStatus publisher.

The contract gives BackendStatus a QoS with an AUTOMATIC liveliness lease (``liveliness_lease_s``):
the middleware's own threads assert it, so a world model busy in its backend stays alive, and a
process that dies, even by kill -9, is reported lost within about the lease (0.4-1.0 s after SIGKILL
with the 1 s lease, Fast DDS in the pip set-up). A clean exit reports the loss at once.
"""

from __future__ import annotations

from typing import Callable

from gesim_ros_interfaces.msg import BackendStatus
from rclpy.event_handler import SubscriptionEventCallbacks

from gesim_ros.contract.contract import Contract, ros_qos


class WorldModelPresence:
    """``alive``: some world-model status publisher is alive now; ``on_change(alive)`` on each change."""

    def __init__(self, node, contract: Contract, on_change: Callable[[bool], None] | None = None):
        spec = contract.topic("backend_status")
        self.topic = spec.resolve(contract.namespace("world_model"))
        self.alive = False
        self._on_change = on_change
        node.create_subscription(BackendStatus, self.topic, lambda _: None, ros_qos(spec.qos), raw=True,
                                 event_callbacks=SubscriptionEventCallbacks(liveliness=self._changed))

    def _changed(self, info) -> None:
        alive = info.alive_count > 0
        if alive != self.alive:
            self.alive = alive
            if self._on_change is not None:
                self._on_change(alive)
