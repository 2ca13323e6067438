"""Fixtures for the deploy/ checks: the installed tools (skipping with the reason when one is missing) and renders."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.deploy_tools import SCENARIOS, documents, helm_template, tool


def _require(name: str) -> Path:
    found = tool(name)
    if found.path is None:
        pytest.skip(found.missing_reason)
    return found.path


@pytest.fixture(scope="session")
def helm() -> Path:
    return _require("helm")


@pytest.fixture(scope="session")
def promtool() -> Path:
    return _require("promtool")


@pytest.fixture(scope="session")
def kubernetes_validate() -> Path:
    return _require("kubernetes-validate")


@pytest.fixture(scope="session")
def yamllint() -> Path:
    return _require("yamllint")


@pytest.fixture(scope="session")
def hadolint() -> Path:
    return _require("hadolint")


@pytest.fixture(scope="session")
def tools_python() -> Path:
    """The tools venv's Python, which has promql-parser."""
    return _require("python")


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """node_modules holding the @kubernetes-models CRD models."""
    return _require("node_modules")


@pytest.fixture(scope="session")
def manifests(helm: Path) -> dict[str, str]:
    """`helm template` output for every scenario, rendered once per session."""
    return {name: helm_template(helm, *flags).stdout for name, flags in SCENARIOS.items()}


@pytest.fixture(scope="session")
def objects(manifests: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """The rendered objects of every scenario."""
    return {name: documents(text) for name, text in manifests.items()}
