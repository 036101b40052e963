"""The one place where the network commands turn the client's errors into one line on standard
error (``error: ...`` with a hint) and exit status 1: the commands and command groups of
``_cli_net`` and ``_cli_admin`` are made with ``cls=ClientCommand`` / ``cls=ClientGroup``.

    ClientError                     a request refused (its response code)
    ├── InvalidNameError            a topic or group name a broker would refuse (a ValueError)
    ├── TopicNotFoundError          no route for the topic, or not created on a send
    └── NotANameServerError         --namesrv names a broker (or something else)
    ValueError                      bad input, e.g. a message id that does not decode
    RemotingError                   a call that failed: refused, timed out, closed
    └── NameServerUnreachableError  no name server answered
"""

from __future__ import annotations

from typing import IO, Any

import click

NAMESRV_HINT = "the name server listens on 9876 by default"


class CommandError(click.ClickException):
    """Shown as ``error: <message>`` on standard error; exit status 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


def describe(exc: Exception) -> str:
    """One line for a client error, with a hint where one helps."""
    from ..client._names import InvalidNameError
    from ..client._route import (
        ClientError,
        NameServerUnreachableError,
        NotANameServerError,
        TopicNotFoundError,
    )
    from ..remoting import RemotingError

    if isinstance(exc, NotANameServerError):
        if exc.is_broker:
            return f"{exc.address} is a broker, not a name server ({NAMESRV_HINT})"
        return f"{exc.address} does not answer as a name server ({NAMESRV_HINT})"
    if isinstance(exc, NameServerUnreachableError):
        return (
            f"{exc}; is a name server running there? (`rocketstore serve` or "
            f"`rocketstore namesrv`; --namesrv HOST:PORT, {NAMESRV_HINT})"
        )
    if isinstance(exc, TopicNotFoundError):
        reason = exc.remark or f"topic {exc.topic} does not exist"
        if exc.topic not in reason:
            reason = f"topic {exc.topic} does not exist: {reason}"
        return f"{reason} (create it with `rocketstore topic create -t {exc.topic}`)"
    if isinstance(exc, InvalidNameError):
        return exc.remark or str(exc)
    if isinstance(exc, ClientError):
        return str(exc)
    if isinstance(exc, RemotingError):
        return f"{exc} (a broker out of reach: is it running, and is the address right?)"
    return str(exc).replace("\n", " ")


def _client_errors() -> tuple[type[Exception], ...]:
    from ..client._route import ClientError
    from ..remoting import RemotingError

    return (ClientError, RemotingError, ValueError)


class ClientCommand(click.Command):
    """A command whose client errors end it with one line and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _client_errors() as exc:
            raise CommandError(describe(exc)) from exc
        except click.ClickException as exc:
            if type(exc) is not click.ClickException:
                raise  # usage errors keep click's form and exit status 2
            raise CommandError(exc.message) from exc


class ClientGroup(click.Group):
    """A group whose sub-commands' client errors end them with one line and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _client_errors() as exc:
            raise CommandError(describe(exc)) from exc
        except click.ClickException as exc:
            if type(exc) is not click.ClickException:
                raise  # usage errors keep click's form and exit status 2
            raise CommandError(exc.message) from exc
