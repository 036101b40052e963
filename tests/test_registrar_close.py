"""Closing the name-server registrar while a registration round runs: the periodic task ends
after that round even when the round loses the cancellation (asyncio.wait_for on Python 3.11
can swallow one that arrives as its wait ends), not a whole period later (a broker's shutdown
hung for the 30 s period that way)."""

from __future__ import annotations

import asyncio
from typing import Any

from rocketstore.broker._outer_api import NamesrvRegistrar


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

        async def swallowing_round() -> list[Any]:
            running.set()
            try:
                await asyncio.sleep(0.2)
            except asyncio.CancelledError:
                pass  # lost, as a wait_for inside a round may lose it
            return []

        registrar.register_all = swallowing_round  # type: ignore[method-assign]
        await asyncio.wait_for(running.wait(), 5.0)  # the first periodic round is due at once
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(registrar.close(unregister=False), 10.0)
        return loop.time() - began

    took = asyncio.run(main())
    assert took < 2.0, took  # the round's rest, not the 30 s period
