"""Which implementation runs: the compiled kernels (Cython) or their pure-Python twins; the one selector.

As aiokafka does with `aiokafka/record/_crecords/`, the hot loops have compiled twins built from Cython at
install time when a C compiler is there: one kernel module beside each Python module it mirrors
(`records/_cbatch.pyx` beside `batch.py`, `_cscan.pyx` beside `scan.py`, `_cseek.pyx`, `_csweep.pyx`,
`_cbuffers.pyx`, `_ckeyhash.pyx`, `_cverify.pyx`, `_cappend_check.pyx`, `protocol/_cproduce.pyx` beside
`produce_run.py`, `client/_csend.pyx` beside `sendpath.py`), sharing their C-level helpers (the record walk,
varints, CRC-32C) through `records/_walk.pxd`.

Rule 1: each kernel is chosen once, when the module it mirrors is imported (`load`): the compiled one,
        unless the environment variable SPARKLOG_NO_EXTENSIONS is set to anything but "" or "0" (read here
        and nowhere else: `extensions_disabled`), or the kernel was not built, or was built from an older
        source (a name its twin calls is missing).
Rule 2: both give the same bytes, values and errors. The pure-Python twin is the authority: the compiled one
        hands it every input its fast path does not take (see `_cbatch`'s docstring).
Rule 3: the record kernels other than `_cbatch` run exactly while the compiled codec is the active one
        (`batch.CODEC`; `RecordKernel.active`): a test that switches the codec (`batch.use`) switches them all.
Rule 4: `report()` says, per kernel chosen in this process, whether it is compiled and why not;
        `sparklog.records.IMPLEMENTATION` names the active record codec, "cython" or "python".
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, NamedTuple

from crc32c import crc32c

from sparklog.records.compression import codec_id, compress

NO_EXTENSIONS_VARIABLE = "SPARKLOG_NO_EXTENSIONS"
CYTHON = "cython"
PYTHON = "python"
DISABLED = f"{NO_EXTENSIONS_VARIABLE} is set"
# The record modules with a kernel: imported by report() so that it covers them all.
RECORD_KERNEL_USERS = ("batch", "scan", "seek", "sweep", "buffers", "keyhash", "verify", "append_check")


@dataclass(frozen=True)
class KernelStatus:
    """One kernel as `load` chose it (Rule 4)."""

    module: str  # the compiled module's name, e.g. "sparklog.records._cscan"
    compiled: bool
    unavailable: str | None  # why the pure-Python twin runs; None when the compiled one does


_chosen: dict[str, KernelStatus] = {}


def extensions_disabled() -> bool:
    """Rule 1's environment variable: the one place sparklog reads it."""
    return os.environ.get(NO_EXTENSIONS_VARIABLE, "") not in ("", "0")


def load(module: str, what: str, required: tuple[str, ...] = ()) -> ModuleType | None:
    """The compiled kernel `module` (`what` it is, for the messages) with every name in `required`, or None
    when its pure-Python twin is to run (Rule 1); either way recorded for `report()`."""
    compiled, why = _import(module, what, required)
    _chosen[module] = KernelStatus(module, compiled is not None, why)
    return compiled


def _import(module: str, what: str, required: tuple[str, ...]) -> tuple[ModuleType | None, str | None]:
    if extensions_disabled():
        return None, DISABLED
    try:
        compiled = importlib.import_module(module)
    except ImportError as exc:
        return None, f"the compiled {what} was not built ({exc})"
    missing = [name for name in required if not hasattr(compiled, name)]
    if missing:
        return None, f"the compiled {what} is older than its source; rebuild it with scripts/setup.sh (no {missing[0]})"
    return compiled, None


def report_of(module: str) -> str | None:
    """Why the kernel `module` is not the compiled one (None when it is), as `load` chose it."""
    return _chosen[module].unavailable


class RecordKernel:
    """A record kernel that runs exactly while the compiled codec does (Rule 3): `active` is its module
    then, else None, one attribute read on the hot paths."""

    __slots__ = ("module", "active", "_loaded")

    def __init__(self, module: str, what: str, required: tuple[str, ...]) -> None:
        self.module = module
        self._loaded = load(module, what, required)
        if self._loaded is not None and not _codec_compiled:
            _chosen[module] = KernelStatus(module, False, "the compiled codec is not the active one")
        self.active: ModuleType | None = None
        self.follow(_codec_compiled)
        _record_kernels.append(self)

    def follow(self, codec_compiled: bool) -> None:
        """Run while the compiled codec does. A caller that makes it active itself (`batch.use`, as the tests
        do to run both twins) gets the kernel even under SPARKLOG_NO_EXTENSIONS, as it gets the codec."""
        if codec_compiled and self._loaded is None:
            try:
                self._loaded = importlib.import_module(self.module)
            except ImportError:  # not built: its pure-Python twin runs, as report() says
                pass
        self.active = self._loaded if codec_compiled else None


_record_kernels: list[RecordKernel] = []
_codec_compiled = False


def follow_codec(codec_compiled: bool) -> None:
    """`batch.use`: the record kernels follow the codec it makes active (Rule 3)."""
    global _codec_compiled
    _codec_compiled = codec_compiled
    for kernel in _record_kernels:
        kernel.follow(codec_compiled)


def report() -> tuple[KernelStatus, ...]:
    """Every kernel chosen so far in this process, the record kernels always among them (Rule 4)."""
    for name in RECORD_KERNEL_USERS:
        importlib.import_module(f"sparklog.records.{name}")
    return tuple(_chosen.values())


def describe(statuses: tuple[KernelStatus, ...]) -> str:
    """One line per kernel: "<module>: compiled" or "<module>: pure Python (<why>)"."""
    return "\n".join(f"{status.module}: " + ("compiled" if status.compiled else f"pure Python ({status.unavailable})")
                     for status in statuses)


class Codec(NamedTuple):
    """One implementation of the functions `batch` switches between."""

    name: str
    encode_varint: Callable[..., Any]
    decode_varint: Callable[..., Any]
    encode_records: Callable[..., Any]
    decode_columns: Callable[..., Any]
    build_batch: Callable[..., Any]
    decode_records: Callable[..., Any]
    decode_chunk: Callable[..., Any]


CODEC_FUNCTIONS = Codec._fields[1:]
CODEC_MODULE = "sparklog.records._cbatch"


def compiled(pure: Codec, record_columns: type) -> Codec:
    """The compiled codec, deferring to `pure`; ImportError when the extension was not built."""
    kernel = importlib.import_module(CODEC_MODULE)
    kernel.bind(pure, record_columns, codec_id, compress, crc32c, time.time_ns)
    return Codec(CYTHON, *(getattr(kernel, name) for name in CODEC_FUNCTIONS))


def select(pure: Codec, record_columns: type) -> tuple[Codec, str | None]:
    """(the codec to run, why the compiled one is not it, or None when it is); recorded for `report()`."""
    kernel = load(CODEC_MODULE, "codec", ("bind", *CODEC_FUNCTIONS))
    if kernel is None:
        return pure, _chosen[CODEC_MODULE].unavailable
    try:
        return compiled(pure, record_columns), None
    except (TypeError, AttributeError) as exc:  # an extension built from an older _cbatch.pyx
        why = f"the compiled codec is older than its source; rebuild it with scripts/setup.sh ({exc})"
        _chosen[CODEC_MODULE] = KernelStatus(CODEC_MODULE, False, why)
        return pure, why
