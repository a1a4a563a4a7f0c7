"""Child of _hostile_run.run_hostile (a script, never imported by pytest): one bounded action, one JSON result.

    python _hostile_child.py api|cli RESULT_FILE RLIMIT_AS ACTION_ARGS...

Sets RLIMIT_AS first, then imports varstore, so the limit covers every allocation the action makes.
"""

from __future__ import annotations

import json
import resource
import sys
import traceback
from typing import Any


def _peak_mb() -> float:
    """This process's peak RSS in MiB: VmHWM. (ru_maxrss is no use here: Linux carries the parent's peak
    into it across fork/vfork and exec, so a child of a 1 GB pytest would report 1 GB.)"""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _api(action: str, args: list[str]) -> Any:
    import numpy as np

    import varstore

    if action == "read_all":
        with varstore.open_checkpoint(args[0]) as reader:
            names = list(reader.keys())
            for name in names:
                np.asarray(reader[name])
            return names
    if action == "ls":
        with varstore.open_checkpoint(args[0]) as reader:
            names = list(reader.keys())
            for name in names:
                reader.info(name)
            return names
    if action == "load":
        return sorted(varstore.load(args[0]))
    if action == "verify":
        with varstore.open_checkpoint(args[0]) as reader:
            reader.verify()
            return sorted(reader.keys())
    if action == "restore_latest":
        target: dict[str, Any] = {}
        result = varstore.CheckpointManager(args[0]).restore_latest(target, strict=False)
        return None if result is None else sorted(result.restored)
    if action == "manager_save":
        manager = varstore.CheckpointManager(args[0], max_to_keep=int(args[1]) if len(args) > 1 else 2)
        return str(manager.save({"w": np.arange(4.0)}, step=int(args[2]) if len(args) > 2 else 1))
    raise SystemExit(f"unknown action {action!r}")


def main() -> None:
    kind, result_file, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[4:]
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    report: dict[str, Any] = {}
    if kind == "cli":
        from varstore_cli.main import cli

        try:
            cli.main(args=args, prog_name="varstore", standalone_mode=True)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        report = {"status": f"exit{code}"}
    else:
        from varstore.errors import VarstoreError

        try:
            report = {"status": "ok", "result": _api(args[0], args[1:])}
        except VarstoreError as err:
            report = {"status": "typed", "error": type(err).__name__, "message": str(err)}
        except BaseException as err:  # noqa: BLE001 - an untyped error is the finding this reports
            report = {"status": "untyped", "error": type(err).__name__, "message": str(err),
                      "traceback": traceback.format_exc()}
    report["peak_rss_mb"] = _peak_mb()
    with open(result_file, "w", encoding="utf-8") as out:
        json.dump(report, out)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
