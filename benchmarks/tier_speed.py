"""The tiered store's writing side: time to tier a sealed commit-log file against the time to
fill it, Parquet bytes over commit-log bytes for text-like bodies, and the put rate with the
tiering service at work against without it (alternated pairs).

    python benchmarks/tier_speed.py [--file-mib 256] [--files 2] [--backlog 2]
                                    [--puts 200000] [--pairs 3] [--skip-impact] [--dir DIR]

Stores are made in a new temporary directory (or a new sub-directory of ``--dir``) and removed
afterwards. The put rate is in-process (``MessageStore.put_message``, ASYNC_FLUSH); tiering is
measured unpaced (``tier_range``), the put comparison runs the service with its default pacing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

from rocketstore.bench.storage import verdict
from rocketstore.bench.tier import put_impact, tier_speed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file-mib", type=int, default=256, help="commit-log file size (MiB)")
    parser.add_argument("--files", type=int, default=2, help="sealed files to fill and tier")
    parser.add_argument("--backlog", type=int, default=2, help="untiered files before puts")
    parser.add_argument("--puts", type=int, default=200_000, help="timed puts per run")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--skip-impact", action="store_true", help="only the tiering speed")
    parser.add_argument("--dir", default=None, help="parent of the scratch directory")
    args = parser.parse_args()
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="tier-speed-", dir=args.dir)
    size = args.file_mib << 20
    try:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        speed = tier_speed(os.path.join(scratch, "speed"), size, args.files)
        print(json.dumps({"tier_speed": speed}, indent=1))
        shutil.rmtree(os.path.join(scratch, "speed"), ignore_errors=True)
        if not args.skip_impact:
            impact = put_impact(
                os.path.join(scratch, "impact"), size, args.backlog, args.puts, args.pairs
            )
            print(json.dumps({"put_impact": impact}, indent=1))
            print(f"puts with tiering on / off: {verdict(impact['on_over_off'])}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
