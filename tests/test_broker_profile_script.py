"""benchmarks/broker_profile.py puts each py-spy sample of the broker's loop thread in the
group of its deepest known frame, the socket calls and the broker's statistics included."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "broker_profile.py"
LOOP = "thread (12767): MainThread"
RUN = "Handle._run (asyncio/events.py:80)"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("broker_profile_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_samples_are_grouped_by_their_deepest_known_frame(tmp_path: Path) -> None:
    raw = tmp_path / "samples.txt"
    stacks = [
        # a recv whose libc frame py-spy could not name
        (
            [
                RUN,
                "_SelectorSocketTransport._read_ready (asyncio/selector_events.py:1000)",
                "sock_recv (socketmodule.c:3600)",
                "sock_call_ex (socketmodule.c:920)",
                "sock_recv_impl (socketmodule.c:3504)",
                "0x7fd9de4a4193 (libc.so.6)",
            ],
            7,
        ),
        # an answer's send below the connection's write
        (
            [
                RUN,
                "Connection.send (rocketstore/remoting/_connection.py:300)",
                "sock_send_impl (socketmodule.c:4200)",
                "0x7fd9de4a5000 (libc.so.6)",
            ],
            5,
        ),
        # the broker's per-request statistics
        (
            [
                RUN,
                "BrokerStats.note_rpc (rocketstore/broker/state/_stats.py:113)",
                "message_type (rocketstore/broker/state/_stats.py:70)",
                "unicode_split (libpython3.11.so.1.0)",
            ],
            3,
        ),
        # the store's put called from the send processor counts as the store's
        (
            [
                RUN,
                "SendProcessor.send (rocketstore/broker/messaging/_send.py:205)",
                "CommitLog.put_message (rocketstore/store/log/_commit_log.py:545)",
            ],
            2,
        ),
        ([RUN], 1),
    ]
    lines = [f"{LOOP};{';'.join(frames)} {n}" for frames, n in stacks]
    lines.append("thread (12770): ReputMessageService;_run (rocketstore/store/_reput.py:90) 50")
    raw.write_text("\n".join(lines) + "\n")
    total, counts = _script().group_samples(str(raw))
    assert total == 18  # the loop thread's samples only
    assert counts == {
        "kernel recv": 7,
        "kernel send": 5,
        "broker stats": 3,
        "store put": 2,
        "asyncio loop / other": 1,
    }
