"""The checked-in stubs are exactly what protoc makes of the checked-in .proto files."""
from __future__ import annotations

from pathlib import Path

from protos.build_stubs import PACKAGE_DIR, build

GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    build(tmp_path)
    fresh = tmp_path / "omnimesh" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.name.endswith(GENERATED_SUFFIXES))
    assert names == sorted(p.name for p in PACKAGE_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES))
    stale = [n for n in names if (fresh / n).read_bytes() != (PACKAGE_DIR / n).read_bytes()]
    assert not stale, f"stale stubs {stale}: run `make protos`"


def test_every_service_has_info() -> None:
    for proto in PACKAGE_DIR.glob("*.proto"):
        text = proto.read_text()
        if "\nservice " in text:
            assert "rpc Info(InfoRequest)" in text, proto.name
