"""A task's ``environment/docker-compose.yaml``, read as Harbor 0.26 reads it, checked statically
at ``validate`` / ``plan`` and classified.

Harbor merges the task's file over its own base file, which declares the ``main`` service
(``harbor/environments/docker/docker-compose-build.yaml``: ``build: {context: ${CONTEXT_DIR}}``
and ``command: sh -c "sleep infinity"``; ``-prebuilt.yaml``: ``image: ${PREBUILT_IMAGE_NAME}``),
the task's file last so that it wins (``DockerEnvironment._docker_compose_paths``). Its
Terminal-Bench mapper writes that same ``main`` into a task's file
(``harbor/mappers/terminal_bench.py`` ``HARBOR_MAIN_SERVICE``: build context, ``image:
${MAIN_IMAGE_NAME}``, the keep-alive command, ``TEST_DIR=${TEST_DIR}`` and ``${CPUS}`` /
``${MEMORY}`` limits) whenever it cannot fold the file into a Dockerfile, e.g. for a
``network_mode: "none"``. Such a file *restates* main: it runs as the default container,
``network_mode`` honoured. Any other file is a compose project (:mod:`ray_bench.sandboxes.docker.compose`); which
backends run one is :func:`ray_bench.tasks.support.compose_refusals`.

What Compose itself would refuse and can be known from the file alone (invalid YAML, a service
with neither image nor build, a ``depends_on`` / ``links`` / ``network_mode: service:`` naming no
service, a network or named volume used but not declared) is a :class:`TaskDirError` here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ray_bench.config.bounded import parse_yaml, read_text_bounded
from ray_bench.errors import TaskDirError
from ray_bench.models.task import MAIN_SERVICE
from ray_bench.models.task.compose import COMPOSE_FILE, ComposeProject

#: What Harbor's base file and mapper put in ``main`` (harbor/mappers/terminal_bench.py), each
#: as the spellings that mean the same container here.
_CONTEXTS = frozenset({"${CONTEXT_DIR}", ".", "./"})
_IMAGES = frozenset({"${MAIN_IMAGE_NAME}", "${PREBUILT_IMAGE_NAME}"})
_KEEPALIVE = frozenset({"sleep infinity", "sh -c sleep infinity", "tail -f /dev/null", "sh -c tail -f /dev/null"})
_TEST_DIR = "${TEST_DIR}"
_LIMITS = {"cpus": "${CPUS}", "memory": "${MEMORY}"}
#: network_mode values that leave main the default container (with or without a network).
_PLAIN_NETWORK = frozenset({"none", "bridge", "default"})
_TOP_LEVEL = frozenset({"services", "version", "name"})
#: A named volume in a short ``volumes:`` entry (a host path starts with one of . / ~ $).
_NAMED_VOLUME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def compose_file(task_dir: Path) -> Path | None:
    path = task_dir / "environment" / COMPOSE_FILE
    return path if path.is_file() else None


def read_compose(task_dir: Path, docker_image: str | None = None) -> ComposeProject | None:
    """The task's compose project, or None when it has no ``environment/docker-compose.yaml``.
    ``docker_image``: the task's ``[environment] docker_image`` (a main naming it restates it)."""
    path = compose_file(task_dir)
    if path is None:
        return None
    data, _ = parse_yaml(read_text_bounded(path, TaskDirError), path, TaskDirError)
    services = _services(data, path)
    _check_references(data, services, path)
    main = services.get(MAIN_SERVICE) or {}
    mode = main.get("network_mode")
    names = [MAIN_SERVICE, *sorted(n for n in services if n != MAIN_SERVICE)]
    return ComposeProject(
        services=tuple(names),
        main_only=set(data) <= _TOP_LEVEL and set(services) == {MAIN_SERVICE} and _restates_main(main, docker_image),
        main_network_mode=mode if isinstance(mode, str) else None,
        unsupported=tuple(_unsupported(main, docker_image)),
    )


def _fail(path: Path, what: str, fix: str) -> TaskDirError:
    return TaskDirError(f"{COMPOSE_FILE}: {what}", where=str(path), fix=fix)


def _services(data: Any, path: Path) -> dict[str, dict[str, Any]]:
    if not isinstance(data, dict):
        raise _fail(path, "is not a mapping", "write a compose file with a services: mapping")
    services = data.get("services")
    if not isinstance(services, dict) or not services:
        raise _fail(path, "has no services", "declare services: (Harbor's main and the task's others)")
    out: dict[str, dict[str, Any]] = {}
    for name, given in services.items():
        if not isinstance(name, str) or not isinstance(given, dict | None):
            raise _fail(path, f"service {name!r} is not a mapping", "give each service a mapping of keys")
        body = given or {}
        # main's image or build comes from Harbor's base file; every other service needs its own.
        if name != MAIN_SERVICE and "image" not in body and "build" not in body:
            raise _fail(path, f"service {name!r} has neither an image nor a build context",
                        "give it image: or build:")
        out[name] = body
    return out


