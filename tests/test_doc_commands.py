"""What README.md and docs/*.md tell a reader to type exists as written: every ``rocketstore``
command line names commands and options of the real command tree, every ``python
benchmarks/NAME.py`` command a script with those flags, every key a key table or a
configuration example names is a key of the configuration tables (docs/configuration.md), and
each configuration file a page shows as a code block loads."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from rocketstore.broker._config import BrokerConfig
from rocketstore.cli import main
from rocketstore.cli._config_reference import NAMESRV_KEYS, broker_keys, controller_keys
from rocketstore.controller._config import ControllerConfig
from rocketstore.protocol._properties import parse_properties
from rocketstore.store._config import StoreConfig

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _lines(page: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, inside a code block) of a page."""
    inside = False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            inside = not inside
            continue
        yield n, line, inside


def _commands(prefix: str) -> Iterator[tuple[str, str]]:
    """("page:line", command) for each command starting with ``prefix``: a code block's line
    (with its continuation lines) or a command in backticks in the text."""
    for page in PAGES:
        lines = list(_lines(page))
        for i, (n, line, inside) in enumerate(lines):
            where = f"{page.relative_to(ROOT)}:{n}"
            if inside:
                text = re.sub(r"^(sudo|time) ", "", line.strip())
                if not text.startswith(prefix):
                    continue
                j = i
                while text.endswith("\\") and j + 1 < len(lines):
                    j += 1
                    text = text[:-1] + " " + lines[j][1].strip()
                yield where, text.split(" #")[0]
            else:
                for m in re.finditer(r"`((?:sudo )?" + re.escape(prefix) + r"[^`]*)`", line):
                    yield where, m.group(1).removeprefix("sudo ")


def _options(cmd: click.Command) -> set[str]:
    found = {"-h", "--help"}
    for param in cmd.params:
        if isinstance(param, click.Option):
            found.update(param.opts, param.secondary_opts)
    return found


def _check_command(line: str) -> list[str]:
    """What of a ``rocketstore ...`` line the command tree does not have. A line may write
    alternatives (``status|sync-state``), optional parts (``[--json]``) and placeholders."""
    words = line.replace("\\|", "|").split()[1:]
    wrong: list[str] = []
    top = _options(main)
    while words and words[0].startswith("-"):  # rocketstore --access-key AK ... COMMAND
        option = words.pop(0).split("=")[0]
        if option not in top:
            return [f"no option {option} of rocketstore"]
        param = next(p for p in main.params if option in p.opts)
        if not getattr(param, "is_flag", False) and words:
            words.pop(0)
    commands: list[click.Command] = [main]
    path: list[str] = []
    while words and isinstance(commands[0], click.Group):
        word = words[0].strip("[]()")
        if not re.fullmatch(r"[a-z][\w|-]*", word):
            break  # an option, an argument or a placeholder such as <command> or ...
        group = commands[0]
        assert isinstance(group, click.Group)
        names = word.split("|")
        if not all(name in group.commands for name in names):
            if group.invoke_without_command:  # `controller` runs one, or takes a command
                break
            return [f"no command {' '.join([*path, word])}"]
        commands = [group.commands[name] for name in names]
        path.append(word)
        words.pop(0)
    for word in words:
        for piece in re.split(r"[\[\]()|]", word):
            if not re.match(r"--?[A-Za-z]", piece):
                continue
            option = piece.split("=")[0].rstrip(",.;:")
            wrong += [
                f"{' '.join(path)}: no option {option}"
                for cmd in commands
                if option not in _options(cmd) | top
                # one line may give the options of several alternatives (get|update [-k -v])
                and not any(option in _options(other) for other in commands)
            ]
    return wrong


