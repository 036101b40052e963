"""The console end to end in headless Chromium (Debian's /usr/bin/chromium, driven by the
playwright package): create a topic, find a message sent by the project's producer by its
key, reset a group's offset by time, the throughput charts, and an ACL sign-in whose
non-admin account's change the broker refuses. Screenshots go to $ROCKETSTORE_TEST_ARTIFACTS
(or the test's tmp_path)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.client._trace import TraceContext
from support.console_env import BROKER, ConsoleEnv, producer_online, write_traces
from support.waits import wait_until

CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is missing (pip install playwright)"
)

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000
DOCS_SHOTS = os.environ.get("ROCKETSTORE_DOCS_SCREENSHOTS")  # docs/: refresh the docs' pictures


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def artifacts(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    root = os.environ.get("ROCKETSTORE_TEST_ARTIFACTS")
    out = Path(root) / "console" / request.node.name if root else tmp_path / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield pg
    finally:
        context.close()
    assert not errors, errors


def test_console_in_a_browser(tmp_path: Path, page: Any, artifacts: Path) -> None:
    env = ConsoleEnv(tmp_path / "cluster")
    try:
        env.open()
        _walk_through(env, page, artifacts)
    finally:
        env.close()


def _walk_through(env: ConsoleEnv, page: Any, shots: Path) -> None:
    expect = sync_api.expect
    page.goto(env.url + "/")
    # cluster
    expect(page.locator("main table")).to_contain_text(env.broker_addr)
    expect(page.locator("main table")).to_contain_text("V4_9_8")
    page.screenshot(path=str(shots / "1-cluster.png"))

    # topics: create one
    topic = "BrowserTopic"
    page.click("#tabs a[data-view=topics]")
    page.fill("#create-topic input[name=topic]", topic)
    page.fill("#create-topic input[name=readQueueNums]", "2")
    page.fill("#create-topic input[name=writeQueueNums]", "2")
    page.click("#create-topic button[type=submit]")
    expect(page.locator("#notice")).to_have_text(f"Topic {topic} created on {BROKER}")
    expect(page.locator("#topic-detail h2")).to_have_text(f"Topic {topic}")
    assert env.broker is not None and env.broker.topics.select(topic) is not None
    page.screenshot(path=str(shots / "2-topic-created.png"))

    # a message through the project's producer, found by its key
    assert wait_until(lambda: env.ns is not None and env.ns.routes.route(topic) is not None)
    with Producer(env.namesrv) as producer:
        sent = producer.send(topic, b'{"order": 17, "state": "paid"}', keys="order-17")
    assert wait_until(
        lambda: env.broker is not None and env.broker.store.dispatch_behind_bytes() == 0
    )
    page.click("#tabs a[data-view=messages]")
    page.fill("#by-key input[name=topic]", topic)
    page.fill("#by-key input[name=key]", "order-17")
    page.click("#by-key button[type=submit]")
    results = page.locator("#message-results")
    expect(results).to_contain_text("1 message(s)")
    expect(results).to_contain_text(sent.msg_id)
    expect(results.locator("pre.body")).to_have_text('{"order": 17, "state": "paid"}')
    expect(page.locator("#resend-note")).to_contain_text("CONSUME_MESSAGE_DIRECTLY")
    page.screenshot(path=str(shots / "3-message-by-key.png"), full_page=True)
    if DOCS_SHOTS:
        page.screenshot(path=str(Path(DOCS_SHOTS) / "console-messages.png"))

    # a group that consumed everything, reset to the start
    group = "BrowserGroup"
    mq = MessageQueue(topic, sent.queue.broker_name, sent.queue.queue_id)
    with PullConsumer(env.namesrv, group) as consumer:
        consumer.pull(mq, 0, 32)
        consumer.commit_offset(mq, 1)
    page.click("#tabs a[data-view=groups]")
    page.click(f"tr[data-group={group}]")
    detail = page.locator("#group-detail")
    expect(detail).to_contain_text("total lag 0")
    page.fill("#reset-offset input[name=time]", "2001-01-01T00:00:00")
    page.click("#reset-offset button[type=submit]")
    expect(page.locator("#notice")).to_contain_text(f"Offsets of {group} on {topic} reset")
    expect(detail).to_contain_text("total lag 1")
    assert env.broker is not None
    assert env.broker.offsets.query_offset(group, topic, mq.queue_id) == 0
    page.screenshot(path=str(shots / "4-group-reset.png"), full_page=True)

    # live throughput: two polls draw the lines
    page.click("#tabs a[data-view=charts]")
    expect(page.locator("svg.chart")).to_have_count(2)
    expect(page.locator("svg.chart path").first).to_have_attribute("d", _two_points())
    page.screenshot(path=str(shots / "5-throughput.png"))


def _two_points() -> Any:
    import re

    return re.compile(r"^M[\d.]+ [\d.]+ L")


def test_acl_sign_in_and_a_refused_change(tmp_path: Path, page: Any, artifacts: Path) -> None:
    expect = sync_api.expect
    env = ConsoleEnv(tmp_path / "cluster", acl=True)
    try:
        env.open()
        page.goto(env.url + "/")
        login = page.locator("#login")
        expect(login).to_be_visible()
        page.fill("#login input[name=accessKey]", "console-user")
        page.fill("#login input[name=secretKey]", "wrong-secret")
        page.click("#login button[type=submit]")
        expect(page.locator("#login-error")).to_be_visible()
        expect(page.locator("#login-error")).to_contain_text("the brokers refused this account")
        page.screenshot(path=str(artifacts / "acl-sign-in-refused.png"))
        expect(login).to_be_visible()
        page.fill("#login input[name=accessKey]", "console-user")
        page.fill("#login input[name=secretKey]", "user-secret-1")
        page.click("#login button[type=submit]")
        expect(login).to_be_hidden()
        expect(page.locator("#user")).to_contain_text("signed in as console-user")
        # the secret is nowhere in the page or a cookie a script can read
        assert "user-secret-1" not in page.content()
        assert page.evaluate("document.cookie") == ""
        expect(page.locator("main table")).to_contain_text(env.broker_addr)
        page.click("#tabs a[data-view=topics]")
        page.fill("#create-topic input[name=topic]", "RefusedTopic")
        page.click("#create-topic button[type=submit]")
        expect(page.locator("#notice")).to_contain_text("the broker refused")
        page.screenshot(path=str(artifacts / "acl-refused.png"))
        assert env.broker is not None and env.broker.topics.select("RefusedTopic") is None
        page.click("#logout")
        expect(login).to_be_visible()
    finally:
        env.close()


# ---- beside RocketMQ Dashboard: lists, the URL, brokers, producers, a test message, traces -----


def shot(page: Any, artifacts: Path, name: str, *, docs: bool = False) -> None:
    """A screenshot in the artifacts; with ROCKETSTORE_DOCS_SCREENSHOTS=<dir>, those the docs
    show go there too, as console-<name>.png."""
    page.screenshot(path=str(artifacts / f"{name}.png"))
    if docs and DOCS_SHOTS:
        page.screenshot(path=str(Path(DOCS_SHOTS) / f"console-{name}.png"))


def _lagging_groups(env: ConsoleEnv, topic: str) -> None:
    """Two groups on ``topic`` (10 messages over 2 queues): one consumed all, one committed
    one message of one queue."""
    assert env.broker is not None
    with Producer(env.namesrv) as p:
        for i in range(10):
            p.send(topic, b"m%d" % i)
    assert wait_until(
        lambda: env.broker is not None and env.broker.store.dispatch_behind_bytes() == 0
    )
    queues = [MessageQueue(topic, BROKER, q) for q in (0, 1)]
    with PullConsumer(env.namesrv, "GroupDone") as c:  # a pull makes the subscription group
        for mq in queues:
            c.pull(mq, 0, 1)
            c.commit_offset(mq, env.broker.store.get_max_offset_in_queue(topic, mq.queue_id))
    with PullConsumer(env.namesrv, "GroupHalf") as c:
        c.pull(queues[0], 0, 1)
        c.commit_offset(queues[0], 1)


def test_lists_sort_and_the_url_keeps_what_is_shown(
    tmp_path: Path, page: Any, artifacts: Path
) -> None:
    expect = sync_api.expect
    env = ConsoleEnv(tmp_path / "cluster")
    try:
        env.open()
        topic = "ListedTopic"
        assert env.admin is not None
        env.admin.create_topic(env.broker_addr, topic, read_queue_nums=2, write_queue_nums=2)
        assert wait_until(lambda: env.ns is not None and env.ns.routes.route(topic) is not None)
        _lagging_groups(env, topic)
        with PullConsumer(env.namesrv, "GroupOnline") as online:
            online.commit_offset(MessageQueue(topic, BROKER, 0), 0)
            online.join_group({topic: "*"})
            page.goto(env.url + "/#groups")
            rows = page.locator("#group-list tbody tr")
            expect(rows).to_have_count(3)
            # consumers online, type, lag: the group that never consumed lags 10
            expect(page.locator("tr[data-group=GroupOnline]")).to_contain_text("PULL")
            expect(page.locator("tr[data-group=GroupOnline] td").nth(1)).to_have_text("1")
            expect(page.locator("tr[data-group=GroupOnline] td").nth(5)).to_have_text("10")
            expect(page.locator("tr[data-group=GroupHalf] td").nth(5)).to_have_text("9")
            expect(page.locator("tr[data-group=GroupDone] td").nth(5)).to_have_text("0")
            # sorted by lag, most first: the order is in the URL
            page.click("#group-list th[data-sort=totalLag]")
            page.click("#group-list th[data-sort=totalLag]")
            expect(rows.first).to_have_attribute("data-group", "GroupOnline")
            expect(rows.last).to_have_attribute("data-group", "GroupDone")
            assert "sort=totalLag" in page.url and "desc=1" in page.url
            shot(page, artifacts, "groups", docs=True)
            page.click("tr[data-group=GroupHalf]")
            expect(page.locator("#group-detail h2")).to_have_text("Group GroupHalf")
            assert page.url.endswith("#groups?sort=totalLag&desc=1&group=GroupHalf")
            # a reload and a shared link open the same page, order and group
            page.reload()
            expect(page.locator("#group-detail h2")).to_have_text("Group GroupHalf")
            expect(rows.first).to_have_attribute("data-group", "GroupOnline")
            shared = page.context.new_page()
            shared.goto(page.url)
            expect(shared.locator("#group-detail")).to_contain_text("total lag 9")
            shared.close()
            page.go_back()
            expect(page.locator("#group-detail")).to_have_count(1)
            expect(page.locator("#group-detail h2")).to_have_count(0)

        # topics: queues, messages and put TPS; the selected topic in the URL
        page.click("#tabs a[data-view=topics]")
        row = page.locator(f"tr[data-topic={topic}]")
        expect(row.locator("td").nth(3)).to_have_text("2")  # write queues
        expect(row.locator("td").nth(5)).to_have_text("10")  # messages
        assert float(row.locator("td").nth(6).inner_text()) > 0  # put TPS
        row.click()
        expect(page.locator("#topic-detail h2")).to_have_text(f"Topic {topic}")
        assert page.url.endswith(f"#topics?topic={topic}")
        shot(page, artifacts, "topics", docs=True)
        page.reload()
        expect(page.locator("#topic-detail h2")).to_have_text(f"Topic {topic}")
    finally:
        env.close()


def test_a_broker_without_a_slave_shows_no_replication_lag(
    tmp_path: Path, page: Any, artifacts: Path
) -> None:
    expect = sync_api.expect
    env = ConsoleEnv(tmp_path / "cluster")
    try:
        env.open()
        with Producer(env.namesrv) as p:
            for i in range(3):
                p.send("LoneTopic", b"m%d" % i)
        assert env.broker is not None and env.broker.store.get_max_phy_offset() > 0
        page.goto(env.url + "/")
        row = page.locator(f"tr[data-broker='{env.broker_addr}']")
        expect(row.locator("td.ha-lag")).to_have_text("no slave")
        # the broker's configuration and runtime figures, by link, kept in the URL
        row.locator("a", has_text="Config").click()
        detail = page.locator("#broker-detail")
        expect(detail.locator("h2")).to_have_text(f"Configuration of {env.broker_addr}")
        page.fill("#broker-detail input[name=filter]", "TraceTopic")
        expect(detail.locator("tbody tr")).to_have_count(2)
        expect(detail).to_contain_text("RMQ_SYS_TRACE_TOPIC")
        shot(page, artifacts, "broker-config", docs=True)
        page.reload()
        expect(detail.locator("tbody tr")).to_have_count(2)  # the filter is in the URL too
        detail.locator("a", has_text="runtime figures").click()
        expect(detail.locator("h2")).to_have_text(f"Runtime figures of {env.broker_addr}")
        expect(detail).to_contain_text("brokerVersionDesc")
        expect(detail).not_to_contain_text("haNearestSlaveLagBytes")
    finally:
        env.close()


def test_a_master_and_its_slave_show_their_lag(tmp_path: Path, page: Any) -> None:
    expect = sync_api.expect
    env = ConsoleEnv(tmp_path / "cluster", slave=True)
    try:
        env.open()
        with Producer(env.namesrv) as p:
            p.send("HaTopic", b"replicated")
        assert env.broker is not None and env.slave is not None
        assert wait_until(
            lambda: (
                env.slave is not None
                and env.slave.store.get_max_phy_offset() == env.broker.store.get_max_phy_offset()
            ),
            20,
        )  # type: ignore[union-attr]
        page.goto(env.url + "/")
        lags = page.locator("td.ha-lag")
        expect(lags).to_have_count(2)
        for i in range(2):
            expect(lags.nth(i)).to_have_text("0", timeout=20_000)
    finally:
        env.close()


def test_producers_a_test_message_and_its_trace(tmp_path: Path, page: Any, artifacts: Path) -> None:
    expect = sync_api.expect
    env = ConsoleEnv(tmp_path / "cluster")
    try:
        env.open()
        topic = "TracedTopic"
        assert env.admin is not None
        env.admin.create_topic(env.broker_addr, topic, read_queue_nums=1, write_queue_nums=1)
        assert wait_until(lambda: env.ns is not None and env.ns.routes.route(topic) is not None)

        # a producer group's connections
        with producer_online(env, "OrderProducers", "10.1.2.3@orders"):
            page.goto(env.url + "/#producers")
            page.fill("#producer-form input[name=topic]", topic)
            page.fill("#producer-form input[name=group]", "OrderProducers")
            page.click("#producer-form button[type=submit]")
            expect(page.locator("#producer-results")).to_contain_text("10.1.2.3@orders")
            assert page.url.endswith(f"#producers?topic={topic}&group=OrderProducers")
            shot(page, artifacts, "producers", docs=True)

        # a test message from the topic's page
        page.goto(env.url + f"/#topics?topic={topic}")
        page.fill("#send-message input[name=tags]", "TagT")
        page.fill("#send-message input[name=keys]", "trace-me")
        page.fill("#send-message textarea[name=body]", "a test message")
        page.click("#send-message button[type=submit]")
        expect(page.locator("#notice")).to_contain_text("SEND_OK")
        result = page.locator("#send-result")
        expect(result).to_contain_text("SEND_OK")
        msg_id = result.locator("tbody td").nth(1).inner_text()
        offset_id = result.locator("tbody td").nth(2).inner_text()
        assert env.broker is not None
        assert wait_until(
            lambda: env.broker is not None and env.broker.store.dispatch_behind_bytes() == 0
        )
        [stored] = env.admin.query_message(topic, "trace-me")
        assert stored.properties["UNIQ_KEY"] == msg_id and bytes(stored.body) == b"a test message"

        # the trace clients with message trace on would write about it
        now = int(time.time() * 1000)
        write_traces(
            env,
            [
                TraceContext(
                    "Pub",
                    msg_id,
                    timestamp=now,
                    group="SELF_TEST_P_GROUP",
                    topic=topic,
                    tags="TagT",
                    keys="trace-me",
                    store_host=env.broker_addr,
                    body_length=14,
                    cost_time=4,
                    msg_type="Normal_Msg",
                    offset_msg_id=offset_id,
                ),
                TraceContext(
                    "SubBefore",
                    msg_id,
                    timestamp=now + 20,
                    group="TraceConsumers",
                    request_id="R1",
                    keys="trace-me",
                ),
                TraceContext(
                    "SubAfter",
                    msg_id,
                    timestamp=now + 20,
                    group="TraceConsumers",
                    request_id="R1",
                    cost_time=12,
                    keys="trace-me",
                ),
            ],
        )
        assert wait_until(
            lambda: env.broker is not None and env.broker.store.dispatch_behind_bytes() == 0
        )
        result.locator("a", has_text="Trace").click()
        assert page.url.endswith(f"#trace?id={msg_id}")
        trace = page.locator("#trace-results")
        expect(trace.locator("tr[data-type]")).to_have_count(3)
        pub = trace.locator("tr[data-type=Pub] td")
        expect(pub.nth(1)).to_have_text("SELF_TEST_P_GROUP")
        expect(pub.nth(2)).to_have_text("127.0.0.1")
        expect(pub.nth(4)).to_have_text("4")
        expect(pub.nth(5)).to_have_text("success")
        expect(trace.locator("tr[data-type=SubAfter] td").nth(4)).to_have_text("12")
        expect(trace.locator(".trace-group h3")).to_have_text("Consumer group TraceConsumers")
        shot(page, artifacts, "trace", docs=True)
        page.reload()
        expect(trace.locator("tr[data-type]")).to_have_count(3)
    finally:
        env.close()


def test_a_test_message_is_refused_without_pub(tmp_path: Path, page: Any, artifacts: Path) -> None:
    expect = sync_api.expect
    env = ConsoleEnv(tmp_path / "cluster", acl=True)
    try:
        env.open()
        page.goto(env.url + "/")
        page.fill("#login input[name=accessKey]", "console-admin")
        page.fill("#login input[name=secretKey]", "admin-secret-1")
        page.click("#login button[type=submit]")
        expect(page.locator("#login")).to_be_hidden()
        page.click("#tabs a[data-view=topics]")
        page.fill("#create-topic input[name=topic]", "GuardedTopic")
        page.click("#create-topic button[type=submit]")
        expect(page.locator("#topic-detail h2")).to_have_text("Topic GuardedTopic")
        page.click("#logout")
        page.fill("#login input[name=accessKey]", "console-reader")
        page.fill("#login input[name=secretKey]", "reader-secret-1")
        page.click("#login button[type=submit]")
        expect(page.locator("#login")).to_be_hidden()
        expect(page.locator("#topic-detail h2")).to_have_text("Topic GuardedTopic")
        page.fill("#send-message textarea[name=body]", "should not land")
        page.click("#send-message button[type=submit]")
        expect(page.locator("#notice")).to_contain_text("the broker refused")
        expect(page.locator("#notice")).to_contain_text("AclException")
        shot(page, artifacts, "send-refused")
        assert env.broker is not None
        assert env.broker.store.get_max_offset_in_queue("GuardedTopic", 0) == 0
    finally:
        env.close()
