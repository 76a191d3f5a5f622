"""Fail when a Python module passes the size cap (CONTRIBUTING.md: aim under 400 lines; 600 is the cap).

Usage: python scripts/module_size.py [--max N] [PATH ...]   (default: src/modelgate, N = 600)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def oversized(roots: list[Path], limit: int) -> list[tuple[Path, int]]:
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > limit:
                found.append((path, lines))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max", type=int, default=600)
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("src/modelgate")])
    args = parser.parse_args()
    found = oversized(args.paths, args.max)
    for path, lines in found:
        print(f"{path}: {lines} lines (the cap is {args.max}); split it by concept")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
