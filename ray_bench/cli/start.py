"""Starting points: `init` (a suite that runs as written) and `image base` (the registry-free base image)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ray_bench.cli.app import app, guarded, out

image_app = typer.Typer(no_args_is_help=True, help="Images that tasks build on.")
app.add_typer(image_app, name="image")


@app.command()
@guarded
def init(
    directory: Annotated[Path, typer.Argument(help="A new or empty directory to write the suite into.")],
    backend: Annotated[str, typer.Option("--backend", help="Where its cells run: docker, local or daytona.")]
    = "docker",
) -> None:
    """Write a suite to start from, that plans and runs offline.

    Two paired arms (baseline and variant) over a scripted stand-in agent, two accounts with env
    routes, and one task in Harbor's format; refuses a directory that is not empty.
    """
    from ray_bench.commands.starter import env_prefix, suite_name, write_starter
    from ray_bench.sandboxes.capabilities import capabilities

    written = write_starter(directory, backend)
    for path in written:
        out.print(f"wrote {path}", markup=False)
    prefix = env_prefix(suite_name(directory))
    steps = ["ray-bench image base"] if capabilities(backend).local_images else []
    steps += [f"export {prefix}_KEY_A=any-value {prefix}_KEY_B=any-value",
              f"ray-bench plan --suite {directory}/suite.yaml --accounts {directory}/accounts.yaml"]
    out.print("next: " + "; ".join(steps), markup=False)


@image_app.command("base")
@guarded
def image_base(
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Import it again even if it exists.")] = False,
) -> None:
    """Build ray-bench-base:busybox from this machine's busybox (no registry needed)."""
    import docker

    from ray_bench.errors import SandboxUnavailableError
    from ray_bench.sandboxes.images import build_base_image

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"cannot reach the Docker daemon ({type(exc).__name__}): start dockerd, "
                                      "or set DOCKER_HOST") from exc
    out.print(build_base_image(client, rebuild=rebuild), markup=False)
