"""Making sure every reader of the episode events receives an episode-giver's first STARTED.

Episode events are volatile: a reader gets what is published after it has matched the writer. DDS
discovery matches the two ends separately, so a reader the writer already counts may not know the
writer yet, and drops a STARTED published now; a policy that misses STARTED never acts, and the
episode times out as a real failure (CI saw it on a loaded host, 2026-12). A HELLO that every matched
reader has acknowledged proves each of them knows the writer; reliable delivery of all that follows
is then the middleware's guarantee, not a guess at how long discovery takes.
"""

from __future__ import annotations

from typing import Callable

from rclpy.duration import Duration

from gesim_ros.contract.contract import message_class
from gesim_ros.contract.messages import header

EpisodeEvent = message_class("gesim_ros_interfaces/msg/EpisodeEvent")

ACK_POLL_S = 0.1  # each acknowledgement wait is this short, so the caller's wait can stop a run in between
# Fast DDS readers acknowledge on the writer's heartbeat, every 3 s by default (measured: 3.006 s from
# publish to acknowledged): HELLO costs a run start about that, and gets two heartbeats at least.
HELLO_ACK_S = 6.0
UNNAMED = "(a node the graph does not name yet)"  # its endpoints are known, its node's name not yet


def confirm_event_readers(node, publisher, wait_until: Callable[[Callable[[], bool], float], bool],
                          timeout_s: float, side: str) -> bool:
    """Publish HELLO on ``publisher`` (the episode events) and wait until every reader it matched has
    acknowledged it; ``wait_until(condition, timeout_s)`` is the caller's bounded wait. Returns
    whether all did within ``timeout_s`` (HELLO_ACK_S at least)."""
    publisher.publish(EpisodeEvent(header=header(node.get_clock().now().nanoseconds * 1e-9, ""),
                                   event=EpisodeEvent.HELLO, side=side, success_probability=float("nan")))
    return wait_until(lambda: publisher.wait_for_all_acked(Duration(seconds=ACK_POLL_S)),
                      max(timeout_s, HELLO_ACK_S))


def nodes_missing_from(node, subscribers_of: str, publishers_of: list[str]) -> list[str]:
    """The nodes that publish on any of ``publishers_of`` but do not subscribe to ``subscribers_of``,
    as far as this node's view of the graph goes (fully qualified names; an endpoint whose node is not
    named yet counts as missing, though it may subscribe: discovery has not told yet)."""
    def names(infos):
        return {UNNAMED if i.node_name == "_NODE_NAME_UNKNOWN_" else f"{i.node_namespace.rstrip('/')}/{i.node_name}"
                for i in infos}

    publishers = set().union(*(names(node.get_publishers_info_by_topic(t)) for t in publishers_of))
    return sorted(publishers - (names(node.get_subscriptions_info_by_topic(subscribers_of)) - {UNNAMED}))
