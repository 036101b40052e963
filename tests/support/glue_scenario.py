"""A broker scenario run in a child process by tests/test_compiled_glue.py, once over the
mypyc-compiled modules and once over their sources (``ROCKETSTORE_NO_EXTENSIONS=1``).

    PYTHONPATH=tests python -m support.glue_scenario OUT_DIR PORT

A broker over ``OUT_DIR/store`` with a standing clock gets, through one server connection:
plain sends (V1 and V2 headers, tags, keys, unicode, empty and binary bodies), sends the
general path serves (a delay, a transaction half, a queue out of range, an unknown topic, bad
numbers), a batch, pulls of every queue, a query by key, and finally a malformed frame. The
answers' bytes go to ``OUT_DIR/answers.bin``, one length-prefixed write after another.
"""

from __future__ import annotations

import asyncio
import random
import struct
import sys
from pathlib import Path
from typing import Any

from rocketstore import ManualClock, StoreConfig
from rocketstore._speedups import compiled_glue
from rocketstore.broker._config import BrokerConfig
from rocketstore.broker.state._topic_config import TopicConfig
from rocketstore.client._producer import encode_batch
from rocketstore.remoting import Connection, RemotingCommand
from rocketstore.server import BrokerServer

from .remoting import RecordingTransport

TOPIC = "GlueTopic"


def _v2(n: int, **changes: Any) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "a": "PID_glue",
        "b": TOPIC,
        "c": "TBW102",
        "d": 4,
        "e": n % 4,
        "f": 0,
        "g": str(1_795_532_961_000 + n),
        "h": 0,
        "i": f"UNIQ_KEY\x010100007F0000F4400000{n:06d}\x02WAIT\x01true\x02",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    ext.update(changes)
    return ext


def requests() -> list[RemotingCommand]:
    rng = random.Random(11)
    out: list[RemotingCommand] = []
    for i in range(300):
        props = f"UNIQ_KEY\x010100007F0000F4400000{i:06d}\x02"
        kind = rng.randrange(8)
        if kind == 1:
            props += f"TAGS\x01Tag{i % 3}\x02KEYS\x01k{i} shared\x02"
        elif kind == 2:
            props += "k\x01\u00e9t\u00e9 \u4e2d\x02"
        elif kind == 3:
            props += "DELAY\x012\x02"
        elif kind == 4:
            props += "TRAN_MSG\x01true\x02PGROUP\x01PID_glue\x02"
        body = rng.randbytes(rng.choice((0, 1, 100, 1024, 3000)))
        if kind == 5:
            ext = {
                "producerGroup": "PID_glue",
                "topic": TOPIC,
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": "4",
                "queueId": str(i % 4),
                "sysFlag": "0",
                "bornTimestamp": str(1_795_532_961_000 + i),
                "flag": "3",
                "properties": props,
                "reconsumeTimes": "0",
                "unitMode": "false",
                "batch": "false",
            }
            out.append(RemotingCommand.request(10, ext, body))
            continue
        changes: dict[str, Any] = {"i": props}
        if kind == 6:
            changes["e"] = rng.choice((9, -1, "x", " 1"))
        elif kind == 7:
            changes["b"] = f"Other{i % 2}"
        out.append(RemotingCommand.request(310, _v2(i, **changes), body))
    batch = encode_batch(
        [(f"batch {n}".encode(), {"KEYS": f"bk{n}", "TAGS": "B"}) for n in range(5)]
    )
    out.append(RemotingCommand.request(320, _v2(0, m="true", i=""), batch))
    for q in range(4):
        pull = {
            "consumerGroup": "glue-consumer",
            "topic": TOPIC,
            "queueId": str(q),
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "0",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        }
        out.append(RemotingCommand.request(11, pull))
    return out


async def run(out: Path, port: int) -> None:
    store_config = StoreConfig(
        store_path_root_dir=str(out / "store"),
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        flush_disk_type="ASYNC_FLUSH",
        ha_listen_port=0,
    )
    config = BrokerConfig.from_store_config(store_config, listen_port=port)
    broker = BrokerServer(store_config, config, clock=ManualClock(1_795_532_962_000))
    await broker.start()
    sink = RecordingTransport()
    try:
        assert broker.broker is not None
        broker.broker.topics.update(TopicConfig(TOPIC, 4, 4))
        conn = Connection(broker.server.handlers, backpressure=True)
        conn.connection_made(sink)  # type: ignore[arg-type]
        random.seed(7)  # a send to queue -1 picks a queue at random
        frames = [r.encode() for r in requests()]
        frames.append(struct.pack(">i", 3) + b"bad")  # a frame too short: the connection closes
        for frame in frames:
            buf = conn.get_buffer(len(frame))
            buf[: len(frame)] = frame
            conn.buffer_updated(len(frame))
            await asyncio.sleep(0)
        await asyncio.sleep(0.2)
    finally:
        await broker.shutdown()
    with open(out / "answers.bin", "wb") as f:
        for w in sink.writes:
            f.write(struct.pack(">i", len(w)) + w)
    print("compiled" if compiled_glue() else "sources")


if __name__ == "__main__":
    asyncio.run(run(Path(sys.argv[1]), int(sys.argv[2])))
