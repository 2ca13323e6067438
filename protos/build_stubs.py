"""Generates the Python stubs of the omnimesh.v1 contract beside the .proto files (run: python protos/build_stubs.py)."""
from __future__ import annotations

import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PACKAGE_DIR = PROTO_ROOT / "omnimesh" / "v1"


def build(out_dir: Path = PROTO_ROOT) -> None:
    """Writes *_pb2.py, *_pb2.pyi and *_pb2_grpc.py for every proto under omnimesh/v1 into out_dir."""
    from grpc_tools import protoc  # a build tool, imported only when stubs are built

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {protos}")


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT)
