"""The console inside a server process (``rocketstore serve`` / ``broker``): started beside the
brokers on the same event loop, over an admin client of the process's own name server."""

from __future__ import annotations

import errno
import logging
import ssl

from ..client._admin import AdminClient
from ._server import ConsoleServer

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:8080"


class EmbeddedConsole:
    """A started console and the admin client it uses; ``close`` stops both."""

    def __init__(self, server: ConsoleServer, admin: AdminClient) -> None:
        self.server = server
        self.admin = admin

    @property
    def address(self) -> str:
        return self.server.address

    async def close(self) -> None:
        try:
            await self.server.close()
        finally:
            self.admin.close()


async def maybe_start_console(
    listen: str | None,
    namesrv: str | None,
    *,
    login: bool = False,
    tls: ssl.SSLContext | None = None,
) -> EmbeddedConsole | None:
    """What ``--console-listen`` asks for: '' no console; None the default address, skipped
    with a warning when its port is taken (another console on the host has it); any other
    value required (OSError raised). No name server to ask: no console. ``login``: visitors
    sign in with an ACL account. Loop thread."""
    if listen == "" or not namesrv:
        return None
    admin = AdminClient(namesrv, signer=None) if login else AdminClient(namesrv)
    server = ConsoleServer(admin, listen or DEFAULT_LISTEN, login=login, tls=tls)
    try:
        await server.start()
    except OSError as exc:
        admin.close()
        if listen is None and exc.errno == errno.EADDRINUSE:
            log.warning("console: %s is taken; running without a console", DEFAULT_LISTEN)
            return None
        raise
    return EmbeddedConsole(server, admin)
