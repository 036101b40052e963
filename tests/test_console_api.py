"""The console's JSON API and pages against a real name server and broker on loopback:
each endpoint, bad input (4xx with a JSON error, the server still up), and ACL (sign-in
required, a non-admin account's change refused by the broker)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.console._http import HttpServer, Request, Response
from rocketstore.console._server import SESSION_IDLE_S
from rocketstore.remoting import RemotingClient, RemotingCommand
from support.console_env import BROKER, ConsoleEnv, http, opened
from support.waits import wait_dispatched, wait_until

TOPIC = "ConsoleTopic"
GROUP = "ConsoleGroup"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    with opened(tmp_path_factory.mktemp("console")) as e:
        yield e


def created(env: ConsoleEnv, topic: str, queues: int = 2) -> None:
    r = http(
        env,
        "POST",
        "/api/topic/create",
        {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues},
    )
    assert r.status == 200, r.body
    assert r.doc == {"topic": topic, "brokers": [BROKER]}
    assert env.ns is not None
    assert wait_until(lambda: env.ns is not None and env.ns.routes.route(topic) is not None)


def raw_exchange(env: ConsoleEnv, data: bytes) -> bytes:
    assert env.console is not None
    with socket.create_connection(("127.0.0.1", env.console.http.port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


# ---- pages ----------------------------------------------------------------------------------


def test_pages_are_served_from_the_package(env: ConsoleEnv) -> None:
    page = http(env, "GET", "/")
    assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
    assert b'<script src="/app.js">' in page.body
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    js = http(env, "GET", "/app.js")
    assert js.status == 200 and b"/api/cluster" in js.body
    assert http(env, "GET", "/style.css").headers["Content-Type"].startswith("text/css")
    head = http(env, "HEAD", "/app.js")
    assert head.status == 200 and head.body == b""
    assert head.headers["Content-Length"] == str(len(js.body))
    missing = http(env, "GET", "/nothing.html")
    assert missing.status == 404 and missing.doc["error"] == "no page /nothing.html"


def test_session_without_acl_needs_no_sign_in(env: ConsoleEnv) -> None:
    doc = http(env, "GET", "/api/session").doc
    assert doc["login"] is False and doc["user"] is None
    assert "CONSUME_MESSAGE_DIRECTLY" in doc["resend"]
    r = http(env, "POST", "/api/login", {"accessKey": "a", "secretKey": "b"})
    assert r.status == 400


# ---- cluster, throughput --------------------------------------------------------------------


def test_cluster_shows_each_broker_with_its_runtime_figures(env: ConsoleEnv) -> None:
    doc = http(env, "GET", "/api/cluster").doc
    [b] = doc["brokers"]
    assert (b["brokerName"], b["brokerId"], b["address"], b["role"]) == (
        BROKER,
        0,
        env.broker_addr,
        "MASTER",
    )
    assert b["version"] == "V4_9_8"
    assert b["disk"].startswith("Total : ")
    assert b["haLagBytes"] is None  # no slave: no replication lag figure
    assert isinstance(b["putTps"], float)
    assert abs(doc["time"] - time.time() * 1000) < 60_000


def test_throughput_has_put_and_get_tps_per_broker(env: ConsoleEnv) -> None:
    doc = http(env, "GET", "/api/throughput").doc
    assert [b["broker"] for b in doc["brokers"]] == [f"{BROKER}/0"]
    assert set(doc["brokers"][0]) == {"broker", "putTps", "getTps"}


# ---- topics ---------------------------------------------------------------------------------


def test_topic_create_detail_perm_delete(env: ConsoleEnv) -> None:
    topic = "ConsoleTopicLife"
    created(env, topic, queues=3)
    names = {t["topic"]: t["kind"] for t in http(env, "GET", "/api/topics").doc["topics"]}
    assert names[topic] == "normal"
    for made_by_the_broker in ("TBW102", BROKER, "ConsoleCluster", "ConsoleCluster_REPLY_TOPIC"):
        assert names[made_by_the_broker] == "system", made_by_the_broker
    with Producer(env.namesrv) as p:
        for i in range(4):
            p.send(topic, b"m%d" % i, queue=MessageQueue(topic, BROKER, 1))
    assert env.broker is not None
    assert wait_until(lambda: env.broker.store.get_max_offset_in_queue(topic, 1) == 4)
    doc = http(env, "GET", f"/api/topic?topic={topic}").doc
    assert doc["route"]["brokers"] == {BROKER: {"0": env.broker_addr}}
    assert doc["perm"] == {BROKER: "RW"}
    offsets = {q["queueId"]: (q["minOffset"], q["maxOffset"]) for q in doc["queues"]}
    assert offsets == {0: (0, 0), 1: (0, 4), 2: (0, 0)}

    r = http(env, "POST", "/api/topic/perm", {"topic": topic, "perm": 4})
    assert r.status == 200 and r.doc["brokers"] == [BROKER]
    assert env.broker.topics.select(topic).perm == 4
    assert env.broker.topics.select(topic).read_queue_nums == 3  # queue counts kept
    assert wait_until(
        lambda: http(env, "GET", f"/api/topic?topic={topic}").doc["perm"] == {BROKER: "R"}
    )

    r = http(env, "POST", "/api/topic/delete", {"topic": topic})
    assert r.status == 200 and r.doc == {"topic": topic, "brokers": [BROKER]}
    assert env.broker.topics.select(topic) is None
    gone = http(env, "GET", f"/api/topic?topic={topic}")
    assert gone.status == 404 and topic in gone.doc["error"]


# ---- groups ---------------------------------------------------------------------------------


def test_group_lag_and_reset_offset_by_time(env: ConsoleEnv) -> None:
    topic, group = "ConsoleLagTopic", "ConsoleLagGroup"
    created(env, topic, queues=1)
    mq = MessageQueue(topic, BROKER, 0)
    with Producer(env.namesrv) as p:
        for i in range(3):
            p.send(topic, b"early%d" % i, queue=mq)
        time.sleep(0.05)
        middle = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(2):
            p.send(topic, b"late%d" % i, queue=mq)
    wait_dispatched(env.broker.store)  # a send to a new queue is answered before dispatch
    with PullConsumer(env.namesrv, group) as c:
        assert len(c.pull(mq, 0, 32).messages) == 5  # the broker makes the group
        c.commit_offset(mq, 5)
    kinds = {g["group"]: g["kind"] for g in http(env, "GET", "/api/groups").doc["groups"]}
    assert kinds[group] == "normal" and kinds["TOOLS_CONSUMER"] == "system"
    doc = http(env, "GET", f"/api/group?group={group}").doc
    assert doc["totalLag"] == 0 and doc["members"] == []
    [q] = doc["queues"]
    assert (q["topic"], q["brokerOffset"], q["consumerOffset"], q["lag"]) == (topic, 5, 5, 0)
    assert doc["reset"]["supported"] is True

    r = http(env, "POST", "/api/group/reset", {"group": group, "topic": topic, "timestamp": middle})
    assert r.status == 200, r.body
    # the store's answer for that time (RocketMQ's: the last early message or the first late)
    assert env.broker is not None
    searched = env.broker.store.get_offset_in_queue_by_time(topic, 0, middle)
    assert searched in (2, 3)
    assert r.doc["queues"] == [{"brokerName": BROKER, "queueId": 0, "old": 5, "new": searched}]
    doc = http(env, "GET", f"/api/group?group={group}&topic={topic}").doc
    assert doc["totalLag"] == 5 - searched and doc["queues"][0]["consumerOffset"] == searched

    r = http(env, "POST", "/api/group/reset", {"group": group, "topic": topic, "timestamp": 0})
    assert r.doc["queues"][0]["new"] == 0
    assert http(env, "GET", f"/api/group?group={group}").doc["totalLag"] == 5


def test_group_members_are_the_consumers_online(env: ConsoleEnv) -> None:
    topic, group = "ConsoleMemberTopic", "ConsoleMemberGroup"
    created(env, topic, queues=1)
    heartbeat = {
        "clientID": "10.0.0.9@console-test",
        "consumerDataSet": [
            {
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "consumeType": "CONSUME_PASSIVELY",
                "groupName": group,
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "codeSet": [],
                        "expressionType": "TAG",
                        "subString": "*",
                        "subVersion": 1,
                        "tagsSet": [],
                        "topic": topic,
                    }
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [],
    }
    with RemotingClient(timeout=5) as client:  # its connection is the member's channel
        r = client.invoke(
            env.broker_addr, RemotingCommand.request(34, {}, json.dumps(heartbeat).encode())
        )
        assert r.code == 0, r.remark
        doc = http(env, "GET", f"/api/group?group={group}").doc
        assert doc["members"] == ["10.0.0.9@console-test"]
        assert doc["membersByBroker"] == {BROKER: ["10.0.0.9@console-test"]}
    assert wait_until(lambda: http(env, "GET", f"/api/group?group={group}").doc["members"] == [])


# ---- messages -------------------------------------------------------------------------------


def test_messages_by_time_key_and_either_id(env: ConsoleEnv) -> None:
    topic = "ConsoleMsgTopic"
    created(env, topic)
    begin = int(time.time() * 1000) - 1000
    with Producer(env.namesrv) as p:
        sent = p.send(topic, "héllo console".encode(), keys="order-17", tags="TagA")
        binary = p.send(topic, b"\x00\xff\x10", keys="bin-1")
    assert env.broker is not None
    assert wait_until(
        lambda: env.broker is not None and env.broker.store.dispatch_behind_bytes() == 0
    )

    by_time = http(env, "GET", f"/api/messages/time?topic={topic}&begin={begin}").doc
    assert {m["msgId"] for m in by_time["messages"]} == {sent.msg_id, binary.msg_id}
    assert by_time["truncated"] is False

    found = http(env, "GET", f"/api/messages/key?topic={topic}&key=order-17").doc["messages"]
    [m] = found
    assert (m["msgId"], m["offsetMsgId"], m["tags"], m["keys"]) == (
        sent.msg_id,
        sent.offset_msg_id,
        "TagA",
        ["order-17"],
    )
    assert m["bodyText"] == "héllo console" and m["bodyHex"] is None

    [b] = http(env, "GET", f"/api/messages/key?topic={topic}&key=bin-1").doc["messages"]
    assert b["bodyText"] is None and b["bodyHex"] == "00ff10"

    by_offset_id = http(env, "GET", f"/api/messages/id?id={sent.offset_msg_id}").doc
    assert by_offset_id["messages"][0]["msgId"] == sent.msg_id
    assert "CONSUME_MESSAGE_DIRECTLY" in by_offset_id["resend"]
    by_uniq = http(env, "GET", f"/api/messages/id?id={sent.msg_id}&topic={topic}").doc
    assert by_uniq["messages"][0]["offsetMsgId"] == sent.offset_msg_id
    no_topic = http(env, "GET", f"/api/messages/id?id={sent.msg_id}")
    assert no_topic.status == 400 and "give the topic" in no_topic.doc["error"]
    none = http(env, "GET", f"/api/messages/key?topic={topic}&key=nope").doc
    assert none["messages"] == []


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        ("GET", "/api/topic", None, 400, "give the topic parameter"),
        ("GET", "/api/topic?topic=bad%20name", None, 400, "topic"),
        ("GET", "/api/topic?topic=NoSuchConsoleTopic", None, 404, "NoSuchConsoleTopic"),
        ("GET", "/api/group", None, 400, "give the group parameter"),
        ("GET", "/api/nothing", None, 404, "no API /api/nothing"),
        ("DELETE", "/api/topics", None, 405, "DELETE is not served"),
        ("POST", "/api/topic/create", {"topic": ""}, 400, "topic"),
        ("POST", "/api/topic/create", {"topic": "T1", "readQueueNums": 0}, 400, "readQueueNums"),
        ("POST", "/api/topic/create", {"topic": "T1", "perm": 7}, 400, "perm must be"),
        ("POST", "/api/topic/create", {"topic": "T1", "brokers": ["nob"]}, 400, "no master"),
        ("POST", "/api/group/reset", {"group": "G", "topic": "T", "timestamp": "x"}, 400, "ms"),
        ("GET", "/api/messages/time?topic=T&begin=abc", None, 400, "milliseconds"),
        ("GET", "/api/messages/time?topic=T&begin=9&end=1", None, 400, "begin is after end"),
        ("GET", "/api/messages/id?id=", None, 400, "give the id parameter"),
        ("GET", "/api/trace?id=", None, 400, "give the id parameter"),
        ("GET", "/api/trace?id=" + "A" * 129, None, 400, "give a message id"),
        ("GET", "/api/trace?id=X&traceTopic=bad%20topic", None, 400, "topic"),
        ("GET", "/api/broker/config", None, 400, "give the broker parameter"),
        ("GET", "/api/broker/runtime?broker=10.9.9.9:10911", None, 400, "not a broker"),
        ("GET", "/api/producers?topic=T", None, 400, "give the group parameter"),
        ("GET", "/api/producers?topic=T&group=bad%20group", None, 400, "group"),
        ("POST", "/api/topic/send", {"topic": "bad topic", "body": "x"}, 400, "topic"),
        ("POST", "/api/topic/send", {"topic": "T", "body": 5}, 400, "body must be text"),
        ("POST", "/api/topic/send", {"topic": "T", "body": "x" * 16385}, 400, "longer than"),
        ("POST", "/api/topic/send", {"topic": "T", "tags": ["x"], "body": "x"}, 400, "tags"),
    ],
)
def test_bad_requests_get_a_4xx_json_error(
    env: ConsoleEnv, method: str, path: str, body: object, status: int, error: str
) -> None:
    r = http(env, method, path, body)
    assert r.status == status, r.body
    assert r.headers["Content-Type"] == "application/json"
    msg = r.doc["error"]
    assert error in msg or (error == "ms" and "milliseconds" in msg), msg


def test_malformed_and_oversized_requests(env: ConsoleEnv) -> None:
    host = f"Host: 127.0.0.1:{env.console.http.port}\r\n" if env.console else ""
    no_header = http(env, "POST", "/api/topic/create", raw=b"{}", headers={"X-Other": "1"})
    assert no_header.status == 403 and "X-Console" in no_header.doc["error"]
    not_json = http(
        env,
        "POST",
        "/api/topic/create",
        raw=b"{not json",
        headers={"Content-Type": "application/json", "X-Console": "1"},
    )
    assert not_json.status == 400 and "not JSON" in not_json.doc["error"]
    form = http(env, "POST", "/api/topic/create", raw=b"topic=T", headers={"X-Console": "1"})
    assert form.status == 415
    big = http(
        env,
        "POST",
        "/api/topic/create",
        raw=b"x" * (64 * 1024 + 1),
        headers={"Content-Type": "application/json", "X-Console": "1"},
    )
    assert big.status == 413
    rebound = http(env, "GET", "/api/cluster", headers={"Host": "evil.example:80"})
    assert rebound.status == 421

    assert raw_exchange(env, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    huge_head = b"GET / HTTP/1.1\r\n" + host.encode() + b"X: " + b"a" * 20000 + b"\r\n\r\n"
    assert raw_exchange(env, huge_head).startswith(b"HTTP/1.1 431 ")
    chunked = (
        b"POST /api/topic/create HTTP/1.1\r\n"
        + host.encode()
        + b"Transfer-Encoding: chunked\r\n\r\n"
    )
    assert raw_exchange(env, chunked).startswith(b"HTTP/1.1 411 ")
    short = b"POST /api/login HTTP/1.1\r\n" + host.encode() + b"Content-Length: 10\r\n\r\n{}"
    reply = raw_exchange(env, short)
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"].startswith("the body is shorter")
    # still serving
    assert http(env, "GET", "/api/session").status == 200


# ---- ACL ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    with opened(tmp_path_factory.mktemp("console-acl"), acl=True) as e:
        yield e


def sign_in(env: ConsoleEnv, ak: str, sk: str) -> str:
    r = http(env, "POST", "/api/login", {"accessKey": ak, "secretKey": sk})
    assert r.status == 200 and r.doc == {"user": ak}
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert sk not in cookie and sk.encode() not in r.body
    return cookie.split(";")[0]


def test_acl_console_asks_for_an_account(acl_env: ConsoleEnv) -> None:
    doc = http(acl_env, "GET", "/api/session").doc
    assert doc["login"] is True and doc["user"] is None
    for path in ("/api/cluster", "/api/topics", "/api/groups"):
        r = http(acl_env, "GET", path)
        assert r.status == 401 and "sign in" in r.doc["error"]
    r = http(acl_env, "POST", "/api/topic/create", {"topic": "AclT"})
    assert r.status == 401
    assert http(acl_env, "POST", "/api/login", {"accessKey": "x"}).status == 400
    forged = http(acl_env, "GET", "/api/cluster", cookie="rocketstore_console=forged")
    assert forged.status == 401


def test_acl_only_an_admin_account_changes_things(acl_env: ConsoleEnv) -> None:
    user = sign_in(acl_env, "console-user", "user-secret-1")
    assert http(acl_env, "GET", "/api/session", cookie=user).doc["user"] == "console-user"
    assert http(acl_env, "GET", "/api/cluster", cookie=user).doc["brokers"][0]["version"]
    refused = http(acl_env, "POST", "/api/topic/create", {"topic": "AclTopic"}, cookie=user)
    assert refused.status == 403, refused.body
    assert refused.doc["error"].startswith("the broker refused: ")
    assert "AclException" in refused.doc["error"]
    assert acl_env.broker is not None and acl_env.broker.topics.select("AclTopic") is None

    admin = sign_in(acl_env, "console-admin", "admin-secret-1")
    made = http(acl_env, "POST", "/api/topic/create", {"topic": "AclTopic"}, cookie=admin)
    assert made.status == 200, made.body
    assert acl_env.broker.topics.select("AclTopic") is not None

    for ak, sk in (("console-admin", "not-the-secret"), ("nobody", "whatever-1")):
        wrong = http(acl_env, "POST", "/api/login", {"accessKey": ak, "secretKey": sk})
        assert wrong.status == 401, wrong.body
        assert wrong.doc["error"].startswith("the brokers refused this account: ")
        assert "Set-Cookie" not in wrong.headers

    out = http(acl_env, "POST", "/api/logout", {}, cookie=user)
    assert out.status == 200 and "Max-Age=0" in out.headers["Set-Cookie"]
    assert http(acl_env, "GET", "/api/cluster", cookie=user).status == 401
    assert http(acl_env, "GET", "/api/cluster", cookie=admin).status == 200


# ---- the command ----------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_console_command_serves_until_stopped(env: ConsoleEnv, stop: signal.Signals) -> None:
    """Until SIGINT (Ctrl-C) or SIGTERM (a supervisor's stop), then a clean exit: also when
    its parent ignores SIGINT, as pytest-xdist's workers do (the child inherits that)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rocketstore.cli",
            "console",
            "-n",
            env.namesrv,
            "--listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # started with SIGINT ignored, as a child of an xdist worker is
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("rocketstore console on http://127.0.0.1:"), line
        url = line.split()[3]
        with urllib.request.urlopen(url + "api/cluster", timeout=20) as r:
            assert json.loads(r.read())["brokers"][0]["brokerName"] == BROKER
    finally:
        proc.send_signal(stop)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_console_command_errors_are_one_line(env: ConsoleEnv) -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "console", "--listen", "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "not a host:port address" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert env.console is not None
    taken = f"127.0.0.1:{env.console.http.port}"
    busy = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "console", "-n", env.namesrv, "--listen", taken],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert busy.returncode == 1, busy.stderr
    assert busy.stderr.startswith(f"error: cannot listen on {taken}")
    assert "another address (--listen)" in busy.stderr  # what to do
    assert len(busy.stderr.strip().splitlines()) == 1


