"""RocketMQ 5.3's mqadmin user and ACL commands (createUser ... copyAcl) run the same sequence
against two ``rocketstore serve`` brokers with ACL 2.0 on and against two RocketMQ 5.3 brokers
with their authentication and authorisation on, each side signed by its Super user: every
command prints the same (addresses, and stack frames, set aside), refusals included.

Skipped without ``ROCKETMQ53_CLASSPATH`` (see tests/support/rocketmq5.py).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import rocketmq5 as r5
from support.interop import ServerProcess, servers
from support.rocketmq_java import Output

pytestmark = pytest.mark.skipif(r5.unavailable53() is not None, reason=str(r5.unavailable53()))

SUPER = ("rootUser", "rootPass1")
AUTH_CONF = {
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "initAuthenticationUser": json.dumps({"username": SUPER[0], "password": SUPER[1]}),
}


def commands(text: str) -> list[list[str]]:
    """One command a line, with A and B for the two brokers' addresses."""
    return [line.split() for line in text.strip().splitlines()]


SEQUENCE = commands(
    """
createUser -b A -u alice -p alicePass1
createUser -b A -u alice -p alicePass1
createUser -b A -u bob -p bobPass1 -t Super
createUser -b A -u carol -p carolPass1 -t Normal
getUser -b A -u alice
getUser -b A -u nobody
listUser -b A
listUser -b A -f ali
updateUser -b A -u carol -s disable
updateUser -b A -u carol -p carolPass2
updateUser -b A -u alice -t Super
updateUser -b A -u alice -t Normal
getUser -b A -u carol
updateUser -b A -u nobody -p nobodyPass1
createAcl -b A -s User:alice -r Topic:orders,Group:g1 -a Pub,Sub -d Allow
createAcl -b A -s User:alice -r Topic:orders-* -a Pub -i 10.0.0.0/8 -d Deny
createAcl -b A -s User:nobody -r Topic:t -a Pub -d Allow
createAcl -b A -s User:alice -r Topic:t -a Fly -d Allow
createAcl -b A -s User:carol -r * -a All -d Deny
getAcl -b A -s User:alice
updateAcl -b A -s User:alice -r Topic:orders -a Sub -d Deny
getAcl -b A -s User:alice
listAcl -b A
listAcl -b A -s ali -r orders
copyUser -f A -t B -u alice
copyAcl -f A -t B -s User:alice
listUser -b B
getAcl -b B -s User:alice
deleteAcl -b A -s User:alice -r Topic:orders
getAcl -b A -s User:alice
deleteAcl -b A -s User:alice
getAcl -b A -s User:alice
deleteUser -b A -u bob
deleteUser -b A -u nobody
listUser -b A
"""
)

# a Normal user's commands, and a wrong password's and an unknown user's
DAVES = commands(
    """
createUser -b A -u dave -p davePass1
createAcl -b A -s User:dave -r Topic:dave-* -a Pub -d Allow
"""
)
AS_DAVE = commands(
    """
listUser -b A
getUser -b A -u dave
createUser -b A -u eve -p evePass1
updateUser -b A -u dave -t Super
getAcl -b A -s User:dave
deleteUser -b A -u rootUser
"""
)
AS_STRANGER = commands("listUser -b A")

# stack frames, and the logging library's word about its bindings as a JVM starts
_NOISE = re.compile(r"^(\s+(at |\.\.\. \d+ more)|SLF4J: )")


def normalised(done: Output, a: str, b: str) -> str:
    """A command's output with the addresses named A and B, without the noise."""
    text = (done.out + done.err).replace(a, "A").replace(b, "B")
    return "\n".join(line.rstrip() for line in text.splitlines() if not _NOISE.match(line))


def run_sequence(
    runner_root: Path,
    brokers: tuple[str, str],
    sequence: list[list[str]],
    signer: tuple[str, str] = SUPER,
) -> list[str]:
    """What each command printed, signed by ``signer`` (name, password)."""
    a, b = brokers
    runner = r5.admin_runner53(runner_root, *signer)
    try:
        results = []
        for command in sequence:
            args = [{"A": a, "B": b}.get(word, word) for word in command]
            results.append(normalised(runner.admin(*args), a, b))
        return results
    finally:
        runner.close()


def differences(sequence: list[list[str]], ours: list[str], theirs: list[str]) -> str:
    report = []
    for command, mine, reference in zip(sequence, ours, theirs, strict=True):
        if mine != reference:
            diff = difflib.unified_diff(
                reference.splitlines(), mine.splitlines(), "rocketmq", "rocketstore", lineterm=""
            )
            report.append(" ".join(command) + "\n" + "\n".join(diff))
    return "\n\n".join(report)


@pytest.fixture(scope="module")
def rocketstore_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("acl2-rocketstore")
    conf = root / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in AUTH_CONF.items()))
    with servers() as started:
        for name in ("a", "b"):
            started.append(
                ServerProcess.serve(root / f"store-{name}", root / f"serve-{name}.log", conf=conf)
            )
        first, second = started
        assert first.broker is not None and second.broker is not None
        yield first.broker, second.broker


@pytest.fixture(scope="module")
def rocketmq_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("acl2-rocketmq53")
    procs: list[r5.JavaProcess] = []
    try:
        namesrv, ns_addr = r5.start_namesrv53(root)
        procs.append(namesrv)
        addresses = []
        for name in ("broker-a", "broker-b"):
            proc, address = r5.start_broker53(root, name, ns_addr, **AUTH_CONF)
            procs.append(proc)
            addresses.append(address)
        yield addresses[0], addresses[1]
    finally:
        for proc in reversed(procs):
            proc.kill()


def test_user_and_acl_commands_match_rocketmq(
    rocketstore_brokers: tuple[str, str],
    rocketmq_brokers: tuple[str, str],
    tmp_path: Path,
) -> None:
    ours = run_sequence(tmp_path / "runner-rocketstore", rocketstore_brokers, SEQUENCE)
    theirs = run_sequence(tmp_path / "runner-rocketmq", rocketmq_brokers, SEQUENCE)
    report = differences(SEQUENCE, ours, theirs)
    assert not report, report


def test_refusals_to_other_signers_match_rocketmq(
    rocketstore_brokers: tuple[str, str],
    rocketmq_brokers: tuple[str, str],
    tmp_path: Path,
) -> None:
    runs = [
        (DAVES, SUPER),
        (AS_DAVE, ("dave", "davePass1")),
        (AS_STRANGER, ("dave", "wrongPass1")),
        (AS_STRANGER, ("nobody", "nobodyPass1")),
    ]
    for i, (sequence, signer) in enumerate(runs):
        ours = run_sequence(tmp_path / f"ours-{i}", rocketstore_brokers, sequence, signer)
        theirs = run_sequence(tmp_path / f"theirs-{i}", rocketmq_brokers, sequence, signer)
        report = differences(sequence, ours, theirs)
        assert not report, f"signed by {signer[0]}:\n{report}"
