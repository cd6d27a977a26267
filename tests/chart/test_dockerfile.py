"""The image contract the chart relies on, read from the Dockerfile (no Docker engine needed):
a --locked release build, a distroless final stage without shell or package manager, the non-root
user the chart's securityContext names, OCI labels, and `sandcap run` as the default command."""

from __future__ import annotations

import json
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def stages() -> list[list[tuple[str, str]]]:
    """Instructions per build stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    result: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            result.append([])
        if result:
            result[-1].append((instruction.upper(), args.strip()))
    return result


def test_release_build_is_locked() -> None:
    build = stages()[0]
    runs = [args for instruction, args in build if instruction == "RUN"]
    assert any("cargo build --release --locked" in run for run in runs)


def test_final_stage_is_minimal_and_non_root() -> None:
    final = stages()[-1]
    base = final[0][1]
    assert base.startswith("gcr.io/distroless/") and base.endswith(":nonroot"), base
    assert not [args for instruction, args in final if instruction == "RUN"], "no shell to run anything in"
    user = [args for instruction, args in final if instruction == "USER"]
    assert user == ["65532:65532"]
    values = yaml.safe_load((ROOT / "charts/sandcap/values.yaml").read_text())
    assert values["securityContext"]["runAsUser"] == 65532 == values["podSecurityContext"]["runAsUser"]
    instructions = dict(final)
    assert json.loads(instructions["ENTRYPOINT"]) == ["/sandcap"]
    assert json.loads(instructions["CMD"]) == ["run"]


def test_oci_labels() -> None:
    labels = " ".join(args for instruction, args in stages()[-1] if instruction == "LABEL")
    for key in ("title", "description", "licenses", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels, key