def test_acl_sessions_end_after_an_idle_time(acl_env: ConsoleEnv) -> None:
    console = acl_env.console
    assert console is not None
    now = [1000.0]
    real_clock = console.clock
    console.clock = lambda: now[0]
    try:
        cookie = sign_in(acl_env, "console-user", "user-secret-1")
        now[0] += SESSION_IDLE_S - 1
        assert http(acl_env, "GET", "/api/topics", cookie=cookie).status == 200
        now[0] += SESSION_IDLE_S - 1  # used just now: still on
        assert http(acl_env, "GET", "/api/topics", cookie=cookie).status == 200
        now[0] += SESSION_IDLE_S + 1
        assert http(acl_env, "GET", "/api/topics", cookie=cookie).status == 401
        token = cookie.split("=", 1)[1]
        assert token not in console.sessions
    finally:
        console.clock = real_clock


def test_a_failing_request_is_a_500_and_the_server_goes_on(
    env: ConsoleEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert env.admin is not None

    def broken() -> list[str]:
        raise RuntimeError("boom")

    monkeypatch.setattr(env.admin, "topic_list", broken)
    r = http(env, "GET", "/api/topics")
    assert r.status == 500 and r.doc == {"error": "internal error: RuntimeError"}
    monkeypatch.undo()
    assert http(env, "GET", "/api/topics").status == 200


def test_connections_over_the_limit_are_answered_503() -> None:
    """Over the limit, a new connection is answered 503 when every connection has sent its
    request (one still sending it gives its place away: tests/test_console_floods.py)."""

    async def scenario() -> list[bytes]:
        release = asyncio.Event()
        started = 0

        async def slow(request: Request) -> Response:
            nonlocal started
            started += 1
            await release.wait()
            return Response.of_json({"ok": True})

        server = HttpServer(slow, "127.0.0.1", 0, max_connections=2)
        await server.start()
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        try:
            for _, w in held:
                w.write(b"GET / HTTP/1.1\r\n\r\n")
            for _ in range(1000):  # both requests read and in their handler
                if started == 2:
                    break
                await asyncio.sleep(0.01)
            assert started == 2
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            busy = await asyncio.wait_for(reader.read(), 5)  # answered before it asks
            writer.close()
            release.set()  # room again
            for r, _ in held:
                await asyncio.wait_for(r.read(), 5)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            served = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            return [busy, served]
        finally:
            release.set()
            for _, w in held:
                w.close()
            await server.close()

    busy, served = asyncio.run(scenario())
    assert busy.startswith(b"HTTP/1.1 503 ") and b"too many connections" in busy
    assert served.startswith(b"HTTP/1.1 200 ")


SERVE_ACL = """\
accounts:
  - accessKey: consoleAdmin
    secretKey: consoleSecret
    admin: true
"""


def _login(address: str, ak: str, sk: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        f"http://{address}/api/login",
        data=json.dumps({"accessKey": ak, "secretKey": sk}).encode(),
        headers={"Content-Type": "application/json", "X-Console": "1"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serve_with_acl_refuses_a_wrong_secret_at_sign_in(tmp_path: Path) -> None:
    """In `serve` with ACL the name server checks signatures too: its refusal of the account's
    cluster query is told on the form, not taken for a broker that did not answer."""
    from support.processes import read_until

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(SERVE_ACL)
    args = ["serve", "--store", str(tmp_path / "store"), "--namesrv-listen", "127.0.0.1:0"]
    args += ["--listen", "127.0.0.1:0", "--grpc-listen", "", "--metrics-listen", ""]
    args += ["--console-listen", "127.0.0.1:0", "--acl-file", str(acl)]
    with (tmp_path / "serve.err").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", *args],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            lines = read_until(proc, r"^console on http://")
            address = lines[-1].removeprefix("console on http://").rstrip("/")
            for ak, sk in (("consoleAdmin", "not-the-secret"), ("nobodyHere", "whatever-1")):
                status, doc = _login(address, ak, sk)
                assert status == 401, doc
                assert str(doc["error"]).startswith("the brokers refused this account: "), doc
            status, doc = _login(address, "consoleAdmin", "consoleSecret")
            assert status == 200 and doc == {"user": "consoleAdmin"}, doc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
