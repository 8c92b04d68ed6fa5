"""The contract on the wire: a synthetic G2 in one process, the topic monitor in another."""

import json

import pytest

from gesim_ros.contract import load_contract


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["g2_gdk", "genie_sim"])
def test_external_subscriber_sees_every_sensor_topic(procs, tmp_path, profile):
    report = tmp_path / "topics.json"
    procs.start("contract_publisher", "--ros-args", "-p", f"contract:={profile}", "-p", "camera_scale:=0.25")
    monitor = procs.start("topic_monitor", "--ros-args", "-p", f"contract:={profile}", "-p", "duration:=3.0",
                          "-p", f"json_out:={report}")
    monitor.process.wait(timeout=60)
    rows = {r["key"]: r for r in json.loads(report.read_text())["topics"]}
    contract = load_contract(profile)
    assert set(rows) == {t.key for t in contract.topics_with_role("sensor")}
    for key, row in rows.items():
        spec = contract.topic(key)
        assert row["topic"] == spec.resolve("/") and row["type"] == spec.type
        assert row["rate_ratio"] >= 0.9, row
        assert row["wrong_frame_ids"] == 0 and row["stamp_regressions"] == 0, row
