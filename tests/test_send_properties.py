"""A send's properties are stored as RocketMQ 4.9's broker stores them: in the order its
HashMap iterates them (CLUSTER added), and without WAIT, whose value still decides whether the
send waits for the flush."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from rocketstore.broker.messaging._send import stored_properties
from rocketstore.protocol._java_order import java_order
from rocketstore.remoting import RemotingClient, ResponseCode
from support.broker import RunningBroker, send_request
from support.waits import wait_dispatched


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


def test_batched_messages_keep_their_own_text_then_the_batchs(tmp_path: Path) -> None:
    """RocketMQ 4.9's batch encoder stores each message's properties text as the batch body
    carried it, then a separator (unless the text ends in one), then the batch's properties
    (the request's, CLUSTER added) in its HashMap's order: CLUSTER before WAIT."""
    running = RunningBroker(tmp_path / "store", store={}, broker={})
    try:
        own = ["KEYS\x01k1\x02UNIQ_KEY\x01U1\x02WAIT\x01true", "TAGS\x01B\x02WAIT\x01true\x02"]
        body = b"".join(_batch_item(f"m{i}".encode(), text) for i, text in enumerate(own))
        cmd = send_request("T_props", body, properties="WAIT\x01true", batch="true")
        with RemotingClient(timeout=5) as client:
            client.invoke(running.addr, send_request("T_props", b"first"))  # makes the topic
            assert client.invoke(running.addr, cmd).code == ResponseCode.SUCCESS
        cluster = running.controller.config.cluster_name if running.controller else ""
        batch = f"CLUSTER\x01{cluster}\x02WAIT\x01true"
        expected = [own[0] + "\x02" + batch, own[1] + batch]
        store = running.server.store if running.server else None
        assert store is not None
        wait_dispatched(store)
        got = store.get_message("G", "T_props", 0, 1, 8)
        assert [m.body for m in got.messages] == [b"m0", b"m1"]
        log = Path(running.store_config.commit_log_dir) / f"{0:020d}"
        data = log.read_bytes()
        for m, text in zip(got.messages, expected, strict=True):
            (size,) = struct.unpack_from(">i", data, m.commitlog_offset)
            record = data[m.commitlog_offset : m.commitlog_offset + size]
            raw = text.encode()
            assert record.endswith(struct.pack(">h", len(raw)) + raw), record[-80:]
        assert got.messages[0].keys == ["k1"] and got.messages[1].tags == "B"
    finally:
        running.stop()


def _batch_item(body: bytes, text: str) -> bytes:
    props = text.encode()
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    head = struct.pack(">iiIii", total, 0, zlib.crc32(body), 0, len(body))
    return head + body + struct.pack(">h", len(props)) + props
