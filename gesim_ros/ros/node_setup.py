"""Small pieces every gesim_ros node shares: parameters with descriptors, the contract, main()."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, NoReturn

import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.exceptions import ParameterException
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

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
#: how long a spin waits before it looks at the stop signal again
SPIN_PERIOD_S = 0.1
#: a node's cleanup still running this long after its stop writes all stacks to stderr (inside
#: launch's default 5 s before it escalates to SIGTERM)
SHUTDOWN_REPORT_S = 4.0
#: how long a stopped node's ROS entities and context may take to go before the process leaves
#: without them (launch escalates to SIGTERM at 5 s and kills at 15 s)
ROS_TEARDOWN_LIMIT_S = 8.0


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("interval", _Timespec), ("value", _Timespec)]


class _Sigevent(ctypes.Structure):
    """Linux's struct sigevent (64 bytes) as SIGEV_THREAD fills it."""
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("function", ctypes.c_void_p), ("attributes", ctypes.c_void_p), ("padding", ctypes.c_byte * 32)]


_SIGEV_THREAD = 2
_CLOCK_MONOTONIC = 1


def exit_after(seconds: float, status: int) -> Callable[[], None]:
    """End the process with ``status`` after ``seconds``, also while a native call holds the GIL;
    returns the function that cancels it. A timer whose expiry runs ``_exit(status)`` in a thread
    of libc's own: no Python runs there. CI's hung teardowns sat in rclpy's Node.destroy_node with
    the GIL held, where a Python thread's join and the signal handlers wait forever."""
    libc = ctypes.CDLL(None, use_errno=True)
    event = _Sigevent(value=status, notify=_SIGEV_THREAD,
                      function=ctypes.cast(libc._exit, ctypes.c_void_p).value)
    timer = ctypes.c_void_p()
    whole, fraction = divmod(seconds, 1.0)
    expiry = _Itimerspec(value=_Timespec(int(whole), int(fraction * 1e9)))
    if (libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) != 0
            or libc.timer_settime(timer, 0, ctypes.byref(expiry), None) != 0):
        raise OSError(ctypes.get_errno(), "exit_after: could not arm the exit timer")
    return lambda: libc.timer_delete(timer)


def stop_on_signals() -> threading.Event:
    """SIGINT and SIGTERM set the returned event instead of raising KeyboardInterrupt anywhere. Under
    `ros2 launch` a terminal's Ctrl-C reaches a node twice (the process group's SIGINT, then launch's
    own): raised, the second one lands in the cleanup and the node dies with exit code -2."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


@contextmanager
def interrupt_once():
    """Within: the first SIGINT or SIGTERM raises KeyboardInterrupt (it stops a run in the middle of a
    wait); later ones are ignored, so the cleanup after it finishes (under `ros2 launch` a terminal's
    Ctrl-C arrives twice). The previous handlers come back at the end."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.getsignal(signum) for signum in signals}

    def first(*_):
        for signum in signals:
            signal.signal(signum, signal.SIG_IGN)
        raise KeyboardInterrupt

    for signum in signals:
        signal.signal(signum, first)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def spinning_in_background(node: Node):
    """Spin ``node``'s callbacks in a background thread while the caller's code runs in this one (a
    runner's episode loop), then stop, join and destroy it. Single-threaded: callbacks run inside
    spin_once, so once the spinner has stopped none is pending when the executor and node are
    destroyed (a thread pool's would still trigger them)."""
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=SPIN_PERIOD_S)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        yield node
    finally:
        stop.set()
        spinner.join(timeout=5.0)  # a thread still in a wait set aborts the interpreter at exit
        executor.shutdown()
        node.destroy_node()


def _ros_teardown(node: Node | None) -> None:
    """The node's ROS entities (rclpy's own destroy_node: its close() has run), ROS, and the context."""
    if node is not None:
        Node.destroy_node(node)
    if rclpy.ok():
        rclpy.try_shutdown()
    rclpy.get_default_context().destroy()


def run_node(factory: Callable[[], Node], args=None, bad_input: tuple = (),
             drain_s: float = 0.0) -> NoReturn:
    """Standard main(): init, spin until Ctrl-C, SIGTERM or shutdown, destroy, shut down cleanly (exit
    status 0, however many interrupts come). Bad input found while the node is built (BAD_INPUT, plus
    the node's own ``bad_input`` types) ends the process with one line on stderr,
    '<executable>: <message>', and exit status 2. ``drain_s``: once stopped, keep taking what DDS
    has already delivered for up to this long (the comparator records the last episode's events).

    Shutdown runs in two parts. First the node's own ``close()``, where it has one (threads, files,
    the database: nothing may be lost, so it is not bounded). Then its ROS entities, ROS and the
    context (the DDS participant, so peers see it leave), bounded by ROS_TEARDOWN_LIMIT_S: three
    times in CI world_model outlived launch's 15 s grace and was killed, hung in rcl's node
    destruction with the GIL held after every other node had left. A teardown past the limit is
    left behind (``exit_after``) with the process's own exit status. Otherwise the process ends at
    once, without the interpreter's finalisation, where the native libraries tear down (FastDDS's
    participant factory, two OpenBLAS pools, torch): ~1 s of world_model's exit here, against ~20 ms
    for its own cleanup. A shutdown still running after SHUTDOWN_REPORT_S writes 'Timeout' and
    every thread's stack to stderr (launch's log), so a hang says where it is."""
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    stop = stop_on_signals()
    node = None
    executor = None
    try:
        try:
            node = factory()
        except (*BAD_INPUT, *bad_input) as exc:
            print(f"{Path(sys.argv[0]).name}: {' '.join(str(exc).split())}", file=sys.stderr)
            raise SystemExit(2) from None
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=SPIN_PERIOD_S)
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline and rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
    except ExternalShutdownException:
        pass
    except RCLError:
        if rclpy.ok():
            raise  # a real error; after a shutdown the context may already be gone (a shutdown race)
    finally:
        in_flight = sys.exc_info()[1]   # SystemExit(2) for bad input, a real RCLError: the exit says so
        status = (in_flight.code if isinstance(in_flight, SystemExit) and isinstance(in_flight.code, int)
                  else int(in_flight is not None))
        faulthandler.dump_traceback_later(SHUTDOWN_REPORT_S)
        if executor is not None:
            executor.shutdown()
        if node is not None and hasattr(node, "close"):
            node.close()
        sys.stdout.flush()
        sys.stderr.flush()
        cancel_exit = exit_after(ROS_TEARDOWN_LIMIT_S, status)
        try:
            _ros_teardown(node)
        finally:
            cancel_exit()
        # Done: later interrupts are ignored (launch's second SIGINT must not kill a finished node,
        # nor its traceback stand in the log), here and where SystemExit(2) goes on into finalisation.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        faulthandler.cancel_dump_traceback_later()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
