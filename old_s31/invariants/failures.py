"""The failure store: every shrunk failure a run found, kept as plain JSON and replayed first next time.

Derandomized profiles (ci, gpu) draw the same examples on every run and Hypothesis allows them no
example database, so a failure found once (a nightly random run, a CI run on another machine) would
not come back unless someone copied it into an `@example` row. The store is that copy, made
automatically: `glmgate run` / `glmgate gate` record each check's shrunk case here and replay every
recorded case of a check (as explicit examples, which derandomized runs execute too) before its
pinned examples and its draws. docs/failures.md documents the layout and the commands.

Layout: `<directory>/<check name>/<hash>.json`, one failure per file, the hash a function of the
check name and the case JSON alone, so recording a case twice keeps one file and stores merge by
copying files. A CI system caches or uploads the directory; a user deletes one file to forget one
failure.

A file that cannot be used (not JSON, not a record, or a case its check no longer accepts because the
case type changed) is never skipped: reading it raises FailureStoreError naming the file and how to
remove it, so a run cannot silently lose a known failure.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
import re
import tempfile
from typing import NamedTuple, Optional

from invariants.check import case_from_json

ENV = "GLMGATE_FAILURES"
DEFAULT_NAME = ".glmgate-failures"
FORMAT = 1                  # the version of one record's layout (and of an export's)
EXPORT_KEY = "glmgate_failures"
# check names become directory names: nothing that could climb out of the store
CHECK_NAME = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_-]+)+$")
FIELDS = {"check": str, "case": dict, "impl": str, "device": str, "dtype": str, "message": str,
          "recorded": str}


class FailureStoreError(ValueError):
    """A store file or an export that cannot be used: the message names it and what to do."""


class StaleFailure(FailureStoreError):
    """Recorded cases of a check that no longer parse as its case type (the type changed since)."""

    def __init__(self, check: str, paths: list, message: str):
        self.check, self.paths = check, paths
        super().__init__(message)


class Entry(NamedTuple):
    path: pathlib.Path
    check: str
    case: dict               # the case JSON (invariants.check.case_to_json)
    impl: str
    device: str
    dtype: str
    message: str
    repro: Optional[str]
    recorded: str            # UTC, ISO 8601 with microseconds: sorts as it reads
    version: Optional[str]   # the glmgate that recorded it

    def record(self) -> dict:
        return {"format": FORMAT, "check": self.check, "case": self.case, "impl": self.impl,
                "device": self.device, "dtype": self.dtype, "message": self.message, "repro": self.repro,
                "recorded": self.recorded, "glmgate_version": self.version}


def default_directory() -> pathlib.Path:
    """$GLMGATE_FAILURES if set, else ./.glmgate-failures in the current directory."""
    env = os.environ.get(ENV)
    return pathlib.Path(env) if env else pathlib.Path.cwd() / DEFAULT_NAME


def case_hash(check: str, case_json: dict) -> str:
    """The file name of a failure: canonical JSON, so key order or spacing never makes a duplicate."""
    text = json.dumps({"check": check, "case": case_json}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _version() -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("glmgate")
    except PackageNotFoundError:
        return None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _remove_hint(path) -> str:
    return f"remove it with `glmgate db remove {path}` (or delete the file)"


def _entry(data, where) -> Entry:
    """An Entry from one record's JSON, or FailureStoreError naming `where` and what is wrong."""
    if not isinstance(data, dict):
        raise FailureStoreError(f"{where}: not a failure record (expected a JSON object)")
    if data.get("format", FORMAT) != FORMAT:
        raise FailureStoreError(f"{where}: record format {data.get('format')!r}, this glmgate reads format "
                                f"{FORMAT} (written by another glmgate version?)")
    bad = [k for k, t in FIELDS.items() if not isinstance(data.get(k), t)]
    if bad:
        raise FailureStoreError(f"{where}: not a failure record: missing or mistyped {', '.join(bad)}")
    if not CHECK_NAME.match(data["check"]):
        raise FailureStoreError(f"{where}: {data['check']!r} is not a check name ('<mechanism>.<what>')")
    if not isinstance(data["case"].get("type"), str):
        raise FailureStoreError(f"{where}: the case has no 'type' (expected a case as `glmgate repro` prints it)")
    return Entry(pathlib.Path(where), data["check"], data["case"], data["impl"], data["device"], data["dtype"],
                 data["message"], data.get("repro"), data["recorded"], data.get("glmgate_version"))


