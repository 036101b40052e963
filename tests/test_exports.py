"""The public API: every name in ``rocketstore.__all__`` exists and is what it says."""

from __future__ import annotations

import importlib

import rocketstore


def test_all_exports_exist() -> None:
    assert rocketstore.__all__
    assert len(set(rocketstore.__all__)) == len(rocketstore.__all__)
    for name in rocketstore.__all__:
        assert hasattr(rocketstore, name), name


def test_star_import() -> None:
    namespace: dict[str, object] = {}
    exec("from rocketstore import *", namespace)
    assert set(rocketstore.__all__) <= set(namespace)


def test_exported_classes_are_public_names_of_private_modules() -> None:
    for name in rocketstore.__all__:
        obj = getattr(rocketstore, name)
        module = getattr(obj, "__module__", None)
        if isinstance(obj, type) and module:
            assert module.startswith("rocketstore."), (name, module)
            assert getattr(importlib.import_module(module), name) is obj


def test_design_api_names() -> None:
    for name in (
        "MessageStore",
        "StoreConfig",
        "Message",
        "PutMessageStatus",
        "GetMessageStatus",
        "MessageExt",
        "StoreError",
        "StoreLockedError",
        "ManualClock",
    ):
        assert name in rocketstore.__all__


def test_exception_tree() -> None:
    for name in rocketstore.__all__:
        obj = getattr(rocketstore, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, rocketstore.StoreError), name
    assert issubclass(rocketstore.CorruptRecordError, rocketstore.CorruptFileError)


def test_py_typed_marker() -> None:
    from importlib.resources import files

    assert files("rocketstore").joinpath("py.typed").is_file()
