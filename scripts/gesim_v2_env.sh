#!/usr/bin/env bash
# Prepares AgiBot's own GE-Sim-V2 code (../shared/gesim-v2, a test peer, never copied into the
# project) in a side environment: its sources unpacked and its extra packages, pinned, in a folder of
# their own, run with the project's Python. Prints the folder; afterwards run their code as
#   cd DIR/GE-Sim-V2 && PYTHONPATH=src:DIR/deps .venv/bin/python -m gesim.server --model example ...
# Usage: scripts/gesim_v2_env.sh [DIR]   (default build/gesim-v2; idempotent)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
archive=${GESIM_V2_ARCHIVE:-$root/../shared/gesim-v2/gesim-v2-4a34498.tar.gz}
dir=${1:-$root/build/gesim-v2}
python=$root/.venv/bin/python
# numpy, torch, opencv and PyYAML come from .venv; these are the ones their code imports on top.
packages="requests==2.34.2 pillow==13.0.0 matplotlib==3.11.2 scipy==1.17.1 einops==0.8.2"
if [ ! -f "$archive" ]; then
  echo "gesim_v2_env.sh: $archive not found: GE-Sim-V2's code lives in ../shared/gesim-v2 beside the checkout" >&2
  exit 2
fi
# One preparation at a time (parallel test workers): the others wait, then find it done.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
stamp=$(cat "$archive" "$0" | sha256sum | cut -c1-16)
if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$dir"; mkdir -p "$dir"
  tar -xzf "$archive" -C "$dir"
  "$python" -m pip install -q --disable-pip-version-check --target "$dir/deps" $packages
  # One numpy in the process: .venv's (the pins above accept it), not a second copy shadowing it.
  rm -rf "$dir"/deps/numpy "$dir"/deps/numpy-* "$dir"/deps/numpy.libs "$dir"/deps/bin
  echo "$stamp" > "$dir/.stamp"
fi
echo "$dir"
