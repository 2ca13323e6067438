"""deploy/'s plain YAML passes yamllint (duplicate keys, which PyYAML and Helm accept silently, fail it)."""
from __future__ import annotations

from pathlib import Path

from tests.deploy.deploy_tools import CHART, DEPLOY, run

FILES = [
    DEPLOY / ".yamllint.yaml",
    DEPLOY / "metrics-contract.yaml",
    DEPLOY / "prometheus" / "rules.yaml",
    DEPLOY / "prometheus" / "rules_test.yaml",
    CHART / "Chart.yaml",
    CHART / "values.yaml",
    CHART / "values-multi-replica.yaml",
]


def test_yamllint(yamllint: Path) -> None:
    run([yamllint, "--no-warnings", "-c", DEPLOY / ".yamllint.yaml", *FILES])


def test_yamllint_catches_duplicate_keys(yamllint: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\na: 2\n")
    proc = run([yamllint, "-c", DEPLOY / ".yamllint.yaml", bad], check=False)
    assert proc.returncode != 0 and "duplication" in proc.stdout
