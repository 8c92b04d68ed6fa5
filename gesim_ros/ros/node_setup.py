"""Small pieces every gesim_ros node shares: parameters with descriptors, the contract, main()."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.exceptions import ParameterException
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from gesim_ros.contract.contract import DEFAULT_PROFILE, Contract, load_contract


def declare(node: Node, name: str, default, description: str, read_only: bool = False):
    """Declare a parameter with a descriptor and return its value."""
    node.declare_parameter(name, default, ParameterDescriptor(description=description, read_only=read_only))
    return node.get_parameter(name).value


def declare_contract(node: Node) -> Contract:
    profile = declare(node, "contract", DEFAULT_PROFILE,
                      "G2 topic contract: a profile name (g2_gdk, genie_sim) or a YAML path", read_only=True)
    return load_contract(profile)


#: What a node's constructor raises for bad input (a parameter or contract value, an unknown plugin
#: name); its message names the input, what is wrong and the fix.
BAD_INPUT = (ValueError, LookupError, ParameterException)


def run_node(factory: Callable[[], Node], args=None, threads: int = 1, bad_input: tuple = ()) -> None:
    """Standard main(): init, spin until Ctrl-C or shutdown, destroy, shut down cleanly. Bad input
    found while the node is built (BAD_INPUT, plus the node's own ``bad_input`` types) ends the
    process with one line on stderr, '<executable>: <message>', and exit status 2."""
    rclpy.init(args=args if args is not None else sys.argv)
    node = None
    try:
        try:
            node = factory()
        except (*BAD_INPUT, *bad_input) as exc:
            print(f"{Path(sys.argv[0]).name}: {' '.join(str(exc).split())}", file=sys.stderr)
            raise SystemExit(2) from None
        if threads > 1:
            executor = MultiThreadedExecutor(num_threads=threads)
            executor.add_node(node)
            executor.spin()
        else:
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RCLError:
        if rclpy.ok():
            raise  # a real error; after Ctrl-C the context may already be gone (a shutdown race)
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.try_shutdown()
