"""``kernelexec image build``: the kernel image for DockerBackend, tagged by its inputs.

The tag is a hash of everything that goes into the image (the Dockerfile, the
base image, the extra packages, the requirements file's content), so building
again with the same inputs is a no-op and a changed input makes a new image.

The Dockerfile is package data, next to this module, so a wheel installed
anywhere builds the same image (and gets the same tag) as a source checkout.
Its build context is a temporary directory holding only the Dockerfile and the
requirements file: nothing else is COPYed, so nothing else needs to ship.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .._exceptions import ConfigurationError, EnvironmentBuildError, KernelexecError
from .._venvs._installer import output_tail
from .._venvs._venv import check_packages
from ._docker_engine import docker, engine_problem

__all__ = ["DEFAULT_BASE_IMAGE", "DOCKERFILE", "build_image", "image_tag", "last_built_tag"]

DEFAULT_BASE_IMAGE = "python:3.12-slim"
DOCKERFILE = Path(__file__).resolve().with_name("Dockerfile")
REPOSITORY = "kernelexec-kernel"
# The legacy builder's lines that say nothing about a failure.
_BUILD_NOISE = ("Step ", " ---> ", "DEPRECATED:", " " * 12, "Removing intermediate", "Sending")


def image_tag(
    *,
    base_image: str | None = None,
    packages: Sequence[str] = (),
    requirements: str = "",
) -> str:
    """The tag the image built from these inputs gets.

    Raises:
        ConfigurationError: a package looks like a pip option.
    """
    check_packages(packages)
    inputs = {
        "dockerfile": _dockerfile().read_text(encoding="utf-8"),
        "base_image": base_image or DEFAULT_BASE_IMAGE,
        "packages": sorted(packages),
        "requirements": requirements,
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return f"{REPOSITORY}:{digest[:16]}"


async def build_image(
    *,
    base_image: str | None = None,
    packages: Sequence[str] = (),
    requirements: Path | None = None,
    quiet: bool = False,
    mark_last: bool = True,
) -> str:
    """Builds the kernel image unless an image with its tag exists; returns the tag.

    Args:
        base_image: the FROM image; default ``DEFAULT_BASE_IMAGE``.
        packages: requirements for pip, each one argument after ``--``.
        requirements: a requirements file (pip's ``-r`` format).
        quiet: capture the build's output rather than show it; a failure's
            message then ends with the output's tail.
        mark_last: make this the image ``DockerBackend()`` runs by default
            (``kernelexec image build`` does; a backend building its own does not).

    Raises:
        ConfigurationError: the requirements file cannot be read, or a
            package looks like a pip option.
        EnvironmentBuildError: the build failed (a package that does not
            install, a base image that cannot be pulled).
        KernelexecError: the engine is unreachable.
    """
    try:
        requirements_text = requirements.read_text(encoding="utf-8") if requirements else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read requirements file {requirements}: {exc}") from exc
    tag = image_tag(base_image=base_image, packages=packages, requirements=requirements_text)
    if (await docker("image", "inspect", tag)).ok:
        if mark_last:
            await _mark_last_built(tag)
        return tag
    with tempfile.TemporaryDirectory(prefix="kernelexec-image-") as context:
        (Path(context) / "Dockerfile").write_text(_dockerfile().read_text(encoding="utf-8"))
        (Path(context) / "requirements.txt").write_text(requirements_text)
        reply = await docker(
            "build",
            "--build-arg",
            f"BASE_IMAGE={base_image or DEFAULT_BASE_IMAGE}",
            "--build-arg",
            f"PACKAGES={json.dumps(list(packages)) if packages else ''}",
            "--label",
            "kernelexec=1",
            "-t",
            tag,
            context,
            timeout=1800,
            show=not quiet,
        )
    if not reply.ok:
        problem = engine_problem(reply)
        if problem:
            raise KernelexecError(problem)
        said = f" Its output ends:\n{_build_tail(reply.stdout + reply.stderr)}" if quiet else ""
        raise EnvironmentBuildError(
            f"docker build of {tag} failed: a package that does not install, or a base "
            f"image that cannot be pulled (choose another with base_image=/--base-image)?{said}"
        )
    if mark_last:
        await _mark_last_built(tag)
    return tag


def _build_tail(output: str) -> str:
    """The end of a failed build's output without its step headers, cache lines and colours."""
    kept = [
        line
        for line in re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines()
        if not line.startswith(_BUILD_NOISE)
    ]
    return output_tail("\n".join(kept))


def last_built_tag() -> str:
    """The tag on the image ``build_image`` built or found last: DockerBackend's default.

    ``kernelexec image build --base-image X`` then ``DockerBackend()`` should
    run that image, whose tag no default could compute. The tag names the
    Dockerfile's digest, so an image built from another kernelexec's
    Dockerfile is never picked up.
    """
    digest = hashlib.sha256(_dockerfile().read_bytes()).hexdigest()
    return f"{REPOSITORY}:last-{digest[:12]}"


async def _mark_last_built(tag: str) -> None:
    reply = await docker("tag", tag, last_built_tag())
    if not reply.ok:
        raise KernelexecError(
            engine_problem(reply) or f"docker tag {tag} failed: {reply.stderr.strip()}"
        )


def _dockerfile() -> Path:
    # Only a broken install lacks it (package data left out by a repackager, or a
    # file deleted by hand): say so rather than fail inside the hash or the build.
    if not DOCKERFILE.is_file():
        raise ConfigurationError(
            f"the kernel image's Dockerfile is missing from the installed kernelexec "
            f"(expected at {DOCKERFILE}); reinstall it: "
            "python -m pip install --force-reinstall kernelexec"
        )
    return DOCKERFILE
