"""docs/configuration.md is `rocketstore config-keys`'s output, from the configuration tables
themselves: regenerate it (`rocketstore config-keys > docs/configuration.md`) when a key is
added; every key rocketstore acts on says what it does, and each is one the servers read."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rocketstore.broker._config import broker_conf_keys
from rocketstore.cli import main
from rocketstore.cli._config_reference import WHAT, broker_keys, controller_keys
from rocketstore.controller._config import ControllerConfig
from rocketstore.protocol._properties import parse_properties
from rocketstore.store._config import StoreConfig

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def test_the_page_is_the_commands_output() -> None:
    r = CliRunner().invoke(main, ["config-keys"])
    assert r.exit_code == 0, r.output
    assert DOC.read_text(encoding="utf-8") == r.output, (
        "docs/configuration.md is stale: rocketstore config-keys > docs/configuration.md"
    )


def test_every_key_acted_on_says_what_it_does() -> None:
    missing = [
        k.name for k in broker_keys() + controller_keys() if k.acted_on and not WHAT.get(k.name)
    ]
    assert not missing, f"describe in cli/_config_reference.py's WHAT: {missing}"


def test_the_keys_listed_as_acted_on_are_read() -> None:
    """A broker.conf of every key acted on at its documented default changes no setting and
    leaves no key unread; the ignored ones are kept aside to be named in the warning."""
    keys = broker_keys()
    acted = {k.name: k.default for k in keys if k.acted_on and not k.default.startswith("(")}
    acted.pop("storePathRootDir")
    config = StoreConfig.from_mapping(acted)
    assert {key for key, _ in config.extra} <= broker_conf_keys()
    ignored = [k.name for k in keys if not k.acted_on]
    assert ignored and not set(ignored) & broker_conf_keys()
    unread = StoreConfig.from_mapping({k: "1" for k in ignored[:20]}).extra
    assert [key for key, _ in unread] == ignored[:20]
    controller = {k.name: k.default for k in controller_keys() if k.default}
    controller.pop("controllerStorePath")
    parsed = ControllerConfig.from_properties(
        parse_properties("".join(f"{k}={v}\n" for k, v in controller.items()))
    )
    assert parsed.listen_port == 9878 and parsed.backend == "file"
