"""IcechunkRepository: one Icechunk repository (a local directory, s3://, gs://, az://) as tagged snapshots
of keys -> bytes; the only importer of icechunk.

Icechunk (PyPI `icechunk`) is a transactional storage engine for Zarr v3: a
writable session starts from the branch tip and keeps every key it does not
write (an unchanged chunk stays a reference to the parent's object), a commit
is atomic and fails with a conflict when another writer committed first,
tags name snapshots, and expiry plus garbage collection delete what no kept
snapshot references. This module wraps exactly those calls with bytes in and
out (no zarr import: the session's store is handed out for zarr readers) and
turns Icechunk's errors into varstore's. Knows nothing about checkpoints,
manifests or variables (checkpoint/manage/incremental.py does).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import datetime
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from varstore.errors import (
    CheckpointConflictError,
    CheckpointError,
    CheckpointNotFoundError,
    MissingDependencyError,
)
from varstore.storage._url_names import is_url

__all__ = ["IcechunkRepository", "SnapshotView", "Transaction", "is_repository", "BRANCH"]

#: The branch every checkpoint snapshot is committed to.
BRANCH = "main"
#: Chunks of at most this many bytes are kept inside their array's manifest (Icechunk's
#: inline_chunk_threshold_bytes, default 512; at most 65,535): a step that changes small values (adapters,
#: their Adam moments) writes no chunk object for them. MiniLM + LoRA trace, 13 + 13 alternating steps:
#: 166 -> 156 ms wall, 227 -> 186 ms CPU per step (docs/benchmarks/README.md, issue 40).
INLINE_CHUNK_BYTES = 16 << 10
_T = TypeVar("_T")
_LOGS_SET = False


def _icechunk() -> Any:
    """The icechunk module, imported without its log subscriber unless the user asked for logs.

    Importing icechunk installs a tracing subscriber whose error layer records every span of every call
    with its arguments formatted (Debug), whatever the log level: a chunk kept inline in the manifest
    is formatted byte by byte (~40 ns a byte: 0.5 ms a 12 KiB LoRA adapter, ~40 ms of a MiniLM step's
    72 inline chunks; docs/benchmarks/README.md, issue 40). Icechunk skips the subscriber when
    ICECHUNK_NO_LOGS is set at import, so varstore sets it for its own import only (then removes it) when
    the user set neither ICECHUNK_LOG nor ICECHUNK_NO_LOGS. Icechunk's errors then carry no span context
    (varstore's typed errors quote their first line). When icechunk was imported before varstore needed
    it, its subscriber is there to stay; its log filter is set to errors only, as before (Icechunk warns
    on every local open that local files are unsafe for concurrent commits, which varstore turns into
    CheckpointConflictError).
    """
    global _LOGS_SET
    fresh = "icechunk" not in sys.modules
    user_logs = bool(os.environ.get("ICECHUNK_LOG"))
    quiet = fresh and not user_logs and "ICECHUNK_NO_LOGS" not in os.environ
    if quiet:
        os.environ["ICECHUNK_NO_LOGS"] = "1"
    try:
        import icechunk
    except ImportError as err:
        raise MissingDependencyError(
            "incremental checkpoints (format=\"icechunk\") need icechunk: pip install 'varstore[icechunk]'") from err
    finally:
        if quiet:
            os.environ.pop("ICECHUNK_NO_LOGS", None)
    if not _LOGS_SET:
        if not fresh and not user_logs and "ICECHUNK_NO_LOGS" not in os.environ:
            icechunk.set_logs_filter("error")
        _LOGS_SET = True
    return icechunk


def repository_config(ic: Any) -> Any:
    """The icechunk.RepositoryConfig varstore opens (and creates) repositories with: chunks of up to
    INLINE_CHUNK_BYTES inline, and Icechunk 1.1's manifest defaults restated without their regular expressions.

    Icechunk 1.1 compiles the regular expression of a manifest condition on every evaluation ("TODO:
    precompile the regex" in its config.rs and repository.rs): the default preload condition (six regexes
    for coordinate names such as time/lat/lon, checked for every array when a session opens) and the
    default split condition (PathMatches ".*", checked for every array a commit writes). On MiniLM's 176
    arrays that was most of Icechunk's CPU in a step. Restated: no manifest preloading (varstore reads
    every array's chunk itself and has no coordinate arrays), and one manifest per array for AnyArray,
    which is the default's effect (split size 2**32 - 1 along any axis). The files written are the same;
    the configuration is stored in the repository's config.yaml, which plain Icechunk users then open with.
    """
    manifest = ic.ManifestConfig(
        preload=ic.ManifestPreloadConfig(preload_if=ic.ManifestPreloadCondition.false()),
        splitting=ic.ManifestSplittingConfig.from_dict(
            {ic.ManifestSplitCondition.AnyArray(): {ic.ManifestSplitDimCondition.Any(): 2**32 - 1}}))
    return ic.RepositoryConfig(inline_chunk_threshold_bytes=INLINE_CHUNK_BYTES, manifest=manifest)


def is_repository(location: os.PathLike[str] | str) -> bool:
    """True when the local directory `location` looks like an Icechunk repository (refs/ and snapshots/);
    False for URLs (asked by opening them) and anything else. Never raises."""
    if isinstance(location, str) and is_url(location):
        return False
    path = Path(location)
    try:
        return (path / "refs").is_dir() and (path / "snapshots").is_dir()
    except OSError:
        return False


def _storage(location: str, storage_options: Mapping[str, object] | None) -> Any:
    """The icechunk Storage of a local directory or an object-store URL (settings as docs/guide/object-storage.md)."""
    ic = _icechunk()
    if not is_url(location):
        return ic.local_filesystem_storage(os.path.abspath(location))
    from varstore.storage._urls import resolve

    resolved = resolve(location, storage_options)
    url, config = resolved.url, resolved.config
    prefix = url.key or None
    if url.provider == "s3":
        endpoint = resolved.endpoint
        return ic.s3_storage(bucket=url.bucket, prefix=prefix, region=str(config.get("region") or "us-east-1"),
                             endpoint_url=endpoint, allow_http=resolved.allow_http,
                             access_key_id=_str(config.get("access_key_id")),
                             secret_access_key=_str(config.get("secret_access_key")),
                             session_token=_str(config.get("session_token")),
                             force_path_style=endpoint is not None,
                             anonymous=None if config.get("access_key_id") else True)
    if url.provider == "gcs":
        google = {"google_base_url": str(config["base_url"])} if config.get("base_url") else None
        return ic.gcs_storage(bucket=url.bucket, prefix=prefix,
                              service_account_file=_str(config.get("service_account")),
                              service_account_key=_str(config.get("service_account_key")),
                              anonymous=True if not (config.get("service_account") or config.get("service_account_key"))
                              else None, config=google)
    account = _str(config.get("account_name")) or "devstoreaccount1"
    extra: dict[str, str] = {}
    if config.get("endpoint"):  # Azurite or another path-style endpoint: "http://HOST:PORT/<account>"
        extra["azure_storage_endpoint"] = str(config["endpoint"])
    elif resolved.endpoint:  # use_emulator: the emulator's default URL
        extra["azure_storage_use_emulator"] = "true"
    if resolved.allow_http:
        extra["allow_http"] = "true"
    return ic.azure_storage(account=account, container=url.bucket, prefix=url.key,
                            access_key=_str(config.get("account_key")), sas_token=_str(config.get("sas_token")),
                            config=extra or None)


def _str(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def _failure(err: BaseException, what: str, location: str) -> CheckpointError:
    """Icechunk's error `err` while doing `what` as varstore's typed error naming the repository."""
    ic = _icechunk()
    if isinstance(err, (ic.ConflictError, ic.RebaseFailedError)):
        return CheckpointConflictError(
            f"cannot {what} in '{location}': another writer committed to the repository first ({err}); "
            f"nothing of this save was committed, save again")
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return CheckpointError(f"cannot {what} in the Icechunk repository '{location}': {first}")


class _Loop:
    """Runs Icechunk's async store calls on one event loop in a daemon thread, started once and never
    closed (as zarr's own sync layer does); see _settle for the process's exit."""

    _loop: asyncio.AbstractEventLoop | None = None
    last_call = float("-inf")
    _guard = threading.Lock()

    def __init__(self) -> None:
        with _Loop._guard:
            if _Loop._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="varstore-icechunk", daemon=True).start()
                _Loop._loop = loop

    def close(self) -> None:
        """Nothing to release (the loop is shared)."""

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        assert _Loop._loop is not None
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, _Loop._loop).result()
        finally:
            _Loop.last_call = time.monotonic()


#: A Tokio worker hands a result over with loop.call_soon_threadsafe, whose wake-up write releases the
#: GIL; when the main thread meanwhile reaches interpreter teardown, the worker cannot take the GIL back
#: and the process aborts (SIGABRT, seen about one exit in four). Exits within SETTLE_S of the last call
#: wait out the rest of it, which lets the worker return first.
SETTLE_S = 0.05


def _settle() -> None:
    wait = SETTLE_S - (time.monotonic() - _Loop.last_call)
    if wait > 0:
        time.sleep(wait)


atexit.register(_settle)



class SnapshotView:
    """One committed snapshot, read-only: keys -> bytes, and the session's store for zarr."""

    def __init__(self, session: Any, location: str, name: str) -> None:
        self._opened: Any = session
        self._opener: Any = None  # deferred(): opens the session at its first use
        self._guard = threading.Lock()
        self._loop = _Loop()
        self.location = location
        self.name = name
        self.snapshot_id: str = session.snapshot_id if session is not None else ""

    @classmethod
    def deferred(cls, opener: Any, snapshot_id: str, location: str, name: str) -> SnapshotView:
        """A view of snapshot `snapshot_id` whose Icechunk session `opener()` opens at its first use (a
        reader that finds every chunk's object itself never opens one: ~20 ms of Icechunk's CPU saved)."""
        view = cls(None, location, name)
        view._opener, view.snapshot_id = opener, snapshot_id
        return view

    @property
    def _session(self) -> Any:
        if self._opened is None:
            with self._guard:
                if self._opened is None:
                    self._opened = self._opener()
        return self._opened

    @property
    def _raw(self) -> Any:
        """The byte-level store (IcechunkStore wraps it in zarr Buffers)."""
        return self._session.store._store

    @property
    def store(self) -> Any:
        """The session's zarr store (zarr.open_group(view.store, mode="r") reads the snapshot)."""
        return self._session.store

    async def _get(self, key: str) -> bytes | None:
        try:
            return bytes(await self._raw.get(key, None))
        except KeyError:
            return None
        except Exception:  # noqa: BLE001 - a chunk key under a missing node raises icechunk's own error
            if not await self._raw.exists(key):
                return None
            raise

    @staticmethod
    async def _call(method: Any, *args: Any) -> Any:
        """Awaits an async method of the byte-level store (its future needs the loop running)."""
        return await method(*args)

    def get(self, key: str) -> bytes | None:
        """The bytes stored at `key` ("w/zarr.json", "w/c/0/0"), or None when the snapshot has no such key.

        Raises:
          CheckpointError: the repository could not be read (naming it).
        """
        try:
            return self._loop.run(self._get(key))
        except Exception as err:  # noqa: BLE001 - icechunk raises its own error types
            raise _failure(err, f"read '{key}' of {self.name}", self.location) from err

    def get_many(self, keys: Iterable[str]) -> list[bytes | None]:
        """`get` of many keys at once (fetched concurrently), in order."""
        async def gather(wanted: list[str]) -> list[bytes | None]:
            return list(await asyncio.gather(*(self._get(key) for key in wanted)))

        wanted = list(keys)
        try:
            return self._loop.run(gather(wanted))
        except Exception as err:  # noqa: BLE001
            raise _failure(err, f"read {len(wanted)} keys of {self.name}", self.location) from err

    def fetch(self, key: str) -> concurrent.futures.Future[bytes | None]:
        """Starts fetching `key` on the shared loop and returns at once: a future of `get`'s result (many
        started together are read concurrently; the caller consumes them in its own order while the rest
        arrive). Its result raises CheckpointError (naming the repository) when the read failed."""
        assert _Loop._loop is not None
        return asyncio.run_coroutine_threadsafe(self._fetch(key), _Loop._loop)

    async def _fetch(self, key: str) -> bytes | None:
        try:
            return await self._get(key)
        except Exception as err:  # noqa: BLE001
            raise _failure(err, f"read '{key}' of {self.name}", self.location) from err
        finally:
            _Loop.last_call = time.monotonic()

    def close(self) -> None:
        self._loop.close()


class Transaction(SnapshotView):
    """A writable session on BRANCH: reads see the parent snapshot plus this session's writes; every key
    not written keeps the parent's object (an unchanged chunk is never copied)."""

    def set(self, key: str, data: bytes | memoryview) -> None:
        """Stores `data` at `key` in this session (a chunk is written to storage at once; committed later)."""
        try:
            self._loop.run(self._call(self._raw.set, key, bytes(data) if not isinstance(data, bytes) else data))
        except Exception as err:  # noqa: BLE001
            raise _failure(err, f"write '{key}'", self.location) from err

    def set_many(self, items: list[tuple[str, bytes | memoryview]],
                 then: list[tuple[str, bytes | memoryview]] | None = None) -> None:
        """`set` of many keys at once (written concurrently), then of the keys in `then` (an array's zarr.json
        in `items` before its chunk in `then`), in one call to the loop."""
        async def put(key: str, data: bytes | memoryview) -> None:
            await self._raw.set(key, data if isinstance(data, bytes) else bytes(data))

        async def gather() -> None:
            for batch in (items, then or []):
                await asyncio.gather(*(put(key, data) for key, data in batch))

        if not items and not then:
            return
        try:
            self._loop.run(gather())
        except Exception as err:  # noqa: BLE001
            raise _failure(err, f"write {len(items) + len(then or [])} keys", self.location) from err

    def delete_node(self, prefix: str) -> None:
        """Deletes the array or group at `prefix` and everything under it."""
        try:
            self._loop.run(self._call(self._raw.delete_dir, prefix))
        except Exception as err:  # noqa: BLE001
            raise _failure(err, f"delete '{prefix}'", self.location) from err

    def commit(self, message: str, metadata: Mapping[str, Any]) -> str:
        """Commits this session atomically; returns the new snapshot id.

        Raises:
          CheckpointConflictError: another writer committed to BRANCH since this session started.
          CheckpointError: the repository refused (naming it).
        """
        try:
            return str(self._session.commit(message, metadata=dict(metadata)))
        except Exception as err:  # noqa: BLE001
            raise _failure(err, "commit a snapshot", self.location) from err


class IcechunkRepository:
    """One Icechunk repository: tagged snapshots, a writable session on BRANCH, expiry and GC.

    Args:
      location: a local directory or an s3://, gs://, az:// URL (the repository's root prefix).
      storage_options: object-store settings (as varstore.save).
      create: create the repository when there is none (else CheckpointNotFoundError).
    """

    def __init__(self, location: os.PathLike[str] | str, storage_options: Mapping[str, object] | None = None,
                 create: bool = False) -> None:
        ic = _icechunk()
        self.location = str(location)
        storage = _storage(self.location, storage_options)
        try:
            config = repository_config(ic)
            if ic.Repository.exists(storage):
                self._repo = ic.Repository.open(storage, config=config)
            elif create:
                if not is_url(self.location):
                    Path(self.location).mkdir(parents=True, exist_ok=True)
                self._repo = ic.Repository.open_or_create(storage, config=config)
            else:
                raise CheckpointNotFoundError(f"no Icechunk repository at '{self.location}'")
        except CheckpointError:
            raise
        except Exception as err:  # noqa: BLE001
            raise _failure(err, "open the repository", self.location) from err

    @property
    def local_root(self) -> Path | None:
        """The repository's directory when it is local; None for an s3://, gs://, az:// URL."""
        return None if is_url(self.location) else Path(self.location)

    def tag_paths(self, name: str) -> list[Path]:
        """Where a local repository keeps tag `name` (Icechunk 1.x: refs/tag.<name>/ref.json), then that
        file's directory and refs/ (what an fsync makes durable), those that exist; [] for a URL."""
        root = self.local_root
        if root is None:
            return []
        folder = root / "refs" / f"tag.{name}"
        return [path for path in (folder / "ref.json", folder, root / "refs") if path.exists()]

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as err:  # noqa: BLE001
            raise _failure(err, what, self.location) from err

    def tags(self) -> dict[str, str]:
        """{tag name: snapshot id} of every tag."""
        names = self._call("list tags", self._repo.list_tags)
        return {name: str(self._call(f"look up tag '{name}'", self._repo.lookup_tag, name)) for name in names}

    def snapshot_info(self, snapshot_id: str) -> tuple[float, dict[str, Any], str | None]:
        """(commit time in seconds since the epoch, the commit's metadata, the parent snapshot id)."""
        info = self._call(f"look up snapshot {snapshot_id}", self._repo.lookup_snapshot, snapshot_id)
        parent = info.parent_id
        return info.written_at.timestamp(), dict(info.metadata or {}), None if parent is None else str(parent)

    def tip(self) -> str:
        """The snapshot id BRANCH points to (the newest commit; a fresh repository's initial snapshot)."""
        return str(self._call("look up the branch", self._repo.lookup_branch, BRANCH))

    def tag(self, name: str, snapshot_id: str) -> None:
        """Points tag `name` at `snapshot_id` (a tag that exists is moved: deleted, then created; the tags are
        listed only then, not on every save)."""
        try:
            self._repo.create_tag(name, snapshot_id)
            return
        except Exception as err:  # noqa: BLE001 - icechunk's own error; a tag of that name may exist
            if name not in self._call("list tags", self._repo.list_tags):
                raise _failure(err, f"create tag '{name}'", self.location) from err
        self._call(f"delete tag '{name}'", self._repo.delete_tag, name)
        self._call(f"create tag '{name}'", self._repo.create_tag, name, snapshot_id)

    def delete_tag(self, name: str) -> None:
        self._call(f"delete tag '{name}'", self._repo.delete_tag, name)

    def readonly(self, tag: str | None = None) -> SnapshotView:
        """The snapshot tagged `tag` (None: BRANCH's tip), read-only.

        Raises:
          CheckpointNotFoundError: no such tag.
        """
        if tag is not None and tag not in self._call("list tags", self._repo.list_tags):
            raise CheckpointNotFoundError(f"the Icechunk repository '{self.location}' has no tag '{tag}'")
        if tag is not None:  # the session of the tag's snapshot opens at its first use
            snapshot_id = str(self._call(f"look up tag '{tag}'", self._repo.lookup_tag, tag))
            return SnapshotView.deferred(
                lambda: self._call(f"open tag '{tag}'", self._repo.readonly_session, snapshot_id=snapshot_id),
                snapshot_id, self.location, tag)
        session = self._call("open the branch", self._repo.readonly_session, BRANCH)
        return SnapshotView(session, self.location, BRANCH)

    def writable(self) -> Transaction:
        """A writable session on BRANCH's tip."""
        session = self._call("start a session", self._repo.writable_session, BRANCH)
        return Transaction(session, self.location, BRANCH)

    def expire_and_collect(self, older_than: datetime.datetime, between: Callable[[], None] | None = None) -> int:
        """Expires every snapshot no tag or branch points to, calls `between()` (a durable retention syncs
        there: Icechunk's expiry rewrites the oldest kept snapshot of each history in place, and the tags
        deleted before must stay deleted, before anything they no longer reference is deleted), then deletes
        objects no kept snapshot references that were written before `older_than` (an in-flight writer's
        newer chunks survive); returns the bytes deleted."""
        self.expire_snapshots()
        if between is not None:
            between()
        return self.collect_garbage(older_than)

    def expire_snapshots(self) -> None:
        """Expires every snapshot no tag or branch points to (Icechunk's expire_snapshots, as of now)."""
        now = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
        self._call("expire snapshots", self._repo.expire_snapshots, now)

    def collect_garbage(self, older_than: datetime.datetime) -> int:
        """Deletes objects no kept snapshot references, written before `older_than`; returns the bytes deleted."""
        summary = self._call("collect garbage", self._repo.garbage_collect, older_than)
        return int(summary.bytes_deleted)
