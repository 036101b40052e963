"""A store in a child process with a low open-file limit (RLIMIT_NOFILE), for
test_queue_mappings.py. Prints one JSON line with what it saw.

    low_limit_child.py e2e ROOT LIMIT QUEUES ROUND BOUND [crash]
        put one message to every queue (the ROUND-th of each), read every queue back from
        offset 0 (ROUND + 1 messages each), shut down (with ``crash``: the process ends
        without a shutdown, the abort file left, as a kill does); BOUND 0: the default
        mapping bound
    low_limit_child.py emfile ROOT LIMIT
        every descriptor taken while a put needs a new consume-queue file: the refusal's
        words and the log lines naming the cause; descriptors given back: writes again
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig

TOPICS = 50
DEADLINE_S = 120.0


def wait(cond: object) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


def config(root: str, bound: int) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 100,
        max_mapped_queue_files=bound,
        max_hash_slot_num=64,
        max_index_num=400,
    )


def body(q: int, n: int) -> bytes:
    return b"q%d-n%d" % (q, n)


def e2e(root: str, queues: int, rnd: int, bound: int, crash: bool) -> dict[str, object]:
    refused = []
    with MessageStore(config(root, bound)) as store:
        recovery = store.load_result.mode if store.load_result is not None else ""
        for q in range(queues):
            r = store.put_message(Message(f"Many{q % TOPICS}", body(q, rnd), q // TOPICS))
            if not r.ok:
                refused.append(f"{q}: {r.status.name} {r.error}")
        assert wait(lambda: store.dispatch_behind_bytes() == 0), "dispatch did not catch up"
        wrong = []
        for q in range(queues):
            got = store.get_message("g", f"Many{q % TOPICS}", q // TOPICS, 0, 64)
            bodies = [m.body for m in got.messages]
            if bodies != [body(q, n) for n in range(rnd + 1)]:
                wrong.append(f"{q}: {got.status.name} {bodies[:3]}")
        files = store.file_statistics()
        if crash:
            print(json.dumps({"refused": refused[:5], "wrong": wrong[:5]}), flush=True)
            os._exit(0)
    return {
        "recovery": recovery,
        "refused": refused[:5],
        "wrong": wrong[:5],
        "queue_files": files.queue_files,
        "mapped_queue_files": files.mapped_queue_files,
        "bound": files.mapped_queue_files_bound,
        "open_files": files.open_files,
        "limit": files.open_files_limit,
    }


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def emfile(root: str) -> dict[str, object]:
    lines = Lines()
    logging.getLogger("rocketstore").addHandler(lines)
    hogs: list[int] = []
    with MessageStore(config(root, 0)) as store:
        assert store.put_message(Message("Before", b"b0", 0)).ok
        try:
            while True:  # every descriptor the limit allows
                hogs.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        # stored in the commit log; its queue's first file cannot be opened
        first = store.put_message(Message("After", b"a0", 0))
        refusals: list[str] = []

        def refused() -> bool:
            r = store.put_message(Message("Before", b"probe", 0))
            if r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
                refusals.append(r.error or "")
            return len(refusals) >= 3

        saw_refusal = wait(refused)
        for fd in hogs:
            os.close(fd)
        hogs.clear()
        writable = wait(lambda: store.put_message(Message("After", b"a1", 0)).ok)
        dispatched = wait(lambda: store.dispatch_behind_bytes() == 0)
        after = [m.body for m in store.get_message("g", "After", 0, 0, 64).messages]
    return {
        "first": first.status.name,
        "saw_refusal": saw_refusal,
        "refusals": refusals,
        "writable": writable,
        "dispatched": dispatched,
        "after": [b.decode() for b in after],
        "lines": lines.lines,
    }


def main() -> None:
    mode, root, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    if mode == "e2e":
        crash = sys.argv[7:] == ["crash"]
        out = e2e(root, int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), crash)
    else:
        out = emfile(root)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
