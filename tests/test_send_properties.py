"""A send's properties are stored as RocketMQ 4.9's broker stores them: in the order its
HashMap iterates them (CLUSTER added), and without WAIT, whose value still decides whether the
send waits for the flush."""

from __future__ import annotations

from rocketstore.broker._send import stored_properties
from rocketstore.namesrv._java_order import java_order


def test_stored_properties_order_and_wait() -> None:
    sent = {"KEYS": "k1", "UNIQ_KEY": "7F00000140D418B4AAC2", "WAIT": "true", "TAGS": "A"}
    sent["CLUSTER"] = "DefaultCluster"
    stored, wait = stored_properties(dict(sent))
    assert wait is True
    assert "WAIT" not in stored
    assert list(stored) == [k for k in java_order(sent) if k != "WAIT"]
    assert stored == {k: v for k, v in sent.items() if k != "WAIT"}
    for value, waits in (("false", False), ("FALSE", False), ("True", True), ("no", False)):
        assert stored_properties({"WAIT": value})[1] is waits
    assert stored_properties({})[1] is True
