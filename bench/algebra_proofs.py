"""The exhaustive algebra proofs of the exact rules (tests/test_algebra_proofs.py): per family,
the combinations its algebra was asked about, the rewrites compared with the original (each
concretisation of a symbolic dim counted), whether it holds, and its CPU time.

    python bench/algebra_proofs.py            # this checkout (src/ and tests/ beside this script)
    python bench/algebra_proofs.py --markdown # the table as Markdown (docs/certificates.md)

CPU time (user + system of this process) is the least disturbed by other processes on a shared
machine; CI runs the same proofs under pytest, spread over its workers (`-n 2`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from test_algebra_proofs import PROOFS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    rows, total = [], 0.0
    for prove in PROOFS:
        start = time.process_time()
        proof = prove()
        seconds = time.process_time() - start
        total += seconds
        rows.append((proof.family, proof.checked, proof.compared, "yes" if proof.holds else "NO", seconds))
    if args.markdown:
        print("| family | combinations | rewrites compared | holds | CPU s |")
        print("|---|---:|---:|---|---:|")
        for family, checked, compared, holds, seconds in rows:
            print(f"| {family} | {checked:,} | {compared:,} | {holds} | {seconds:.2f} |")
        print(f"| all | {sum(r[1] for r in rows):,} | {sum(r[2] for r in rows):,} | | {total:.1f} |")
        return
    table = Table(title="exhaustive algebra proofs of the exact rules")
    for column in ("family", "combinations", "rewrites compared", "holds", "CPU s"):
        table.add_column(column, justify="left" if column == "family" else "right")
    for family, checked, compared, holds, seconds in rows:
        table.add_row(family, f"{checked:,}", f"{compared:,}", holds, f"{seconds:.2f}")
    table.add_row("all", f"{sum(r[1] for r in rows):,}", f"{sum(r[2] for r in rows):,}", "", f"{total:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
