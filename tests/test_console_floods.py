"""What a visitor of the console can take from others: slow or silent connections keep no
visitor out (a new connection takes the place of the one that has waited longest without
sending its whole request; before, 64 of them made the console answer 503 to everyone for as
long as they were held, 10 s a wave), and an account's sign-ins end only its own sessions
(before, any account that could sign in ended the least recently used sessions of the table,
an administrator's included, by signing in as often as the table has places)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rocketstore.console import _http as console_http
from rocketstore.console import _server as console_server
from support.console_env import ATTACKER_ACL_YML, ConsoleEnv, http, opened, sign_in
from support.waits import wait_until


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    with opened(tmp_path_factory.mktemp("console-floods"), acl=True, acl_yml=ATTACKER_ACL_YML) as e:
        yield e


def who(env: ConsoleEnv, cookie: str) -> object:
    r = http(env, "GET", "/api/session", cookie=cookie)
    assert r.status == 200, r.body
    return r.doc.get("user")


def test_slow_connections_keep_no_visitor_out(env: ConsoleEnv) -> None:
    assert env.console is not None
    server = env.console.http
    host, port = env.console.address.rsplit(":", 1)
    slow: list[socket.socket] = []
    try:
        for _ in range(console_http.MAX_CONNECTIONS + 8):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(b"GET /api/session HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ended
            slow.append(sock)
        assert wait_until(
            lambda: env.run(_count(server)) >= console_http.MAX_CONNECTIONS, timeout=60, poll=0.05
        )
        admin = sign_in(env, "console-admin", "admin-secret-1")  # a place made for it
        assert who(env, admin) == "console-admin"
        assert http(env, "GET", "/").status == 200
        # the connections past the limit each made room, once the server took them all
        assert wait_until(lambda: server.replaced >= 8, timeout=60, poll=0.05), server.replaced
    finally:
        for sock in slow:
            sock.close()


async def _count(server: console_http.HttpServer) -> int:
    return len(server._tasks)


def test_an_accounts_sign_ins_end_only_its_own_sessions(
    env: ConsoleEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert env.console is not None
    places = 2 * console_server.MAX_SESSIONS_PER_ACCOUNT
    monkeypatch.setattr(console_server, "MAX_SESSIONS", places)  # a smaller table, same rules
    admin = sign_in(env, "console-admin", "admin-secret-1")
    attacker = [sign_in(env, "attackAK1", "attackSK1") for _ in range(2 * places)]
    assert who(env, admin) == "console-admin"
    assert who(env, attacker[-1]) == "attackAK1"
    assert who(env, attacker[0]) is None  # its own oldest went
    mine = [s for s in env.console.sessions.values() if s.access_key == "attackAK1"]
    assert len(mine) == console_server.MAX_SESSIONS_PER_ACCOUNT
