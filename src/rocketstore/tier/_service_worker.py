"""One commit-log range tiered in a child process, at a lower CPU priority.

Tiering is mostly interpreter work (scanning records, gathering them per queue) between
pyarrow's compression; in the broker's process it would take the interpreter lock from the put
path. The tiering service therefore runs each range here, in a process of its own, niced
(``os.nice(NICE)``): the broker's threads keep their share of the CPU and all of their
interpreter. The child prints the range's result as one JSON line; killing it is a crash of
the writer, which the next run repairs (the writer's re-run rules).

    python -m rocketstore.tier._service_worker COMMIT_LOG_DIR FILE_SIZE TIERED_DIR START END
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._manifest import TierError
from ._writer import Damaged, RangeResult, WriterOptions

NICE = 10


def result_to_json(r: RangeResult) -> dict[str, Any]:
    return {
        "start": r.start,
        "end": r.end,
        "complete": r.complete,
        "files": r.files,
        "rows": r.rows,
        "parquet_bytes": r.parquet_bytes,
        "skipped_topics": list(r.skipped_topics),
        "damaged": [[d.path, d.position, d.why] for d in r.damaged],
    }


def result_from_json(raw: dict[str, Any]) -> RangeResult:
    return RangeResult(
        int(raw["start"]),
        int(raw["end"]),
        bool(raw["complete"]),
        int(raw["files"]),
        int(raw["rows"]),
        int(raw["parquet_bytes"]),
        tuple(raw["skipped_topics"]),
        tuple(Damaged(str(p), int(at), str(why)) for p, at, why in raw["damaged"]),
    )


def run_child(
    commit_log_dir: Path,
    file_size: int,
    root: Path,
    start: int,
    end: int,
    options: WriterOptions,
    *,
    stopping: Callable[[], bool],
    poll_s: float = 0.05,
    started: Callable[[int], None] | None = None,
) -> RangeResult | None:
    """Tier ``[start, end)`` in a niced child process (``started`` gets its pid); None when
    ``stopping()`` turned true first (the child is killed). Raises TierError with the child's
    last error line."""
    args = [
        sys.executable,
        "-m",
        __name__,
        str(commit_log_dir),
        str(file_size),
        str(root),
        str(start),
        str(end),
        str(options.row_group_rows),
        str(options.row_group_bytes),
        str(options.compression_level),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if started is not None:
        started(proc.pid)
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                if stopping():
                    proc.kill()
                    proc.communicate()
                    return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        raise TierError(
            f"tiering commit-log range {start} failed in its worker (exit {proc.returncode}): "
            f"{lines[-1] if lines else 'no message'}"
        )
    return result_from_json(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str]) -> int:
    import logging

    from ..store.read._reader import CommitLogView
    from ._writer import tier_range

    os.nice(NICE)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    cl_dir, size, root, start, end, rows, group_bytes, level = argv
    options = WriterOptions(int(rows), int(group_bytes), int(level))
    view = CommitLogView(Path(cl_dir), int(size))
    try:
        result = tier_range(view, root, int(start), int(end), options=options)
    except TierError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        view.close()
    print(json.dumps(result_to_json(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
