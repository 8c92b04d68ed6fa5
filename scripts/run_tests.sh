#!/usr/bin/env bash
# Runs the test suite in .venv with DDS kept on this machine (each pytest worker also picks a
# ROS_DOMAIN_ID of its own). Two workers, one test file each at a time, in the order test/conftest.py
# gives (longest first): most end-to-end tests wait on node processes and DDS rather than use a core.
# Ends with each file's time. Extra arguments go to pytest, e.g. -m "not slow", or -n 0 for one process.
set -euo pipefail
cd "$(dirname "$0")/.."
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST MUJOCO_GL=${MUJOCO_GL:-egl}
exec .venv/bin/python -m pytest -p no:cacheprovider --timeout=900 -ra -n 2 --dist loadfile --no-loadscope-reorder --durations=15 "$@"
