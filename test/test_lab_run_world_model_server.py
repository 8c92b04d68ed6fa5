"""`gesim-ros lab-run` / `shadow-run` pointed at a world-model server (--world-model-server URL,
--world-model-config JSON): bad input is refused before anything starts, with one line on stderr and
exit status 2, and nothing written (fast); and a world_model-mode run through `gesim_http` against
`gesim-ros serve-wm --backend learned` (slow)."""

import contextlib
import http.client
import http.server
import json
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.ros.process_harness import ProcessGroup
from gesim_ros.twin.tasks import get_task

GESIM_ROS = sys.prefix + "/bin/gesim-ros"
SERVE_HINT = "gesim-ros serve-wm --backend learned --port 9000"


def lab_run(out, *options, command=("lab-run", "--mode", "world_model"), timeout=120):
    return subprocess.run([GESIM_ROS, *command, *options, "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout)


def assert_refused(run, out, *phrases, command="lab-run"):
    """Exit 2 with one stderr line holding every phrase; nothing started (no 'starting ...' line),
    nothing written (no run folder)."""
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"gesim-ros {command}: "), run.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert run.stdout == ""
    assert not out.exists(), sorted(p.name for p in out.iterdir())


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ----------------------------------------------------------------------------- fast: refused input


@pytest.mark.parametrize("options, phrases", [
    (["--world-model-config", "[1]"], ["--world-model-config: expected a JSON object", '{"timeout_s": 60}']),
    (["--world-model-config", "{timeout_s: 1}"], ["--world-model-config: not valid JSON", '{"timeout_s": 60}']),
    (["--world-model", "gesim_http"],
     ["--world-model gesim_http needs a server", "--world-model-server URL", SERVE_HINT]),
    (["--world-model", "gesim_http", "--world-model-config", '{"timeout": 5}', "--world-model-server",
      "http://127.0.0.1:9"], ["--world-model-config: unknown key(s) ['timeout'] for backend gesim_http", "timeout_s"]),
    (["--world-model", "kinematic", "--world-model-config", '{"gain": 1}'],
     ["--world-model-config: unknown key(s) ['gain'] for backend kinematic", "time_constant_s"]),
    (["--world-model", "learned", "--world-model-server", "http://127.0.0.1:9"],
     ["--world-model-server http://127.0.0.1:9: backend learned takes no server address", "gesim_http"]),
    (["--world-model", "gesim_http", "--world-model-server", "127.0.0.1:9000"],
     ["--world-model-server '127.0.0.1:9000': not an http(s)://host[:port] URL", "http://127.0.0.1:9000"]),
], ids=["not-an-object", "not-json", "no-server", "unknown-key-gesim-http", "unknown-key-kinematic",
        "server-for-learned", "not-a-url"])
def test_a_bad_world_model_option_is_refused_before_anything_starts(tmp_path, options, phrases):
    out = tmp_path / "run"
    assert_refused(lab_run(out, *options), out, *phrases)


def test_shadow_run_refuses_gesim_http_without_a_server(tmp_path):
    out = tmp_path / "run"
    run = lab_run(out, "--world-model", "gesim_http", command=("shadow-run",))
    assert_refused(run, out, "--world-model gesim_http needs a server", SERVE_HINT, command="shadow-run")


@pytest.mark.parametrize("source", ["server", "config"])
def test_a_server_that_is_not_there_is_named_with_how_to_start_one(tmp_path, source):
    url = f"http://127.0.0.1:{closed_port()}"
    option = (["--world-model-server", url] if source == "server"
              else ["--world-model-config", json.dumps({"url": url})])
    out = tmp_path / "run"
    named = "--world-model-server" if source == "server" else "--world-model-config's url"
    assert_refused(lab_run(out, "--world-model", "gesim_http", *option), out,
                   f"{named} {url}: no world-model server answers there", SERVE_HINT)


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_error(404)

    def log_message(self, *args):
        pass


def test_an_http_server_that_is_no_world_model_server_is_refused(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    out = tmp_path / "run"
    try:
        run = lab_run(out, "--world-model", "gesim_http", "--world-model-server", url)
    finally:
        server.shutdown()
        server.server_close()
    assert_refused(run, out, f"--world-model-server {url}: GET /healthz answered HTTP 404", SERVE_HINT)


def test_a_server_that_never_answers_is_refused_after_the_probe(tmp_path):
    """A socket that takes connections (the kernel's backlog) but never replies: a hung server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        out = tmp_path / "run"
        run = lab_run(out, "--world-model", "gesim_http", "--world-model-server", url)
    assert_refused(run, out, f"--world-model-server {url}: the server did not answer GET /healthz within 3 s",
                   SERVE_HINT)


# ----------------------------------------------------------------------------- slow: a served model


def wait_for_url(server, timeout: float = 180.0) -> str:
    """The 'listening on http://HOST:PORT' address of a running serve-wm (hang guard: ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.running:
        found = re.search(r"listening on (http://[\d.]+:\d+)", server.log())
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"serve-wm did not say where it listens:\n{server.log()}")


@pytest.fixture(scope="module")
def served_run(tmp_path_factory):
    """`lab-run --mode world_model --episodes 2 --tasks push --world-model gesim_http` against
    `serve-wm --backend learned --port 0`: (run folder, completed process, the server's /api/status)."""
    tmp = tmp_path_factory.mktemp("served")
    procs = ProcessGroup(tmp / "server-logs")
    try:
        server = procs.start("gesim-ros", "serve-wm", "--backend", "learned", "--port", "0")
        url = wait_for_url(server)
        out = tmp / "run"
        run = lab_run(out, "--episodes", "2", "--tasks", "push", "--world-model", "gesim_http",
                      "--world-model-server", url, timeout=900)
        host, port = url.removeprefix("http://").split(":")
        with contextlib.closing(http.client.HTTPConnection(host, int(port), timeout=10)) as conn:
            conn.request("GET", "/api/status")
            status = json.loads(conn.getresponse().read())
        yield out, run, status
    finally:
        procs.stop_all()


@pytest.mark.slow
def test_a_world_model_run_is_served_by_the_given_server(served_run):
    """The url reaches the world-model node: the served model imagined the episodes, which the
    comparator recorded as complete, unjudged (gesim_http is no Judge: outcome unknown)."""
    out, run, status = served_run
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "episode 2/2" in run.stdout and "by mode: world_model 2 (2 complete)" in run.stdout, run.stdout
    assert status["model"] == "learned" and status["step_count"] > 0, status
    assert status["task"] == "push the blue block into the green target area", status
    with EpisodeStore(out / "world_model.sqlite", readonly=True) as store:
        episodes = store.episodes()
    assert [(e.task, e.seed) for e in episodes] == [("push", 0), ("push", 1)]
    for e in episodes:
        assert (e.status, e.mode, e.real_outcome, e.world_model_outcome) == (
            "complete", "world_model", None, "unknown"), e
        assert e.world_model_mcap_path, e


@pytest.mark.slow
def test_each_served_episode_ends_by_itself_after_max_steps(served_run):
    """As with the in-process learned model (test_lab_integration): the model ends each episode after
    max_steps, before the runner's timeout, and reports it. (Before the policy ran on the model's /clock,
    the switch refused 345 of 355 chunks: the wall-clock policy ran ahead of a model slower than real
    time, and every episode timed out.)"""
    out, run, _ = served_run
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    reported = json.loads((out / "episodes.json").read_text())
    assert len(reported) == 2
    for result in reported:
        assert (result["status"], result["side"]) == ("ended", "world_model"), result
        # lab-run's max_steps: the planned task's full length at the twin's control rate
        steps = round(get_task("push").time_limit_s * 30)
        assert f"max_steps={steps} reached" in result["reason"], result
