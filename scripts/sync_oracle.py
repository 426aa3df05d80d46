"""Bring the repository's ``oracle/`` up to date with the workspace's ``../shared/oracle``.

No Paddle counterpart: this is repository tooling. ``oracle/`` holds the facts
recorded from PaddlePaddle 3.3.1 that the tests compare against (see
``oracle/SYNC.md``); new cases arrive in ``../shared/oracle`` first. This
script copies every file that is new or changed there into ``oracle/``, byte
for byte, and prints what it added or changed. Files only in ``oracle/`` are
kept (nothing is deleted). ``__pycache__`` folders and ``.pyc`` files are
skipped.

    python scripts/sync_oracle.py               # copy new and changed files
    python scripts/sync_oracle.py --check       # exit 1 and list them if oracle/ is behind
    python scripts/sync_oracle.py --from DIR    # sync from another folder
"""
import argparse
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(os.path.dirname(ROOT), "shared", "oracle")
DEFAULT_TARGET = os.path.join(ROOT, "oracle")


def source_files(src: str) -> list[str]:
    """Paths (relative to ``src``, ``/``-separated, sorted) of the recorded files under ``src``."""
    out = []
    for folder, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            if not name.endswith(".pyc"):
                out.append(os.path.relpath(os.path.join(folder, name), src).replace(os.sep, "/"))
    return sorted(out)


def differences(src: str, dst: str) -> list[tuple[str, str]]:
    """``("added" | "changed", relpath)`` for every file of ``src`` that ``dst`` lacks or holds differently."""
    out = []
    for rel in source_files(src):
        there = os.path.join(dst, rel)
        if not os.path.isfile(there):
            out.append(("added", rel))
        elif not _same_bytes(os.path.join(src, rel), there):
            out.append(("changed", rel))
    return out


def _same_bytes(a: str, b: str) -> bool:
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def sync(src: str, dst: str) -> list[tuple[str, str]]:
    """Copy the :func:`differences` of ``src`` into ``dst``; returns them."""
    diffs = differences(src, dst)
    for _, rel in diffs:
        target = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), target)
    return diffs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="src", default=DEFAULT_SOURCE, metavar="DIR",
                   help="the folder new cases arrive in (default: ../shared/oracle)")
    p.add_argument("--to", dest="dst", default=DEFAULT_TARGET, metavar="DIR",
                   help="the repository's copy (default: oracle/)")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 and list the files if the copy is behind")
    args = p.parse_args(argv)
    if not os.path.isdir(args.src):
        print(f"sync_oracle: no folder {args.src}", file=sys.stderr)
        return 2
    diffs = differences(args.src, args.dst) if args.check else sync(args.src, args.dst)
    for status, rel in diffs:
        print(f"{status} {rel}")
    if not diffs:
        print(f"{args.dst} is up to date with {args.src}")
        return 0
    if args.check:
        print(f"{args.dst} is behind {args.src} ({len(diffs)} files); run scripts/sync_oracle.py")
        return 1
    print(f"{len(diffs)} files copied from {args.src} to {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