def _write_json(path: pathlib.Path, data) -> None:
    """Write atomically: parallel CI jobs share a store, and a reader must never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


class FailureStore:
    """The recorded failures under one directory (created by the first record or import)."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)

    def __repr__(self) -> str:
        return f"FailureStore({str(self.directory)!r})"

    def _dir_of(self, check: str) -> pathlib.Path:
        if not CHECK_NAME.match(check):
            raise FailureStoreError(f"{check!r} is not a check name ('<mechanism>.<what>')")
        return self.directory / check

    def _files(self, check: Optional[str] = None) -> list[pathlib.Path]:
        if self.directory.exists() and not self.directory.is_dir():
            raise FailureStoreError(f"{self.directory}: the failure store must be a directory, this is a file")
        dirs = [self._dir_of(check)] if check else sorted(
            p for p in self.directory.glob("*") if p.is_dir() and not p.name.startswith("."))
        # dot files are atomic writes in progress (_write_json)
        return [p for d in dirs for p in sorted(d.glob("*.json")) if not p.name.startswith(".")]

    def read(self, path) -> Entry:
        """One file's entry; FailureStoreError naming the file when it is not a record of its directory."""
        path = pathlib.Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise FailureStoreError(f"{path}: unreadable failure record ({e}); {_remove_hint(path)}")
        try:
            entry = _entry(data, path)
        except FailureStoreError as e:
            raise FailureStoreError(f"{e}; {_remove_hint(path)}") from None
        if entry.check != path.parent.name:
            raise FailureStoreError(f"{path}: records check {entry.check!r} but lies in directory "
                                    f"{path.parent.name!r}; {_remove_hint(path)}")
        return entry

    def entries(self, check: Optional[str] = None) -> list[Entry]:
        """Every entry (of one check name), oldest first."""
        return sorted((self.read(p) for p in self._files(check)), key=lambda e: (e.recorded, e.path.name))

    def cases(self, check) -> tuple:
        """The recorded failing cases of a Check record, oldest first: what run_check replays first.

        StaleFailure, naming every such file, when a recorded case no longer parses as the check's case
        type (the type gained or lost a field since it was recorded): replaying the rest would drop a
        known failure without a word."""
        types = {check.case.__name__: check.case}
        cases, stale = [], []
        for e in self.entries(check.name):
            try:
                cases.append(case_from_json(e.case, types))
            except (ValueError, TypeError) as exc:
                stale.append((e, exc))
        if stale:
            lines = [f"{e.path}: the case recorded on {e.recorded}{' by glmgate ' + e.version if e.version else ''} "
                     f"no longer parses as a {check.name} case ({exc}): its case type changed since; "
                     f"{_remove_hint(e.path)}" for e, exc in stale]
            raise StaleFailure(check.name, [e.path for e, _ in stale], "\n".join(lines))
        return tuple(cases)

    def path_of(self, check: str, case_json: dict) -> pathlib.Path:
        return self._dir_of(check) / f"{case_hash(check, case_json)}.json"

    def record(self, check, result, impl_name: str, device: str, dtype: str) -> Optional[pathlib.Path]:
        """Write the result's shrunk case (with who failed it, where, why and how to repro); None when
        the result has none. A case already recorded keeps its file, and so its first date."""
        if getattr(result, "shrunk_case", None) is None:
            return None
        name = getattr(check, "name", check)
        path = self.path_of(name, result.shrunk_case)
        if path.exists():
            try:
                self.read(path)
                return path
            except FailureStoreError:
                pass                  # a damaged file under this case's name: the fresh record replaces it
        entry = Entry(path, name, result.shrunk_case, impl_name, str(device), dtype, result.message or "",
                      result.repro, _now(), _version())
        _write_json(path, entry.record())
        return path

    def _add(self, entry: Entry) -> bool:
        """Add an entry under its own name unless that case is already recorded; True when added."""
        path = self.path_of(entry.check, entry.case)
        if path.exists():
            return False
        _write_json(path, entry._replace(path=path).record())
        return True

    def remove(self, path) -> pathlib.Path:
        """Delete one entry's file (a path inside this store); its check's directory goes when empty."""
        path = pathlib.Path(path)
        real = path.resolve()
        inside = real.parent.parent == self.directory.resolve() and CHECK_NAME.match(real.parent.name)
        if not (inside and path.suffix == ".json" and path.is_file()):
            raise FailureStoreError(f"{path}: not a recorded failure of the store {self.directory} (one is "
                                    f"<store>/<check name>/<hash>.json, as `glmgate db list` prints it)")
        path.unlink()
        self._prune(path.parent)
        return path

    def _prune(self, directory: pathlib.Path) -> None:
        try:
            directory.rmdir()
        except OSError:
            pass                      # not empty (or gone): nothing to tidy

    def clear(self, check=None) -> int:
        """Delete every entry (of one check: a Check record or its name); the number deleted. Files
        that no longer parse go too: clearing is how a stale store is fixed."""
        name = getattr(check, "name", check)
        files = self._files(name)
        for p in files:
            p.unlink()
            self._prune(p.parent)
        return len(files)

    def export(self, path) -> int:
        """Write every entry into one JSON document at `path`; the number written."""
        if pathlib.Path(path).is_dir():
            raise FailureStoreError(f"{path}: is a directory; name the export file (e.g. {path}/failures.json)")
        entries = self.entries()
        _write_json(pathlib.Path(path), {EXPORT_KEY: FORMAT, "glmgate_version": _version(), "exported": _now(),
                                         "entries": [e.record() for e in entries]})
        return len(entries)

    def import_(self, path) -> tuple[int, int]:
        """Merge an export into this store: (added, already recorded). Every entry is validated before
        any is written, so a malformed export changes nothing."""
        path = pathlib.Path(path)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise FailureStoreError(f"{path}: no such file (make one with `glmgate db export FILE`)")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise FailureStoreError(f"{path}: not a glmgate failure export ({e})")
        if not isinstance(doc, dict) or EXPORT_KEY not in doc or not isinstance(doc.get("entries"), list):
            raise FailureStoreError(f"{path}: not a glmgate failure export (expected a JSON object with "
                                    f"{EXPORT_KEY!r} and 'entries', as `glmgate db export` writes)")
        if doc[EXPORT_KEY] != FORMAT:
            raise FailureStoreError(f"{path}: export format {doc[EXPORT_KEY]!r}, this glmgate reads format {FORMAT}")
        entries = [_entry(d, f"{path}: entry {i}") for i, d in enumerate(doc["entries"])]
        added = sum(self._add(e) for e in entries)
        return added, len(entries) - added
