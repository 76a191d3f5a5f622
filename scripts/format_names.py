"""Fail when code outside a format's package looks a format up by its name (``CODECS["chat"]``,
``FORMATS["messages"]``): a format is named in its package and in ``formats/registry.py`` only;
the rest takes it from the route it serves (``Endpoint.format``) or the client's headers
(``formats.format_for_client``). The import-linter contract in pyproject.toml holds the imports.

Usage: python scripts/format_names.py [ROOT]   (default: src/modelgate)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: Packages that may name a format: the formats themselves, and the features of one format
#: (stored Responses state and the Responses WebSocket).
ALLOWED = ("formats", "gateway/state", "gateway/websocket")
LOOKUP = re.compile(r"\b(?:CODECS|FORMATS)\[\s*['\"]")


def offenders(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(ALLOWED):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if LOOKUP.search(line):
                found.append(f"{path}:{number}: {line.strip()}")
    return found


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "src/modelgate")
    found = offenders(root)
    for line in found:
        print(f"a format looked up by name outside its package: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