def _declared(data: dict[str, Any], key: str) -> set[str]:
    section = data.get(key)
    return set(section) if isinstance(section, dict) else set()


def _check_references(data: dict[str, Any], services: dict[str, dict[str, Any]], path: Path) -> None:
    networks = _declared(data, "networks") | {"default"}
    volumes = _declared(data, "volumes")
    for name, body in services.items():
        deps = body.get("depends_on")
        named = list(deps) if isinstance(deps, dict | list) else []
        links = [str(link).split(":")[0] for link in body.get("links") or [] if isinstance(link, str)]
        mode = body.get("network_mode")
        if isinstance(mode, str) and mode.startswith("service:"):
            links.append(mode.removeprefix("service:"))
        for other in [*named, *links]:
            if other not in services:
                raise _fail(path, f"service {name!r} depends on undefined service {other!r}",
                            f"declare {other!r} under services: or drop the reference")
        used = body.get("networks")
        for net in (list(used) if isinstance(used, dict | list) else []):
            if net not in networks:
                raise _fail(path, f"service {name!r} refers to undefined network {net!r}",
                            f"declare {net!r} under the top-level networks:")
        for entry in body.get("volumes") or []:
            source = entry.split(":")[0] if isinstance(entry, str) and ":" in entry else \
                entry.get("source") if isinstance(entry, dict) and entry.get("type", "volume") == "volume" else None
            if isinstance(source, str) and _NAMED_VOLUME.match(source) and source not in volumes:
                raise _fail(path, f"service {name!r} refers to undefined volume {source!r}",
                            f"declare {source!r} under the top-level volumes:")


def _words(value: Any) -> str:
    return " ".join(value) if isinstance(value, list) else str(value)


def _restates_main(main: dict[str, Any], docker_image: str | None) -> bool:
    for key, value in main.items():
        if key == "build":
            context = value.get("context", ".") if isinstance(value, dict) else value
            extra = set(value) - {"context", "dockerfile"} if isinstance(value, dict) else set()
            dockerfile = value.get("dockerfile", "Dockerfile") if isinstance(value, dict) else "Dockerfile"
            ok = context in _CONTEXTS and not extra and dockerfile == "Dockerfile"
        elif key == "image":
            ok = value in _IMAGES or (docker_image is not None and value == docker_image)
        elif key == "command":
            ok = _words(value) in _KEEPALIVE
        elif key == "environment":
            ok = value in ([f"TEST_DIR={_TEST_DIR}"], {"TEST_DIR": _TEST_DIR}, [], {})
        elif key == "deploy":
            limits = value.get("resources", {}).get("limits") if isinstance(value, dict) else None
            ok = isinstance(limits, dict) and set(value) == {"resources"} and set(value["resources"]) == {"limits"} \
                and all(_LIMITS.get(k) == v for k, v in limits.items())
        elif key == "container_name":  # Harbor's mapper drops it (HARBOR_REPLACES)
            ok = True
        elif key == "network_mode":
            ok = value in _PLAIN_NETWORK
        else:
            ok = False
        if not ok:
            return False
    return True


def _unsupported(main: dict[str, Any], docker_image: str | None) -> list[str]:
    """What a compose project asks of main that the docker backend does not do (main runs the
    task image ray-bench builds from environment/, with the agent's CLI laid over it)."""
    out: list[str] = []
    build = main.get("build")
    if build is not None:
        context = build.get("context", ".") if isinstance(build, dict) else build
        dockerfile = build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
        if context not in _CONTEXTS or dockerfile != "Dockerfile":
            out.append(f"its compose main builds {context}/{dockerfile}; main runs the task image "
                       "built from environment/Dockerfile here")
    image = main.get("image")
    if isinstance(image, str) and build is None and image not in _IMAGES and image != docker_image:
        out.append(f"its compose main names image {image!r}; set [environment] docker_image instead")
    return out


def compose_warnings(task_dir: Path) -> list[str]:
    """A ``docker-compose.yml`` that Harbor does not read (it reads ``.yaml`` only)."""
    env = task_dir / "environment"
    if (env / "docker-compose.yml").is_file() and not (env / COMPOSE_FILE).is_file():
        return [f"environment/docker-compose.yml is not read (Harbor reads environment/{COMPOSE_FILE} only): "
                "the task runs as one container; rename it to use its services"]
    return []

