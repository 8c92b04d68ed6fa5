"""`gesim-ros report DB`: the agreement report of a comparator database, as a self-contained HTML
file and a JSON of every figure, plus a one-screen summary in the terminal."""

from __future__ import annotations

from pathlib import Path

from gesim_ros.comparator.store import EpisodeStoreError
from gesim_ros.comparator.report import build_report, text_summary, write_report


def add_arguments(parser) -> None:
    parser.add_argument("db", type=Path, help="comparator SQLite database")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: beside the database)")


def run(args) -> int:
    if not args.db.is_file():
        print(f"gesim-ros report: {args.db}: no such database file; pass the comparator's database path")
        return 2
    try:
        report = build_report(args.db)
        html_path, json_path = write_report(args.db, args.out or args.db.parent / f"{args.db.stem}-report")
    except EpisodeStoreError as exc:
        print(f"gesim-ros report: {exc}")
        return 2
    print(text_summary(report))
    print(f"\nHTML report: {html_path}\nJSON figures: {json_path}")
    return 0