def test_every_rocketstore_command_in_the_docs_exists() -> None:
    commands = list(_commands("rocketstore "))
    assert len(commands) > 100  # the pages were read
    wrong = [
        f"{where}: `{line}`: {problem}"
        for where, line in commands
        if not line.startswith("rocketstore <")  # `rocketstore <command>`
        for problem in _check_command(line)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_checker_finds_what_is_not_there() -> None:
    assert _check_command("rocketstore topic create -n H:P -t T") == []
    assert _check_command("rocketstore controller status|sync-state -a H:P [-b G]") == []
    assert _check_command("rocketstore --access-key AK --secret-key SK topic list") == []
    assert _check_command("rocketstore topic creat -t T") == ["no command topic creat"]
    assert _check_command("rocketstore topic create [--topics T]") == [
        "topic create: no option --topics"
    ]
    assert _check_command("rocketstore --key K topic list") == ["no option --key of rocketstore"]


def test_every_benchmark_command_in_the_docs_exists() -> None:
    wrong = []
    commands = [
        found
        for python in ("python", "python3", ".venv/bin/python")
        for found in _commands(f"{python} benchmarks/")
    ]
    assert commands
    for where, line in commands:
        script = ROOT / line.split()[1]
        if not script.is_file():
            wrong.append(f"{where}: no {script.relative_to(ROOT)}")
            continue
        source = script.read_text(encoding="utf-8")
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", " ".join(line.split()[2:])):
            if f'"{flag}"' not in source and f"'{flag}'" not in source:
                wrong.append(f"{where}: {script.name} takes no {flag}")
    assert not wrong, "\n".join(wrong)


KNOWN_KEYS = (
    {k.name for k in broker_keys()}
    | {k.name for k in controller_keys()}
    | {name for name, _ in NAMESRV_KEYS}
)


def test_every_key_the_docs_name_is_in_the_configuration_table() -> None:
    """The keys of each page's key tables (a table whose first heading names the key) and of its
    configuration examples (``key=value`` lines of a code block)."""
    wrong = []
    for page in PAGES:
        if page.name == "configuration.md":
            continue
        key_table = False
        for n, line, inside in _lines(page):
            where = f"{page.relative_to(ROOT)}:{n}"
            if inside:
                m = re.match(r"([a-z][A-Za-z0-9]*)=", line)
                if m and m.group(1) not in KNOWN_KEYS:
                    wrong.append(f"{where}: {m.group(1)}")
                continue
            if not line.startswith("|"):
                key_table = False
                continue
            if not key_table and re.fullmatch(r"[\w. ]*\bkey\b.*", line.split("|")[1].strip()):
                key_table = True  # a table whose first heading is its key: "key (broker.conf)"
                continue
            if key_table:
                first = line.split("|")[1]
                wrong += [
                    f"{where}: {key}"
                    for key in re.findall(r"`([a-z][A-Za-z0-9]*)(?:=[^`]*)?`", first)
                    if key not in KNOWN_KEYS
                ]
    assert not wrong, "keys not in the configuration tables:\n" + "\n".join(wrong)


def _conf_blocks() -> Iterator[tuple[str, str]]:
    """("page:line", text) of each configuration file a code block shows: a paragraph of a
    block (lines up to a blank one) of key=value lines and comments only."""
    for page in PAGES:
        block: list[str] = []
        start = 0
        for n, line, inside in _lines(page):
            if inside and line.strip():
                start = start or n
                block.append(line)
                continue
            body = [b for b in block if not b.lstrip().startswith("#")]
            if body and all(re.match(r"[a-z][A-Za-z0-9]*=", b) for b in body):
                yield f"{page.relative_to(ROOT)}:{start}", "\n".join(block) + "\n"
            block, start = [], 0


CONF_BLOCKS = list(_conf_blocks())


def test_the_pages_show_configuration_files() -> None:
    assert any("failover.md" in where for where, _ in CONF_BLOCKS)


@pytest.mark.parametrize(("where", "text"), CONF_BLOCKS, ids=[w for w, _ in CONF_BLOCKS])
def test_each_configuration_example_loads(where: str, text: str, tmp_path: Path) -> None:
    """As a broker.conf (the store's and the broker's settings) or, when it names a
    controller's keys, as a controller.conf."""
    values = parse_properties(text)
    controller_only = {k.name for k in controller_keys()} - {k.name for k in broker_keys()}
    if set(values) & controller_only:
        ControllerConfig.from_properties(values)
        return
    values["storePathRootDir"] = str(tmp_path / "store")
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()), encoding="utf-8")
    BrokerConfig.from_store_config(StoreConfig.from_broker_conf(conf))


def test_every_file_the_docs_name_exists() -> None:
    """Links, and paths of the repository's files (``tests/...py``, ``benchmarks/...``)."""
    wrong = []
    for page in PAGES:
        for n, line, _inside in _lines(page):
            names = [m.group(1) for m in re.finditer(r"\]\(([^)#:]+)(?:#[^)]*)?\)", line)]
            found = [(page.parent / name).resolve().relative_to(ROOT).as_posix() for name in names]
            found += re.findall(
                r"(?<![\w/.<])((?:tests|benchmarks|scripts|docs)/[\w./-]+\.(?:py|md|png))", line
            )
            wrong += [
                f"{page.relative_to(ROOT)}:{n}: {name}"
                for name in found
                if not (ROOT / name).exists()
            ]
    assert not wrong, "\n".join(wrong)
