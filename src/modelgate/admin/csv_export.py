"""CSV answers of the audit log, the ledger and statements: RFC 4180 with a header row, and every
text cell a spreadsheet would read as a formula (``=``, ``+``, ``-``, ``@``, tab, carriage
return at its start) prefixed with ``'`` (CSV injection through a note or a name)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from modelgate.admin.http import NO_STORE

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


#: A signed decimal amount (``-2.500000``): a number to a spreadsheet, never a formula.
_AMOUNT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def safe_cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _AMOUNT.fullmatch(value):
        return "'" + value
    return value


def wants_csv(request: Request) -> bool:
    """``?format=csv``, or an ``Accept`` that names text/csv before JSON."""
    if request.query_params.get("format") == "csv":
        return True
    accept = request.headers.get("accept", "")
    return "text/csv" in accept and "application/json" not in accept


def csv_response(columns: Sequence[str], rows: Iterable[Sequence[Any]], filename: str) -> Response:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([safe_cell(v) for v in row])
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={**NO_STORE, "content-disposition": f'attachment; filename="{filename}"'},
    )
