"""Red team (23b): "No registry here". Before a build, every image the Dockerfile needs must be
on the host, and Docker is never asked to look for one (docs/TASKS.md, "No registry here").
`images_named` reads the Dockerfile line by line with a regex, while Docker joins a line that
ends in `\\` with the next one and runs ONBUILD triggers of a stage: what Docker builds from
and what Boltz checks differ, and Docker goes to a registry (observed on this host, Docker
20.10 classic builder: `Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid
... no such host`; with a reachable registry it pulls)."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from attempts.taskio.images import images_named, rewrite_from

STANDIN = "boltz-base:bookworm"
FAR = "registry.invalid/tools:1"  # on no host, in no registry

# `FROM\` + ` IMAGE`: Docker reads `FROM IMAGE` (the escape and the newline removed, the lines
# joined); `_FROM` needs whitespace after FROM, so the line is neither mapped nor checked.
CONTINUED_FROM = f"FROM\\\n {FAR}\nRUN true\n"
# A RUN continued onto a line that reads like `FROM x AS NAME`: Boltz takes NAME for a stage,
# Docker never saw one, so `COPY --from=NAME` is an image to Docker, not checked by Boltz.
FAKE_STAGE = (
    f"FROM {STANDIN}\nRUN true \\\nFROM {STANDIN} AS {FAR}\nCOPY --from={FAR} /etc/hostname /x\n"
)
# An ONBUILD trigger of a stage runs when a later stage starts FROM it: its COPY --from is
# Docker's to fetch; `_COPY_FROM` only reads lines that start with COPY.
ONBUILD = f"FROM {STANDIN} AS a\nONBUILD COPY --from={FAR} /etc/hostname /x\nFROM a\nRUN true\n"
# `FROM $BASE` with its default in an ARG: skipped by images_named (`$` in it), and mapped only
# by `*`; an installation whose mapping names its bases (no `*`) builds it from a registry.
ARG_FROM = f"ARG BASE={FAR}\nFROM $BASE\nRUN true\n"


@pytest.mark.parametrize(
    "dockerfile",
    [CONTINUED_FROM, FAKE_STAGE, ONBUILD],
    ids=["from-continued", "fake-stage-name", "onbuild-copy-from"],
)
def test_every_image_docker_would_fetch_is_named_or_mapped(dockerfile):
    mapped, _notes = rewrite_from(dockerfile, {"*": STANDIN})
    # After the mapping the import does, the build must not need FAR: either it was mapped
    # away, or images_named names it (so build() refuses with not_here, never asking Docker).
    assert FAR not in mapped or FAR in images_named(mapped), (
        f"Docker builds from {FAR} here, which Boltz neither mapped nor checked:\n{mapped}"
    )


def test_an_arg_base_without_a_star_mapping_is_not_built_from_a_registry():
    mapped, _notes = rewrite_from(ARG_FROM, {"python:3.12": STANDIN})
    # Observed: images_named -> [] (the `$BASE` skipped), FROM left as it is: Docker expands
    # the ARG and fetches registry.invalid/tools:1.
    assert "$BASE" not in mapped or images_named(mapped), (
        "FROM $BASE is built with neither a mapping nor a check of what it names:\n" + mapped
    )


def _context(dockerfile: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


@pytest.mark.docker
@pytest.mark.parametrize(
    "dockerfile", [CONTINUED_FROM, FAKE_STAGE, ONBUILD], ids=["continued", "stage", "onbuild"]
)
def test_a_build_that_needs_a_missing_image_is_refused_before_docker_looks(
    dockerfile, docker_ready, settings, tmp_path
):
    """End to end: build() (what the worker and the import run) on the packed context."""
    from attempts.core.errors import ImageBuildFailed
    from attempts.run import image_builds
    from attempts.run.docker import runtime

    settings.DATA_DIR = tmp_path
    mapped, _notes = rewrite_from(dockerfile, {"*": STANDIN})
    if FAR not in mapped:  # mapped to the stand-in, as Docker reads it: built from there
        tag, _log = image_builds.build(_context(mapped))
        runtime.client().images.remove(tag, force=True)
        return
    with pytest.raises(ImageBuildFailed) as caught:
        image_builds.build(_context(mapped))
    said = f"{caught.value.reason}\n{caught.value.tail}"
    # Observed: "invalid from flag value registry.invalid/tools:1: Get
    # \"https://registry.invalid/v2/\": dial tcp: lookup registry.invalid ...: no such host"
    # (or "Get https://registry.invalid/v2/ ..." for FROM): Docker went to the registry.
    assert "Boltz never pulls" in said and "registry.invalid/v2" not in said, said
