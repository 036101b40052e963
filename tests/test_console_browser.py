"""The console end to end in headless Chromium (Debian's /usr/bin/chromium, driven by the
playwright package): create a topic, find a message sent by the project's producer by its
key, reset a group's offset by time, the throughput charts, and an ACL sign-in whose
non-admin account's change the broker refuses. Screenshots go to $ROCKETSTORE_TEST_ARTIFACTS
(or the test's tmp_path)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _console_env import BROKER, ConsoleEnv
from _waits import wait_until
from rocketstore.client import MessageQueue, Producer, PullConsumer

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
    page.click("#tabs button[data-view=topics]")
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
    page.click("#tabs button[data-view=messages]")
    page.fill("#by-key input[name=topic]", topic)
    page.fill("#by-key input[name=key]", "order-17")
    page.click("#by-key button[type=submit]")
    results = page.locator("#message-results")
    expect(results).to_contain_text("1 message(s)")
    expect(results).to_contain_text(sent.msg_id)
    expect(results.locator("pre.body")).to_have_text('{"order": 17, "state": "paid"}')
    expect(page.locator("#resend-note")).to_contain_text("CONSUME_MESSAGE_DIRECTLY")
    page.screenshot(path=str(shots / "3-message-by-key.png"), full_page=True)

    # a group that consumed everything, reset to the start
    group = "BrowserGroup"
    mq = MessageQueue(topic, sent.queue.broker_name, sent.queue.queue_id)
    with PullConsumer(env.namesrv, group) as consumer:
        consumer.pull(mq, 0, 32)
        consumer.commit_offset(mq, 1)
    page.click("#tabs button[data-view=groups]")
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
    page.click("#tabs button[data-view=charts]")
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
        page.click("#tabs button[data-view=topics]")
        page.fill("#create-topic input[name=topic]", "RefusedTopic")
        page.click("#create-topic button[type=submit]")
        expect(page.locator("#notice")).to_contain_text("the broker refused")
        page.screenshot(path=str(artifacts / "acl-refused.png"))
        assert env.broker is not None and env.broker.topics.select("RefusedTopic") is None
        page.click("#logout")
        expect(login).to_be_visible()
    finally:
        env.close()
