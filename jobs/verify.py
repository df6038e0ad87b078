"""The verify deployable: compare two stores directories; exit 0 when equal, 1 otherwise."""

from __future__ import annotations

from pathlib import Path

from memstack.pipelines.replay.verify import compare


def main(a: Path, b: Path, *, as_json: bool = False, portable: bool = False,
         tenant: str | None = None, vectors: bool = True) -> int:
    if portable:
        from memstack.pipelines.replay.portable import compare_portable

        comparison = compare_portable(a.resolve(), b.resolve(), tenant=tenant, vectors=vectors)
    else:
        comparison = compare(a.resolve(), b.resolve())
    if as_json:
        print(comparison.to_json())
    else:
        print("\n".join(comparison.lines()))
    return 0 if comparison.equal else 1
