"""The serving process's heap kept for large bodies (``keep_body_buffers``).

Every large request makes the serving process allocate buffers of its body's size: the body
joined from its chunks, the spliced body sent upstream, the answers read back. glibc's malloc
maps buffers above a threshold (128 KiB, raised on the fly up to the size of the last freed one)
as fresh pages and returns them when freed, and trims the top of its heap once more than twice
that threshold is free there: so each 1 MiB request faulted in and zeroed 500-700 new pages
(2-3 MiB) and gave them back with ``brk``, about a third of the serving process's time for that
request. Kept in the heap, the same pages serve the next request.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("modelgate.offload")

# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's largest mmap threshold on 64-bit systems.
MAX_MMAP_THRESHOLD = 32 << 20
#: How much free heap is kept, as a multiple of the largest buffer kept in it.
KEPT_BUFFERS = 4


def keep_body_buffers(largest: int) -> bool:
    """Have malloc serve buffers up to ``largest`` bytes (``server.body_arena_bytes``) from the
    heap and keep up to ``KEPT_BUFFERS`` times that much free there between requests (the memory
    stays with the process instead of being faulted in again). Call once, in the serving process
    (not in the body workers: their parse allocates in its own way, and measured faster with
    glibc's adaptive thresholds). 0, or a C library that is not glibc: nothing changes. Whether
    the thresholds were set."""
    if largest <= 0:
        return False
    try:
        libc = ctypes.CDLL(None)  # the C library the interpreter runs on
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):
        return False  # not glibc (musl's mallopt does nothing): its defaults stay
    kept = min(largest, MAX_MMAP_THRESHOLD)
    mallopt = libc.mallopt
    done: bool = (
        mallopt(_M_MMAP_THRESHOLD, kept) == 1 and mallopt(_M_TRIM_THRESHOLD, KEPT_BUFFERS * kept) == 1
    )
    if not done:
        log.warning("could not keep body buffers in the heap (mallopt refused %d bytes)", kept)
    return done
