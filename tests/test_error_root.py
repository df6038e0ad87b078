"""Every error type of the package derives from ``MemstackError`` (the CLI's handler and a
user's ``except MemstackError`` catch them all), computed from the code: an error class is
rooted when one of its bases is ``MemstackError`` or another rooted error class."""

from __future__ import annotations

import ast

from tests.test_import_graph import modules


def error_classes() -> dict[str, list[str]]:
    """``module.Class`` -> base names, for every class named ``*Error`` or ``*Exception``."""
    out: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                out[f"{name}.{node.name}"] = [ast.unparse(b).rsplit(".", 1)[-1]
                                              for b in node.bases]
    return out


def unrooted(classes: dict[str, list[str]]) -> list[str]:
    rooted = {"MemstackError"}
    changed = True
    while changed:
        changed = False
        for qualified, bases in classes.items():
            short = qualified.rsplit(".", 1)[-1]
            if short not in rooted and any(b in rooted for b in bases):
                rooted.add(short)
                changed = True
    return sorted(q for q in classes if q.rsplit(".", 1)[-1] not in rooted)


def test_the_check_sees_an_unrooted_error() -> None:
    assert unrooted({"m.A": ["MemstackError"], "m.B": ["A"], "m.C": ["ValueError"]}) == ["m.C"]


def test_every_error_derives_from_memstack_error() -> None:
    classes = error_classes()
    assert len(classes) > 40
    assert unrooted(classes) == []
