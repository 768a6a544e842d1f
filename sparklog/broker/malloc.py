"""The broker process keeps the memory it frees for its next requests instead of giving it back to the kernel.

Why: a Produce request of about 1 MB is received, decoded and written into buffers of that size, freed when
the request is answered. glibc serves an allocation that large with its own mmap() (or trims the heap top
after a large free), so every request took fresh pages from the kernel and paid a page fault for each 4 KiB
of them: 405,000-516,000 minor faults per GB produced (benchmarks/scale.py's thread line), charged as the
broker's system time, and dearer as the machine's free memory changes (a VM backs a page the guest has not
touched lately on first write). With these two settings a run takes under 1,000 faults per GB, and the
broker's CPU per GB produced fell from 3.0 to 1.7-1.8 CPU-s, within 8% from GB 1 to GB 2 (two runs of
`scale.py --gb 2` on a loaded machine, one before and one after).

Rule 1: allocations below MMAP_THRESHOLD come from the heap, and the heap top is trimmed only above
        TRIM_THRESHOLD: what the process holds is bounded by its peak use plus TRIM_THRESHOLD.
Rule 2: only on glibc (mallopt(3)); elsewhere nothing changes, and `keep_freed_memory()` says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # mallopt(3) parameter numbers, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit): a request's buffers fit
TRIM_THRESHOLD = 256 * 1024 * 1024  # freed memory kept at the heap top, at most


def keep_freed_memory() -> bool:
    """Set Rule 1's thresholds; False when this is not glibc or it refused them."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
