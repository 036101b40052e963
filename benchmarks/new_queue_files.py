"""What making a new consume queue costs where it is made (the put path, with inline dispatch):
the first write through a new file's mapping, and a queue made and its first unit written.

    python benchmarks/new_queue_files.py [--files 300] [--queues 2000] [--dir DIR]

1. ``--files`` new sparse files of a consume-queue file's size (6,000,000 bytes), each
   mapped and its first 20 bytes written through the mapping, in three ways: straight into the
   hole, after ``posix_fallocate`` of the first page, after ``pwrite`` of a page of zeroes
   (what ``MappedFile.ensure_allocated`` now does for a new file's first page). Median and
   mean milliseconds of that first write.
2. ``--queues`` new queues (8 a topic) in a ``ConsumeQueueTable``, each made and given its
   first unit (``find_or_create`` + ``put_unit``), then one flush of the table (which makes
   the new directories durable first): milliseconds a queue, seconds of the flush.

Files go under ``--dir`` (default: a new temporary directory, removed at the end); the figures
depend on the file system (ext4 allocates a block under the page fault of a write into a hole
or an unwritten extent).
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rocketstore.store.queue._consume_queue import ConsumeQueueTable

FILE_SIZE = 300_000 * 20


def first_writes(directory: Path, files: int, how: str) -> list[float]:
    times = []
    for i in range(files):
        fd = os.open(directory / f"{how}-{i}", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, FILE_SIZE)
            if how == "pwrite":
                os.pwrite(fd, bytes(mmap.PAGESIZE), 0)
            elif how == "fallocate":
                os.posix_fallocate(fd, 0, mmap.PAGESIZE)
            mm = mmap.mmap(fd, FILE_SIZE)
        finally:
            os.close(fd)
        start = time.perf_counter()
        mm[0:20] = b"x" * 20
        times.append(time.perf_counter() - start)
        mm.close()
    return times


def new_queues(directory: Path, queues: int) -> tuple[float, float]:
    table = ConsumeQueueTable(directory / "consumequeue", FILE_SIZE)
    (directory / "consumequeue").mkdir()
    try:
        start = time.perf_counter()
        for i in range(queues):
            table.find_or_create(f"T{i // 8}", i % 8).put_unit(1000 + i, 100, 0, 0)
        made = time.perf_counter() - start
        start = time.perf_counter()
        table.flush(0)
        return made / queues, time.perf_counter() - start
    finally:
        table.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--queues", type=int, default=2000)
    ap.add_argument("--dir", default=None, help="default: a new temporary directory")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="new-queue-files-", dir=args.dir))
    try:
        print(f"load {os.getloadavg()[0]:.2f}; files under {root}")
        for how in ("hole", "fallocate", "pwrite"):
            sub = root / how
            sub.mkdir()
            t = first_writes(sub, args.files, how)
            print(
                f"first write after {how:9}: median {statistics.median(t) * 1e3:.3f} ms, "
                f"mean {statistics.mean(t) * 1e3:.3f} ms ({args.files} files)"
            )
        per_queue, flush_s = new_queues(root, args.queues)
        print(
            f"new queue made and its first unit written: {per_queue * 1e3:.3f} ms a queue; "
            f"then one flush of the {args.queues} queues: {flush_s:.2f} s"
        )
        print(f"load {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
