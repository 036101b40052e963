"""The name-server registrar's periodic task: closing it while a round runs ends it after that
round even when the round loses the cancellation (asyncio.wait_for on Python 3.11 can swallow
one that arrives as its wait ends), not a whole period later (a broker's shutdown hung for the
30 s period that way); waiting for a round shares the one asked for."""

from __future__ import annotations

import asyncio
from typing import Any

from rocketstore.broker.replication._outer_api import NamesrvRegistrar


def test_close_during_a_round_that_loses_the_cancellation() -> None:
    async def main() -> float:
        registrar = NamesrvRegistrar(
            [],
            "C",
            "b",
            0,
            "127.0.0.1:1",
            "127.0.0.1:2",
            lambda: ({"counter": 1}, {}),
            initial_delay_s=0.0,
        )
        await registrar.start()  # one round at start, then the periodic task
        running = asyncio.Event()

        async def swallowing_round(kind: str) -> list[Any]:
            running.set()
            try:
                await asyncio.sleep(0.2)
            except asyncio.CancelledError:
                pass  # lost, as a wait_for inside a round may lose it
            return []

        registrar._round = swallowing_round  # type: ignore[method-assign]
        await asyncio.wait_for(running.wait(), 60.0)  # the first periodic round is due at once
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(registrar.close(unregister=False), 60.0)
        return loop.time() - began

    took = asyncio.run(main())
    assert took < 20.0, took  # the round's rest (0.2 s), not a wait for the 30 s period


def test_waiting_for_a_round_shares_the_one_asked_for() -> None:
    async def main() -> tuple[int, int, int]:
        registrar = NamesrvRegistrar(
            [], "C", "b", 0, "127.0.0.1:1", "127.0.0.1:2", lambda: ({"counter": 1}, {}),
            initial_delay_s=30.0,
        )  # fmt: skip
        await registrar.start()
        await asyncio.sleep(0)  # the periodic task reaches its wait
        before = registrar.rounds
        # two creators of topics wait for the name servers to know them, and the first topic
        # asked for a round as well
        waits = [asyncio.create_task(registrar.registered()) for _ in range(2)]
        registrar.register_now()
        await asyncio.wait_for(asyncio.gather(*waits), 5.0)
        shared = registrar.rounds - before
        await registrar.close(unregister=False)
        await asyncio.wait_for(registrar.registered(), 5.0)  # closed: a round of its own
        return before, shared, registrar.rounds

    before, shared, after = asyncio.run(main())
    assert (before, shared, after) == (1, 1, 3)
