"""Child process of test_disk_full: a store on a small file system, run in its own process so
that a SIGBUS shows as the child's exit status (-7) and fails the test.

``python disk_full_child.py fill|check|resume ROOT REPORT`` writes a JSON report to REPORT
(outside the small file system):

fill    puts with SYNC_FLUSH until the disk refuses them, then ends without a shutdown (a
        crash: the next load recovers abnormally); reports every acknowledged put and the
        statuses of the refused ones
check   opens the store on the still-full disk: reports whether it came up, what a put gets,
        and which acknowledged messages reads find (by commit-log offset and by queue)
        (with a 4th argument, a file to delete: then frees that space while the store runs,
        and reports a put and the reads once dispatch has caught up)
resume  as check, after space was freed: waits for dispatch to catch up, reads by queue, puts
"""

from __future__ import annotations

import json
import os
import sys
import time

from rocketstore.store import Message, MessageStore, PutMessageStatus, StoreConfig

TOPICS = ("DiskA", "DiskB")
QUEUES = 2


def config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=64,
        max_index_num=400,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_allocate_ahead=64 * 1024,
        clean_resource_interval=3_600_000,
    )


def open_store(root: str) -> MessageStore:
    # the usage probe says "empty": puts go on until the file system itself refuses blocks
    store = MessageStore(config(root), disk_usage=lambda _path: 0.0)
    store.load()
    store.start()
    return store


def fill(root: str) -> dict[str, object]:
    store = open_store(root)
    acked: list[list[object]] = []
    refused: list[str] = []
    i = 0
    while len(refused) < 20 and i < 100_000:
        topic = TOPICS[i % 2]
        qid = (i // 2) % QUEUES
        body = (f"m{i:06d}-".encode() * 40)[:400]
        r = store.put_message(Message(topic, body, qid, keys=[f"k{i}"]))
        if r.status is PutMessageStatus.PUT_OK:
            acked.append([i, topic, qid, r.queue_offset, r.wrote_offset])
        else:
            refused.append(r.status.value)
            time.sleep(0.01)
        i += 1
    return {"acked": acked, "refused": refused, "crash": True}


def _reads(store: MessageStore, acked: list[list[object]]) -> tuple[int, int]:
    by_phys = by_queue = 0
    for i, topic, qid, qoff, phys in acked:
        body = (f"m{i:06d}-".encode() * 40)[:400]
        m = store.look_message_by_offset(int(phys))  # type: ignore[call-overload]
        if m is not None and m.body == body:
            by_phys += 1
        g = store.get_message("g", str(topic), int(qid), int(qoff), 1)  # type: ignore[call-overload]
        if g.messages and g.messages[0].body == body:
            by_queue += 1
    return by_phys, by_queue


def check(
    root: str, acked: list[list[object]], wait_dispatch: bool, ballast: str = ""
) -> dict[str, object]:
    store = open_store(root)
    try:
        if wait_dispatch:
            deadline = time.monotonic() + 30
            while store.dispatch_behind_bytes() and time.monotonic() < deadline:
                time.sleep(0.05)
            while store.running_flags.bits and time.monotonic() < deadline:
                time.sleep(0.05)
        else:  # on the full disk: until dispatch has met the full disk and says so
            deadline = time.monotonic() + 120  # a loaded machine
            while not store.running_flags.bits and time.monotonic() < deadline:
                time.sleep(0.05)
        by_phys, by_queue = _reads(store, acked)
        r = store.put_message(Message(TOPICS[0], b"after", 0))
        out: dict[str, object] = {
            "up": True,
            "by_phys": by_phys,
            "by_queue": by_queue,
            "put": r.status.value,
            "put_queue_offset": r.queue_offset,
            "flags": store.running_flags.bits,
            "behind": store.dispatch_behind_bytes(),
        }
        if ballast:  # space again while the store runs: dispatch goes on, puts are taken
            os.unlink(ballast)
            deadline = time.monotonic() + 30
            while (store.running_flags.bits or store.dispatch_behind_bytes()) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.05)
            r = store.put_message(Message(TOPICS[0], b"after space", 0))
            out["space_put"] = r.status.value
            out["space_put_queue_offset"] = r.queue_offset
            out["space_by_queue"] = _reads(store, acked)[1]
        return out
    finally:
        store.shutdown()


def main() -> None:
    mode, root, report = sys.argv[1:4]
    if mode == "fill":
        out = fill(root)
        with open(report, "w") as f:
            json.dump(out, f)
        os._exit(0)  # no shutdown: a crash on the full disk
    with open(report + ".fill") as f:
        acked = json.load(f)["acked"]
    out = check(root, acked, mode == "resume", *sys.argv[4:5])
    with open(report, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
