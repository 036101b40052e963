"""The systemd units docs/operations.md gives (a broker a broker.conf, the name server, the
controller, `serve`) are units systemd accepts: each is taken from the page as written, its
ExecStart pointed at this installation's `rocketstore`, its configuration files made, and
checked with `systemd-analyze verify`. The command lines they run are ones `rocketstore`
parses."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketstore.cli import main

DOC = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
INSTALLED = "/opt/rocketstore/.venv/bin/rocketstore"


def units() -> dict[str, str]:
    """file name → text of every ```ini block of the page whose first line names a unit."""
    found = {}
    for block in re.findall(r"```ini\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        name = re.match(r"# /etc/systemd/system/(\S+\.service)", block)
        assert name, block.splitlines()[0]
        found[name.group(1).rstrip(":")] = block
    return found


def test_the_page_gives_a_unit_for_every_server() -> None:
    names = set(units())
    assert names == {
        "rocketstore-broker@.service",
        "rocketstore-namesrv.service",
        "rocketstore-controller.service",
        "rocketstore.service",
    }
    for text in units().values():
        assert "KillSignal=SIGTERM" in text and f"ExecStart={INSTALLED} " in text


def test_their_command_lines_parse() -> None:
    """Each ExecStart's arguments, given to `rocketstore ... --help`, are options it knows."""
    for text in units().values():
        line = re.search(r"^ExecStart=(.*)$", text, re.M)
        assert line is not None
        args = line.group(1).split()[1:]
        command = args[0]
        options = [a for a in args[1:] if a.startswith("-")]
        help_text = CliRunner().invoke(main, [command, "--help"]).output
        for option in options:
            assert option in help_text, (command, option)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_them(tmp_path: Path) -> None:
    rocketstore = shutil.which("rocketstore") or str(Path(sys.executable).parent / "rocketstore")
    if not Path(rocketstore).exists():
        pytest.skip("the rocketstore command is not installed beside this Python")
    paths = []
    for name, text in units().items():
        unit = tmp_path / name
        unit.write_text(text.replace(INSTALLED, rocketstore), encoding="utf-8")
        paths.append(unit)
    # an instance of the template, as `systemctl enable rocketstore-broker@b1` makes it
    template = tmp_path / "rocketstore-broker@.service"
    instance = tmp_path / "rocketstore-broker@b1.service"
    instance.write_text(template.read_text(encoding="utf-8"), encoding="utf-8")
    paths = [p for p in paths if p != template] + [instance]
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    # systemd names problems of the unit files as "<file>:<line>: ..." lines (an unknown key,
    # a value it cannot parse), and says so on an exit status other than 0
    problems = [line for line in done.stderr.splitlines() if any(p.name in line for p in paths)]
    assert done.returncode == 0 and not problems, done.stderr
