"""A web console for rocketstore clusters (cluster, topics, consumer groups, messages, live
throughput) over the admin client; see docs/console.md."""

from ._server import ConsoleServer as ConsoleServer

__all__ = ["ConsoleServer"]
