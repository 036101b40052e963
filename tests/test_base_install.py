"""`pip install .` without extras has no numpy, pyarrow or pyspark: the name server and the
broker still import, start, store a message and hand it out (the README's first command)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys

    class NoExtras:  # what a base install lacks cannot be imported
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("numpy", "pyarrow", "pyspark"):
                raise ImportError(f"{name} is not installed (a base install)")
            return None

    sys.meta_path.insert(0, NoExtras())

    import asyncio
    from rocketstore import StoreConfig
    from rocketstore.broker._config import BrokerConfig
    from rocketstore.cli import main  # noqa: F401  every command group imports
    from rocketstore.client import MessageQueue, Producer, PullConsumer
    from rocketstore.namesrv import NameServer
    from rocketstore.server import BrokerServer

    async def up(root):
        ns = NameServer("127.0.0.1", 0)
        await ns.start()
        config = BrokerConfig(listen_port=0, namesrv_addr=ns.address, broker_name="b")
        server = BrokerServer(StoreConfig(store_path_root_dir=root), config)
        await server.start()
        return ns, server

    async def down(ns, server):
        await server.shutdown()
        await ns.close()

    loop = asyncio.new_event_loop()
    import threading
    threading.Thread(target=loop.run_forever, daemon=True).start()
    run = lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result(30)
    ns, server = run(up(sys.argv[1]))
    try:
        with Producer(ns.address, timeout=5.0) as producer:
            sent = producer.send("Base", b"hello", queue=MessageQueue("Base", "b", 0))
        assert sent.status == "SEND_OK", sent
        with PullConsumer(ns.address, "G", timeout=5.0) as consumer:
            got = consumer.pull(MessageQueue("Base", "b", 0), 0, 8)
        assert [m.body for m in got.messages] == [b"hello"], got
        assert not [m for m in sys.modules if m.split(".")[0] in ("numpy", "pyarrow")]
    finally:
        run(down(ns, server))
    print("ok")
    """
)


def test_the_servers_run_without_the_extras(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
