"""What a broker tells a reader of one topic's tier, so that the reader reads the Parquet files
itself: the body of GET_TIER_MANIFEST's answer (rocketstore's own request, served by
``broker._tier_admin``), JSON::

    {"topic": "T",
     "tieredDir": "/abs/path/of/the/tier",       # as the broker sees it
     "host": "broker-host",                      # the broker's host name
     "covered": 1073741824,                      # the tier's covered commit-log offset
     "files": [{"name": "part-….parquet", "commitlog": [from, to], "rows": 1000,
                "bytes": 123456, "queues": {"0": [first, last]}, "store_time": [lo, hi]}],
     "boundary": {"0": 1001}}                    # per queue: the first offset past the files

``files`` are the manifest's entries whose commit-log range ends at or below ``covered``, in
commit-log order; ``boundary`` is computed from exactly those files. Pure values; any thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ._manifest import TierError, TierFile, TopicManifest

NO_TIER = "tiered"  # ext field of the answer of a broker without a tier: "false"


class TierBodyError(ValueError):
    """An answer of GET_TIER_MANIFEST that is not the body above."""


@dataclass(frozen=True)
class TierManifestBody:
    """What a broker's tier holds of one topic, below its covered offset."""

    topic: str
    tiered_dir: str
    host: str
    covered: int
    files: tuple[TierFile, ...]
    boundary: dict[int, int]

    @staticmethod
    def of(
        topic: str, tiered_dir: str, host: str, covered: int, listed: TopicManifest
    ) -> TierManifestBody:
        """The body from one reading of ``covered`` and the topic's manifest ``listed``."""
        files = TopicManifest(topic, listed.covered_files(covered))
        boundary = {}
        for q in files.queue_ids():
            held = files.queue_range(q)
            assert held is not None
            boundary[q] = held[1] + 1
        return TierManifestBody(topic, tiered_dir, host, covered, tuple(files.files), boundary)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "topic": self.topic,
                "tieredDir": self.tiered_dir,
                "host": self.host,
                "covered": self.covered,
                "files": [f.to_json() for f in self.files],
                "boundary": {str(q): o for q, o in sorted(self.boundary.items())},
            }
        ).encode()

    @staticmethod
    def decode(body: bytes | bytearray | memoryview) -> TierManifestBody:
        try:
            doc = json.loads(bytes(body))
            if not isinstance(doc, dict):
                raise TypeError("not an object")
            return TierManifestBody(
                str(doc["topic"]),
                str(doc["tieredDir"]),
                str(doc.get("host") or ""),
                int(doc["covered"]),
                tuple(TierFile.from_json(f) for f in doc["files"]),
                {int(q): int(o) for q, o in doc["boundary"].items()},
            )
        except (ValueError, TypeError, KeyError, AttributeError, TierError) as exc:
            raise TierBodyError(f"not a GET_TIER_MANIFEST answer: {exc}") from None
