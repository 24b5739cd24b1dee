"""Damage real input files at random and check that every command fails cleanly or works.

Run by hand after changing a reader (pytest does not collect it):

    python tests/fuzz_inputs.py --seed 1 --cases 60            # inputs from ../shared/data
    python tests/fuzz_inputs.py --data tests/data --cases 30   # the committed fixtures
    python tests/fuzz_inputs.py --folders --cases 40           # committed record folders (run.json, JSONL)

Each case copies one input, damages it and runs a profiler-kit command on it in a fresh process.
Damage: SQLite exports get SQL edits (a table or column dropped; NULL, text, blob, real, huge or
negative values; rows deleted or duplicated), random bytes, a zeroed page or a cut; Kineto traces get
keys dropped or given wrong types, NaN, negative durations, shuffled or no events, or a cut; memory
snapshots get fields dropped or changed (re-pickled as plain data), random bytes or a cut. With
``--folders``, copies of committed record folders get one run.json, calibration.json or JSONL file cut
or its fields dropped or changed, and ``report`` or ``ddp-report`` reads the folder.
A case passes when the command exits 0, exits 1 with a ``skipped`` line per input it could not read and
the report of the rest written (a folder), or exits 2 with one ``Error:`` line and no output written.
Anything else (a traceback, another exit code, a timeout) prints as BAD with the damaged file kept.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiler_kit.analyze.memory_snapshot import load_snapshot_dict  # noqa: E402

ODD_VALUES = ["x", None, [], {}, -1, 1e300, True, 2**70, float("nan")]
SQL_EDITS = {
    "drop table": 'DROP TABLE "{t}"',
    "drop column": 'ALTER TABLE "{t}" DROP COLUMN "{c}"',
    "null": 'UPDATE "{t}" SET "{c}" = NULL WHERE abs(random()) % 3 = 0',
    "text": 'UPDATE "{t}" SET "{c}" = \'abc\' WHERE abs(random()) % 5 = 0',
    "blob": 'UPDATE "{t}" SET "{c}" = X\'ff00fe\' WHERE abs(random()) % 5 = 0',
    "real": 'UPDATE "{t}" SET "{c}" = 1.5 WHERE abs(random()) % 5 = 0',
    "huge": 'UPDATE "{t}" SET "{c}" = 9223372036854775807 WHERE abs(random()) % 5 = 0',
    "negative": 'UPDATE "{t}" SET "{c}" = -5 WHERE abs(random()) % 5 = 0',
    "delete rows": 'DELETE FROM "{t}"',
    "duplicate rows": 'INSERT INTO "{t}" SELECT * FROM "{t}"',
}
READ_TABLES = {  # the tables the nsys reader reads
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS", "StringIds", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU",
    "ThreadNames", "PROCESSES", "META_DATA_EXPORT", "EXPORT_META_DATA",
}  # fmt: skip


def flip_bytes(rng: random.Random, src: Path, dst: Path) -> str:
    data = bytearray(src.read_bytes())
    n = rng.randint(1, 50)
    for _ in range(n):
        data[rng.randrange(100, len(data))] = rng.randrange(256)  # past SQLite's 100-byte header
    dst.write_bytes(bytes(data))
    return f"{n} random bytes"


def cut(rng: random.Random, src: Path, dst: Path) -> str:
    data = src.read_bytes()
    dst.write_bytes(data[: rng.randrange(len(data))])
    return "cut short"


def zero_page(rng: random.Random, src: Path, dst: Path) -> str:
    data = bytearray(src.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    size = 65536 if size == 1 else size
    page = rng.randrange(1, len(data) // size)
    data[page * size : (page + 1) * size] = bytes(size)
    dst.write_bytes(bytes(data))
    return f"page {page} zeroed"


def edit_sqlite(rng: random.Random, src: Path, dst: Path) -> str:
    shutil.copy(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'") if t in READ_TABLES]
    table = rng.choice(tables)
    column = rng.choice([row[1] for row in con.execute(f'PRAGMA table_info("{table}")')])
    edit = rng.choice(list(SQL_EDITS))
    try:
        con.execute(SQL_EDITS[edit].format(t=table, c=column))
        con.commit()
    except sqlite3.Error as err:  # e.g. dropping a column an index uses: the file stays as it was
        return f"SQL {edit} {table}.{column} refused by SQLite ({err})"
    finally:
        con.close()
    return f"SQL {edit} {table}.{column}"


def places(obj) -> list[tuple[object, object]]:
    """(container, key) pairs inside nested dicts and lists (the first 200 items of each list)."""
    found, stack = [], [obj]
    while stack and len(found) < 20_000:
        o = stack.pop()
        items = o.items() if isinstance(o, dict) else enumerate(o[:200]) if isinstance(o, list) else ()
        for key, value in items:
            found.append((o, key))
            stack.append(value)
    return found


def damage_fields(rng: random.Random, doc) -> str:
    """Drop or replace some values anywhere in ``doc``, in place."""
    how = rng.choice(["drop", "replace"])
    spots = places(doc)
    for container, key in rng.sample(spots, min(len(spots), rng.choice([1, 3, 30]))):
        if how == "drop" and isinstance(container, dict):
            container.pop(key, None)
        elif how == "replace" and (isinstance(container, dict) or key < len(container)):
            container[key] = rng.choice(ODD_VALUES)
    return f"fields {how}"


def edit_kineto(rng: random.Random, src: Path, dst: Path) -> str:
    doc = json.loads(gzip.open(src).read())
    events = doc.get("traceEvents", [])
    how = rng.choice(["fields", "no events", "events not a list", "shuffled", "negative durations"])
    if how == "fields":
        how = damage_fields(rng, doc)
    elif how == "no events":
        doc["traceEvents"] = []
    elif how == "events not a list":
        doc["traceEvents"] = {"a": 1}
    elif how == "shuffled":
        rng.shuffle(events)
    else:
        for e in events:
            if isinstance(e, dict) and isinstance(e.get("dur"), int | float) and rng.random() < 0.1:
                e["dur"] = -e["dur"]
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return how


def edit_snapshot(rng: random.Random, src: Path, dst: Path) -> str:
    snapshot = load_snapshot_dict(src)
    how = damage_fields(rng, snapshot)
    dst.write_bytes(pickle.dumps(snapshot))  # plain data only: what SafeUnpickler accepts
    return how


DAMAGE = {  # by input suffix
    ".sqlite": [edit_sqlite, edit_sqlite, flip_bytes, zero_page, cut],
    ".gz": [edit_kineto, edit_kineto, cut],
    ".pickle": [edit_snapshot, edit_snapshot, flip_bytes, cut],
}
COMMANDS = {
    ".sqlite": [["report", "--no-cache", "-o", "{out}"], ["kernels"], ["nvtx", "--format", "csv"]],
    ".gz": [["report", "-o", "{out}"], ["kernels"], ["nvtx"]],
    ".pickle": [["report", "-o", "{out}"], ["memory", "-o", "{out}"]],
}


FOLDERS = {  # committed record folders and the command that reads each
    "examples": "report",
    "benchmarks/results/attention/rec": "report",
    "reports/sweep": "report",
    "reports/ddp": "ddp-report",
}


def damage_json_file(rng: random.Random, path: Path) -> str:
    """Cut ``path`` (JSON or JSON Lines) short, or damage the fields of one of its objects."""
    text = path.read_text()
    if rng.random() < 0.2:
        path.write_text(text[: rng.randrange(len(text))])
        return "cut short"
    if path.suffix == ".json":
        doc = json.loads(text)
        how = damage_fields(rng, doc)
        path.write_text(json.dumps(doc))
        return how
    lines = text.splitlines()
    i = rng.choice([k for k, line in enumerate(lines) if line.strip()])
    row = json.loads(lines[i])
    how = damage_fields(rng, row)
    lines[i] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    return f"{how} in line {i + 1}"


def run_folder_case(src: Path, folder: Path, rng: random.Random) -> str:
    dst = folder / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.html", "*.md"))
    target = rng.choice(sorted(f for f in dst.rglob("*") if f.suffix in (".json", ".jsonl")))
    what = damage_json_file(rng, target)
    return check(
        [FOLDERS[str(src.relative_to(ROOT))], str(dst), "-o", str(folder / "out")],
        folder / "out",
        f"{FOLDERS[str(src.relative_to(ROOT))]} on {target.relative_to(folder)}, {what}",
        dst,
    )


def run_case(src: Path, folder: Path, rng: random.Random) -> str:
    dst = folder / src.name
    what = rng.choice(DAMAGE[src.suffix])(rng, src, dst)
    out = folder / "out"
    args = [a.format(out=out) for a in rng.choice(COMMANDS[src.suffix])]
    return check([args[0], str(dst), *args[1:]], out, f"{args[0]} on {src.name[:40]}, {what}", dst)


def check(args: list[str], out: Path, label: str, dst: Path) -> str:
    """Run ``profiler-kit args``; ok when it works, skips inputs saying so, or fails with one Error line and
    nothing in ``out``."""
    cmd = [sys.executable, "-m", "profiler_kit", *args]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return f"BAD timeout: {label}\n  kept {dst}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("skipped ")]
    written = out.exists() and any(out.iterdir())
    clean_error = proc.returncode == 2 and len(errors) == 1 and not written
    clean_skip = proc.returncode == 1 and skipped and not errors and written
    if ((proc.returncode == 0 or clean_skip) and "Traceback" not in proc.stderr) or clean_error:
        said = errors or skipped
        return f"ok  {proc.returncode}: {label}" + (f"\n      {said[0][:150]}" if said else "")
    return f"BAD exit {proc.returncode}: {label}\n{proc.stderr[-2000:]}\n  kept {dst}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="Folder searched for inputs.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=60)
    p.add_argument("--max-mib", type=float, default=5, help="Skip inputs larger than this.")
    p.add_argument("--folders", action="store_true", help="Damage committed record folders instead (FOLDERS).")
    args = p.parse_args()
    run = run_folder_case if args.folders else run_case
    inputs = (
        [ROOT / f for f in FOLDERS if (ROOT / f).is_dir()]
        if args.folders
        else sorted(
            f
            for suffix in ("*.sqlite", "*.json.gz", "*.pickle")
            for f in args.data.rglob(suffix)
            if f.stat().st_size <= args.max_mib * 2**20
        )
    )
    if not inputs:
        print(f"no inputs under {args.data}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="profiler-kit-fuzz-"))
    plans = [(rng.choice(inputs), work / f"case{i}", random.Random(rng.random())) for i in range(args.cases)]
    for _, folder, _ in plans:
        folder.mkdir()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda plan: run(*plan), plans))
    print("\n".join(results))
    bad = sum(r.startswith("BAD") for r in results)
    print(f"{len(results) - bad} of {len(results)} cases ok; damaged files in {work}")
    if not bad:
        shutil.rmtree(work)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
