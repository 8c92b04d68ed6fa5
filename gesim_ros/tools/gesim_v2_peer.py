"""AgiBot's own GE-Sim-V2 (../shared/gesim-v2) as a peer for the tests and benches that check this
package against it: its side environment, its server as a process, and its clients.

Their code is never copied into the project: scripts/gesim_v2_env.sh unpacks their tarball into
build/gesim-v2 with their extra packages, pinned, in deps/ beside it, and everything here runs it from
there with this venv's Python (``PYTHONPATH=src:deps``). Their server (``python -m gesim.server --model
example``, or any script that starts it, such as the tests' recording wrapper) runs in a process group
of its own, its output in a log file, and is waited for by a bounded poll of ``GET /healthz``.

    peer = prepare()                       # GesimV2Unavailable where ../shared/gesim-v2 is absent
    with peer.server(log_dir) as server:   # their example model on a free loopback port
        peer.run(["examples/replay.py", "--server", server.url, ...])
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "gesim-v2"
ARCHIVE = SHARED / "gesim-v2-4a34498.tar.gz"
ENV_SCRIPT = REPO / "scripts" / "gesim_v2_env.sh"
THEIR_SERVER = ("-m", "gesim.server")


class GesimV2Unavailable(RuntimeError):
    """GE-Sim-V2's code is not beside the checkout (../shared/gesim-v2)."""


class GesimV2Error(RuntimeError):
    """Their side environment could not be prepared, their server did not come up, or a client failed."""


def prepare(timeout: float = 900.0) -> GesimV2:
    """Their code unpacked, with its pinned extra packages (scripts/gesim_v2_env.sh; idempotent, quick
    once done)."""
    if not ARCHIVE.is_file():
        raise GesimV2Unavailable(f"GE-Sim-V2's code is not here ({ARCHIVE}): ../shared/gesim-v2 is absent "
                                 "beside the checkout")
    made = subprocess.run([str(ENV_SCRIPT)], capture_output=True, text=True, timeout=timeout, check=False)
    if made.returncode != 0:
        raise GesimV2Error(f"{ENV_SCRIPT} failed (rc={made.returncode}):\n{made.stdout[-3000:]}{made.stderr[-3000:]}")
    return GesimV2(Path(made.stdout.strip().splitlines()[-1]))


def free_port() -> int:
    """A port on 127.0.0.1 free just now (their server logs the port it is given, so it needs one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, path: str, timeout: float = 5.0) -> dict | None:
    """``GET url+path`` as JSON, or None where nothing (or no 200) answers."""
    host, _, port = url.removeprefix("http://").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        data = resp.read()
        return json.loads(data) if resp.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


@dataclass(frozen=True)
class GesimV2:
    """Their unpacked code: ``folder``/GE-Sim-V2 (their repository) and ``folder``/deps."""

    folder: Path

    @property
    def repo(self) -> Path:
        return self.folder / "GE-Sim-V2"

    @property
    def deps(self) -> Path:
        return self.folder / "deps"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """This process's environment with their sources and packages importable (absolute paths)."""
        python_path = [str(self.repo / "src"), str(self.deps)]
        return {**os.environ, **(extra or {}), "PYTHONPATH": os.pathsep.join(python_path)}

    def run(self, args: Sequence[str], timeout: float = 600.0) -> str:
        """One of their clients (``python ARGS...`` in their repository, e.g. examples/replay.py or
        ``-c SCRIPT``); its stdout, or GesimV2Error with its output when it fails."""
        done = subprocess.run([sys.executable, *args], cwd=self.repo, env=self.env(), capture_output=True,
                              text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise GesimV2Error(f"{args[0]} failed (rc={done.returncode}):\n{done.stdout[-3000:]}\n"
                               f"{done.stderr[-4000:]}")
        return done.stdout

    def server(self, log_dir: Path, *, script: Sequence[str] = THEIR_SERVER, model: str = "example",
               env: dict[str, str] | None = None, startup_timeout: float = 120.0) -> GesimV2Server:
        """Their server started (``python SCRIPT --model MODEL --host 127.0.0.1 --port P``) and answering
        /healthz; stop it with ``stop()`` or a ``with`` block."""
        return GesimV2Server(self, Path(log_dir), script=script, model=model, env=env,
                             startup_timeout=startup_timeout)


class GesimV2Server:
    """Their server in a process group of its own on a free loopback port; its output in ``log_path``."""

    def __init__(self, peer: GesimV2, log_dir: Path, *, script: Sequence[str], model: str,
                 env: dict[str, str] | None, startup_timeout: float):
        log_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a free port can be taken before their server binds it: retry on another
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.log_path = log_dir / f"gesim-v2-server-{os.getpid()}-{time.monotonic_ns()}.log"
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    [sys.executable, *script, "--model", model, "--host", "127.0.0.1", "--port", str(self.port)],
                    cwd=peer.repo, env=peer.env(env), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True)
            deadline = time.monotonic() + startup_timeout
            while self.running and time.monotonic() < deadline:
                if get_json(self.url, "/healthz", timeout=2.0) == {"status": "ok"}:
                    return
                time.sleep(0.1)
            exited = self.process.poll()
            self.stop()
            if "Address already in use" not in self.log() or attempt == 2:
                what = "did not answer GET /healthz within" if exited is None else f"exited with {exited} within"
                raise GesimV2Error(f"GE-Sim-V2's server ({' '.join(script)} --model {model}) {what} "
                                   f"{startup_timeout:g} s; its log {self.log_path}:\n{self.log()[-3000:]}")

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def status(self) -> dict | None:
        """Their dashboard's ``GET /api/status``."""
        return get_json(self.url, "/api/status")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM to the group, then SIGKILL after ``timeout``. Not SIGINT: a process started from a
        background job inherits SIGINT ignored, and their server then never stops on it."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            if self.process.poll() is not None:
                break
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        return self.process.returncode

    def __enter__(self) -> GesimV2Server:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
