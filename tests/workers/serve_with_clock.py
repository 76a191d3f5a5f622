"""``modelgate serve --workers N`` whose workers share a ``FileClock`` (for tests that move time):
``python -m tests.workers.serve_with_clock CONFIG DATA_DIR CLOCK_FILE``."""

from __future__ import annotations

import sys
from pathlib import Path

from modelgate.cli.context import Options
from modelgate.server.app import create_app
from modelgate.server.supervisor import supervise
from modelgate.telemetry.logs import configure_logging
from tests.workers.clock import FileClock


def main() -> int:
    config, data_dir, clock_file = (Path(arg) for arg in sys.argv[1:4])
    settings = Options(config, data_dir).settings()
    configure_logging(settings.log_level, settings.log_format, requests=settings.request_log)
    return supervise(settings, create_app(settings), clock=FileClock(clock_file))


if __name__ == "__main__":
    raise SystemExit(main())
