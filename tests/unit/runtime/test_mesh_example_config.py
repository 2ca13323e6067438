"""The example mesh config shipped in deploy/ is valid and matches the built-in defaults where it says so."""
from __future__ import annotations

from pathlib import Path

from runtime.config import MeshConfig, load_mesh_config

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "mesh.example.yaml"


def test_example_config_loads_and_equals_the_defaults() -> None:
    assert load_mesh_config(EXAMPLE) == MeshConfig()
