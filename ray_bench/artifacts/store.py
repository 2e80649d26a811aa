"""Artifact stores named by URI: a local path (:class:`LocalStore`) or anything fsspec can
write, such as ``s3://bucket/prefix`` with s3fs (:class:`FsspecStore`; ``pip install
'ray-bench[s3]'``). Credentials come from the node's environment as the filesystem's own
library reads them (for S3: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an
instance role; ``AWS_ENDPOINT_URL_S3`` for an S3-compatible server); a URI holding a
credential is refused."""

from __future__ import annotations

import queue
import shutil
import threading
import urllib.parse
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from ray_bench.errors import ArtifactStoreError, UserInputError

#: ``execute --artifacts`` values that are not stores.
AUTO, RAY = "auto", "ray"
_WHERE = "--artifacts"


class ArtifactStore(ABC):
    """Where attempt directories go, by key (``<run_id>/attempts/<attempt_id>``)."""

    uri: str

    def uri_of(self, key: str) -> str:
        return f"{self.uri.rstrip('/')}/{key}"

    @abstractmethod
    def put_tree(self, local: Path, key: str) -> str:
        """Copy the directory ``local`` to ``key``; returns its URI."""

    @abstractmethod
    def get_tree(self, key: str, local: Path) -> Path:
        """Copy ``key`` into the directory ``local`` (made if missing); returns ``local``."""

    @abstractmethod
    def check(self) -> None:
        """Raise :class:`ArtifactStoreError` when the store cannot be reached or written."""

    @abstractmethod
    def has_file(self, key: str) -> bool:
        """Whether the file ``key`` is there (False when the store cannot say)."""


class LocalStore(ArtifactStore):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)

    def put_tree(self, local: Path, key: str) -> str:
        target = self.root / key
        try:
            shutil.copytree(local, target, symlinks=True, dirs_exist_ok=True)
        except OSError as exc:
            raise ArtifactStoreError(f"cannot write {target}: {exc.strerror or exc}") from exc
        return str(target)

    def get_tree(self, key: str, local: Path) -> Path:
        shutil.copytree(self.root / key, local, symlinks=True, dirs_exist_ok=True)
        return local

    def has_file(self, key: str) -> bool:
        return (self.root / key).is_file()

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArtifactStoreError(f"cannot make {self.root}: {exc.strerror or exc}") from exc


class FsspecStore(ArtifactStore):
    """Any fsspec filesystem. Calls block: a runner makes them in a thread."""

    def __init__(self, uri: str) -> None:
        import fsspec

        self.uri = uri.rstrip("/")
        self.protocol = urllib.parse.urlsplit(uri).scheme
        # not fsspec's instance cache: it keys on arguments, not on the environment the
        # filesystem read its endpoint and credentials from (open_store keeps one per URI)
        self._fs: Any = fsspec.filesystem(self.protocol, skip_instance_cache=True)
        self._root = self.uri.split("://", 1)[1]

    def put_tree(self, local: Path, key: str) -> str:
        target = f"{self._root}/{key}"
        try:
            self._fs.put(f"{local}/", f"{target}/", recursive=True)
        except Exception as exc:  # fsspec and its backends raise anything (OSError, botocore, aiohttp)
            raise ArtifactStoreError(f"cannot write {self.uri_of(key)}: {type(exc).__name__}: "
                                     f"{str(exc)[:300]}") from exc
        return self.uri_of(key)

    def get_tree(self, key: str, local: Path) -> Path:
        local.mkdir(parents=True, exist_ok=True)
        self._fs.get(f"{self._root}/{key}/", f"{local}/", recursive=True)
        return local

    def has_file(self, key: str) -> bool:
        try:
            return bool(self._fs.exists(f"{self._root}/{key}"))
        except Exception:  # fsspec backends raise anything; unknown is not "there"
            return False

    def check(self) -> None:
        """List the bucket, within :data:`PROBE_TIMEOUT_SEC`: a store that accepts connections
        and never answers was refused only after botocore's own timeouts and retries (84 s
        measured, issue 58). The listing is left to end in a daemon thread."""
        bucket = self._root.split("/", 1)[0]
        answer: queue.Queue[BaseException | None] = queue.Queue(maxsize=1)

        def listing() -> None:
            try:
                self._fs.ls(bucket, refresh=True)
            except Exception as exc:
                answer.put(exc)
            else:
                answer.put(None)

        threading.Thread(target=listing, name="store-probe", daemon=True).start()
        try:
            failed = answer.get(timeout=PROBE_TIMEOUT_SEC)
        except queue.Empty:
            raise ArtifactStoreError(f"cannot reach {self.protocol}://{bucket}: no answer within "
                                     f"{PROBE_TIMEOUT_SEC:.0f} s") from None
        if failed is not None:
            raise ArtifactStoreError(f"cannot reach {self.protocol}://{bucket}: {type(failed).__name__}: "
                                     f"{str(failed)[:300]}") from failed


#: How long ``execute`` waits for an artifact store to answer its probe (a listing of the
#: bucket: one round trip, well under a second on a reachable store).
PROBE_TIMEOUT_SEC = 10.0

_OPEN: dict[str, ArtifactStore] = {}


def open_store(uri: str) -> ArtifactStore:
    """The store for ``uri`` (one per process and URI: a filesystem keeps its connections)."""
    store = _OPEN.get(uri)
    if store is None:
        scheme = urllib.parse.urlsplit(uri).scheme
        if scheme in ("", "file"):
            store = LocalStore(Path(urllib.parse.urlsplit(uri).path if scheme else uri))
        else:
            store = FsspecStore(uri)
        _OPEN[uri] = store
    return store


def parse_setting(value: str) -> str | None:
    """``execute --artifacts``: ``auto``, ``ray``, or a store URI (returned normalised; None
    for the first two). Bad values are one-line user errors: nothing has started yet."""
    if value in (AUTO, RAY):
        return None
    parts = urllib.parse.urlsplit(value)
    if parts.scheme in ("", "file"):
        path = Path(parts.path if parts.scheme else value)
        if not path.is_absolute():
            raise UserInputError(f"artifact store {value!r} is a relative path", where=_WHERE,
                                 fix="name an absolute path every node can write, or auto")
        return str(path)
    if parts.username or parts.password or parts.query:
        raise UserInputError("the artifact store URI carries credentials or options", where=_WHERE,
                             fix="give s3://bucket/prefix; credentials come from each node's environment")
    if not parts.netloc:
        raise UserInputError(f"artifact store {value!r} names no bucket", where=_WHERE,
                             fix="give s3://bucket/prefix")
    try:
        import fsspec

        fsspec.get_filesystem_class(parts.scheme)
    except (ImportError, ValueError) as exc:
        raise UserInputError(f"no filesystem for {parts.scheme}:// ({str(exc).splitlines()[0][:200]})",
                             where=_WHERE, fix="pip install 'ray-bench[s3]' (s3fs) on every node, or use auto"
                             ) from None
    return f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")


def checked_store(value: str) -> ArtifactStore | None:
    """:func:`parse_setting` and a reachability check of the store from the driver."""
    uri = parse_setting(value)
    if uri is None:
        return None
    store = open_store(uri)
    try:
        store.check()
    except ArtifactStoreError as exc:
        raise UserInputError(str(exc), where=_WHERE,
                             fix="check the bucket and this node's credentials, or use auto") from None
    return store
