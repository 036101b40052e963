"""Who becomes master: RocketMQ 5.1.4's DefaultElectPolicy.

The candidates are first the SyncStateSet, then (only with ``enableElectUncleanMaster``) every
replica of the group. Among the candidates that are alive:

1. the old master, when it is among them and no other broker is designated;
2. else the designated broker (an administrator's ``electMaster -b N``) when it is among them,
   or nobody when it is not (the next candidate set is tried);
3. else the best by the heartbeats' (epoch, max offset, election priority): the highest epoch,
   then the highest max offset, then the lowest priority number; the lowest broker id breaks a
   tie that is left (RocketMQ takes whichever its set yields first).

None when no candidate set has a broker that qualifies.

Pure functions; any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ._heartbeat import NO_PRIORITY, BrokerLive


def _rank(broker_id: int, live: BrokerLive | None) -> tuple[int, int, int, int]:
    if live is None:
        return (1 << 31, 1 << 63, NO_PRIORITY, broker_id)  # after anyone the table knows
    return (-live.epoch, -live.max_offset, live.election_priority, broker_id)


def _try_elect(
    candidates: Iterable[int],
    alive: Callable[[int], bool],
    live_info: Callable[[int], BrokerLive | None],
    old_master: int | None,
    prefer: int | None,
) -> int | None:
    valid = sorted(b for b in set(candidates) if alive(b))
    if not valid:
        return None
    if old_master in valid and (prefer is None or prefer == old_master):
        return old_master
    if prefer is not None:
        return prefer if prefer in valid else None
    return min(valid, key=lambda b: _rank(b, live_info(b)))


def elect(
    sync_state_set: Iterable[int],
    all_replicas: Iterable[int] | None,
    *,
    alive: Callable[[int], bool],
    live_info: Callable[[int], BrokerLive | None],
    old_master: int | None,
    prefer: int | None = None,
) -> int | None:
    """The broker to make master, or None. ``all_replicas``: the group's every replica when
    unclean elections are allowed, else None."""
    chosen = _try_elect(sync_state_set, alive, live_info, old_master, prefer)
    if chosen is None and all_replicas is not None:
        chosen = _try_elect(all_replicas, alive, live_info, old_master, prefer)
    return chosen
