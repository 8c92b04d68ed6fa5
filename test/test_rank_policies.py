"""`gesim-ros rank-policies` end to end on a local Ray: two scripted policies on the twin (mode real)
and in the learned world model (mode world_model), each job a lab-test graph of real processes in a
DDS domain of its worker's own; ranking.json recomputed here from the episode rows, the rows checked
against the comparator databases, no Ray process left behind; and a bad option refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gesim_ros.comparator import metrics as am
from gesim_ros.comparator.ranking import ppi_mean
from gesim_ros.comparator.store import EpisodeStore

GESIM_ROS = [sys.executable, "-m", "gesim_ros.cli", "rank-policies"]
POLICIES = {"steady": 0.0, "clumsy": 1.0}


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


@pytest.mark.slow
def test_tiny_rank_policies_on_a_local_ray(tmp_path):
    out = tmp_path / "rank"
    command = [*GESIM_ROS, "--tasks", "push", "--seeds", "2", "--model-only-seeds", "2", "--workers", "2",
               "--episode-timeout", "60", "--out", str(out)]
    for name, rate in POLICIES.items():
        command += ["--policy", f"{name}=scripted:" + json.dumps({"failure_rate": rate})]
    done = subprocess.run(command, capture_output=True, text=True, timeout=840,
                          env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-4000:]
    assert "job 4/4" in done.stdout and "episodes in" in done.stdout  # the progress lines

    ranking = json.loads((out / "ranking.json").read_text())
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    # 2 policies x (2 real + 2 paired model + 2 model-only) episodes, every one recorded.
    assert len(rows) == 12
    assert all(r["status"] == "complete" for r in rows), rows
    assert all(r["outcome"] in ("success", "failure") for r in rows), rows   # every episode judged

    # Every row is its comparator database's episode, with that side's outcome and the policy's name.
    for row in rows:
        with EpisodeStore(out / row["database"], readonly=True) as store:
            episode = store.episode(row["episode_id"])
        assert (episode.task, episode.seed, episode.status, episode.policy, episode.mode) == \
            (row["task"], row["seed"], row["status"], row["policy"], row["side"])
        assert getattr(episode, f"{row['side']}_outcome") == row["outcome"]

    # ranking.json's figures, recomputed here from the rows.
    assert [p["name"] for p in ranking["policies"]] == list(POLICIES)
    real_rates, model_rates = [], []
    for entry in ranking["policies"]:
        mine = [r for r in rows if r["policy"] == entry["name"]]
        real = {(r["task"], r["seed"]): r["outcome"] for r in mine if r["side"] == "real"}
        paired = {(r["task"], r["seed"]): r["outcome"] for r in mine
                  if r["side"] == "world_model" and r["role"] == "paired"}
        only = [r["outcome"] for r in mine if r["role"] == "model_only"]
        assert set(real) == set(paired) == {("push", 0), ("push", 1)} and len(only) == 2
        model = [*paired.values(), *only]
        real_rate = list(real.values()).count("success") / len(real)
        model_rate = model.count("success") / len(model)
        assert entry["real_success_rate"]["value"] == pytest.approx(real_rate)
        assert entry["model_success_rate"]["value"] == pytest.approx(model_rate)
        assert (entry["real_n"], entry["model_n"], entry["paired_n"], entry["model_only_n"]) == (2, 4, 2, 2)
        keys = sorted(real)
        expected = ppi_mean([real[k] for k in keys], [paired[k] for k in keys], only, lam="tuned")
        assert entry["ppi"]["value"] == pytest.approx(expected.value)
        assert entry["ppi"]["ci95"] == (pytest.approx(expected.ci95) if expected.ci95 else None)
        real_rates.append(real_rate)
        model_rates.append(model_rate)
    assert ranking["mmrv"]["value"] == pytest.approx(am.mmrv(sim=model_rates, real=real_rates).value)
    assert ranking["pearson"] == am.pearson(model_rates, real_rates).to_dict()
    assert ranking["spearman"] == am.spearman(model_rates, real_rates).to_dict()

    # Each Ray worker ran its jobs in a DDS domain of its own.
    jobs = ranking["run"]["jobs"]
    domain_of = {}
    for job in jobs:
        assert job["domain"] is not None and not job["error"], job
        assert domain_of.setdefault(job["pid"], job["domain"]) == job["domain"]
    assert len(set(domain_of.values())) == len(domain_of)

    html = (out / "ranking.html").read_text()
    assert "<svg" in html and all(name in html for name in POLICIES)
    assert (out / "ray_logs").is_dir() and (out / "episodes.csv").read_text().startswith("policy,task,seed")
    session = ranking["run"]["ray_session"]
    assert session and not Path(session).exists()
    assert _processes_mentioning(session) == []


def test_bad_input_is_one_line_exit_2_and_no_folder(tmp_path):
    out = tmp_path / "never"
    for bad in (["--policy", "only=scripted:{}"],
                ["--preset", "scripted-precision", "--seeds", "many"],
                ["--preset", "scripted-precision", "--policy", "x=scripted:{\"noise\": 1}"],
                ["--preset", "scripted-precision", "--workers", "0"],
                ["--preset", "scripted-precision", "--ray-address", "127.0.0.1:1"]):  # nothing listens there
        done = subprocess.run([*GESIM_ROS, *bad, "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (bad, done.stdout, done.stderr)
        assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert done.stderr.startswith("gesim-ros rank-policies: ")
        assert not out.exists()
