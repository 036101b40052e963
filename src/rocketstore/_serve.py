"""Running servers in one process: now in :mod:`rocketstore.server` (the composition root);
kept so that ``rocketstore._serve.run_servers`` still works."""

from .server._run import run_servers as run_servers

__all__ = ["run_servers"]
