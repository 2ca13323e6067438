"""deploy/Containerfile passes hadolint and agrees with the chart: user, ports, sources, no root at run time."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.deploy.deploy_tools import CHART, CONTAINERFILE, ROOT, run

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def final_stage() -> list[tuple[str, str]]:
    ins = instructions()
    last_from = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    return ins[last_from:]


def test_hadolint(hadolint: Path) -> None:
    run([hadolint, CONTAINERFILE])


def test_runs_as_the_chart_user() -> None:
    users = [arg for op, arg in final_stage() if op == "USER"]
    assert users, "the image must not run as root"
    uid, _, gid = users[-1].partition(":")
    assert int(uid) == VALUES["podSecurityContext"]["runAsUser"] == VALUES["securityContext"]["runAsUser"]
    assert int(gid) == VALUES["podSecurityContext"]["runAsGroup"]


def test_exposes_the_chart_ports() -> None:
    exposed = {int(p) for op, arg in final_stage() if op == "EXPOSE" for p in arg.split()}
    assert exposed == {VALUES["ports"]["grpc"], VALUES["ports"]["metrics"]}


def test_copies_only_what_exists() -> None:
    for op, arg in instructions():
        if op == "COPY" and not arg.startswith("--from"):
            *sources, _dest = arg.split()
            for src in sources:
                assert (ROOT / src).exists(), src


def test_the_build_context_holds_every_copied_source() -> None:
    """The context filter ignores everything, then lets back in what the COPY lines read."""
    kept = {ln[1:].rstrip("/") for ln in (CONTAINERFILE.parent / "Containerfile.dockerignore").read_text().splitlines()
            if ln.startswith("!")}
    for op, arg in instructions():
        if op == "COPY" and not arg.startswith("--from"):
            *sources, _dest = arg.split()
            assert set(s.rstrip("/") for s in sources) <= kept, sources


def test_dependencies_install_at_the_locked_versions() -> None:
    installs = [arg for op, arg in instructions() if op == "RUN" and "pip install" in arg]
    assert installs and all("-c requirements.lock" in arg for arg in installs)


def test_one_image_for_every_entrypoint() -> None:
    """`python -m <module>` works for each stage: the packages it installs hold every module the chart runs."""
    copied = {arg.split()[0] for op, arg in instructions() if op == "COPY" and not arg.startswith("--from")}
    for module in ("gateway", "services", "http_front"):
        assert module in copied, module
    entry = [arg for op, arg in final_stage() if op == "ENTRYPOINT"]
    assert entry and yaml.safe_load(entry[-1]) == ["python", "-m"]
