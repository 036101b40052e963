"""consumerOffset.json: written only when the table changed, by a worker thread (never the
broker's event loop), atomically: a process killed (-9) at any point of a write leaves a whole,
readable file with every entry."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from rocketstore.broker.state._consumer_offset import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
from rocketstore.remoting._fastjson import loads_lenient
from support.waits import wait_until

ENTRIES = 20_000  # topic@group keys of the child's table


def test_an_unchanged_table_is_not_written_again(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("h", "G", "T", 0, 5)
    assert m.persist_if_dirty()
    inode = os.stat(tmp_path / CONSUMER_OFFSET_FILE).st_ino
    assert not m.persist_if_dirty()
    m.commit_offset("h", "G", "T", 0, 5)  # the stored value again: no change
    assert not m.persist_if_dirty()
    assert os.stat(tmp_path / CONSUMER_OFFSET_FILE).st_ino == inode  # not replaced
    m.commit_offset("h", "G", "T", 0, 6)
    assert m.persist_if_dirty()
    assert ConsumerOffsetManager(tmp_path).query_offset("G", "T", 0) == 6


CHILD = textwrap.dedent(
    """
    import sys
    from rocketstore.broker.state._consumer_offset import ConsumerOffsetManager
    m = ConsumerOffsetManager(sys.argv[1])
    entries = int(sys.argv[2])
    round_ = 0
    while True:
        round_ += 1
        for i in range(entries):
            m.commit_offset("h", f"G{i % 100}", f"Topic{i // 100}", i % 4, round_)
        m.persist()
        print(round_, flush=True)
    """
)


def test_kill_9_mid_write_leaves_a_readable_file(tmp_path: Path) -> None:
    rng = random.Random(33)
    last_round = 0
    for attempt in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(ENTRIES)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            # a whole table is on disk once the child has written one (each round rewrites
            # every entry); the kill then lands at a random point of a later write
            line = proc.stdout.readline()
            assert line.strip(), f"attempt {attempt}: the child wrote nothing"
            time.sleep(rng.uniform(0.0, 0.5))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        loaded = ConsumerOffsetManager(tmp_path)  # no ConfigFileError: a whole file
        table = loaded.table()
        keys = {key for key in table}
        assert len(keys) == ENTRIES, attempt
        rounds = {offset for queues in table.values() for offset in queues.values()}
        assert len(rounds) == 1, rounds  # one whole round, never half of one
        (round_,) = rounds
        assert round_ >= 1
        last_round = max(last_round, round_)
        doc: Any = loads_lenient((tmp_path / CONSUMER_OFFSET_FILE).read_text())
        assert len(doc["offsetTable"]) == ENTRIES
    assert last_round >= 1


def test_the_broker_persists_offsets_off_its_event_loop(cluster: Any) -> None:
    broker = cluster.brokers["broker-a"]
    threads: list[threading.Thread] = []
    original = broker.offsets.persist_if_dirty

    def recording() -> bool:
        threads.append(threading.current_thread())
        return bool(original())

    broker.offsets.persist_if_dirty = recording
    try:
        broker.offsets.commit_offset("h", "OffGroup", "OffTopic", 0, 42)
        config = Path(broker.config_dir)
        assert wait_until(
            lambda: ConsumerOffsetManager(config).query_offset("OffGroup", "OffTopic", 0) == 42,
            60.0,
        )
    finally:
        broker.offsets.persist_if_dirty = original
    assert threads and all(t is not cluster.thread for t in threads)
