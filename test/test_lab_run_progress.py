"""lab-run's progress line per episode, from what the comparator recorded (plain Python, no graph)."""

from types import SimpleNamespace

import pytest

from gesim_ros.comparator.store import EpisodeStore
from gesim_ros.episodes.lab_run import _progress_line


@pytest.mark.parametrize("mode, judged, unjudged, line", [
    ("shadow", {"real": "success", "world_model": "success"}, {"real": "failure", "world_model": "unknown"},
     "real failure, world_model unknown (unjudged) (-) | agreement 1/1, unjudged 1"),
    ("world_model", {"world_model": "success"}, {"world_model": "unknown"},
     "world_model unknown (-) | world_model success 1/1, unjudged 1"),
])
def test_an_unjudged_episode_is_neither_an_agreement_nor_a_disagreement(tmp_path, mode, judged, unjudged, line):
    database = tmp_path / "episodes.sqlite"
    with EpisodeStore(database) as store:
        for episode_id, outcomes in (("judged", judged), ("unjudged", unjudged)):
            store.start_episode(episode_id, task="push", policy="scripted", mode=mode)
            for side, outcome in outcomes.items():
                store.record_outcome(episode_id, side, outcome)
            store.complete_episode(episode_id)
    result = SimpleNamespace(episode_id="unjudged", mode=mode, task="push", seed=1, status="ended", reason="", label="")
    assert _progress_line(database, 2, 2, result) == f"episode 2/2 push seed 1: {line}"
