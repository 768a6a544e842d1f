# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""`Producer.send()`'s common case in C (Cython): the compiled twin of `sparklog.client.sendpath`.

    SendPath.send(topic, value=None, key=None, headers=None, partition=None, timestamp=None) -> RecordFuture
    FutureSlots: the two slots of a `RecordFuture` (its batch and its index), made without an __init__ call
    BatchSlots: a batch's records and size, which `send` reads and writes as C fields

Rule 1: the behaviour is sendpath.py's, case for case: the same records in the same batches, the same
        futures, the same calls to the slow path (`slow_send`, `append`) for everything else.
Rule 2: the fast path takes only what it can finish without waiting: an open producer, an exact `str`
        topic, exact `bytes` (or None) key and value, no headers, an int or absent timestamp and partition,
        a topic whose partition count is known, and room in `buffer.memory` (in the partition's open batch,
        or a new one: Rule 4). Everything else goes whole to the slow path, which decides (its error
        messages have one author).
Rule 3: what it makes is not tracked by the cyclic garbage collector (Python's own tuples of atoms are
        untracked too, lazily): the record tuple (bytes, None, an int) cannot be in a cycle, and the future
        holds only its batch, so a cycle through it needs a callback that holds the future, which the batch
        drops when it completes (futures.py Rule 1: every batch completes, if only when the producer closes).
        An application that keeps a million futures otherwise pays ~0.3 µs a record in full collections.
Rule 4: it makes a partition's new batch whole (sendpath.py's Rule 4): at `batch.num.messages=1` the
        record's closed batch, otherwise the partition's open batch with its first record.
Rule 5: the batches it makes, and every batch's record list, are not tracked by the cyclic collector either
        (`untrack_batch`): an open or acknowledged batch holds only atoms and its record list, which holds
        only record tuples; a batch is tracked again (`track_batch`, futures.py) before it takes what could
        close a cycle through it, a callback or an error (whose traceback holds frames). Without this every
        batch a kept future holds (a million futures: 20,000 batches) survives into the oldest generation
        and sets off full collections, which walked the futures and the records: 0.7 s of a 5 s benchmark.
Rule 6: the accumulator's state is guarded by its `SendLock`; `send` keeps it with the GIL instead of
        the lock's semaphore (two atomic operations a record, ~0.13 µs here) when no thread is inside a
        section it entered through `acquire()` (`held` is false): its own section then allocates no
        object the collector counts (the future and any new batch are made before it), calls no Python
        code (the keys of `_open` hold exact strs: the producer turns a str subclass into a str; batches
        hash as objects do) and never
        releases the GIL, so no other thread runs until it ends. A thread that took the lock through
        `acquire()` sets `held` while it holds it (a waiter whose semaphore wait ended sets it when it has
        the GIL back, which is after any such section); when `held` is set, `send` waits on the lock as
        everyone does.
"""

from cpython.bytes cimport PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_CheckExact
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_SIZE
from cpython.long cimport PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.pythread cimport (NOWAIT_LOCK, PY_LOCK_ACQUIRED, WAIT_LOCK, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock, PyThread_release_lock,
                               PyThread_type_lock)
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec

cdef extern from "pythread.h":
    int PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds, int intr_flag) nogil
    const long long PY_TIMEOUT_MAX

cdef extern from *:
    """
    /* a FutureSlots subclass's instance by its (inherited) tp_new: no __init__ call, no method lookup */
    static PyObject* sparklog_new_instance(PyObject* type, PyObject* args) {
        return ((PyTypeObject*)type)->tp_new((PyTypeObject*)type, args, NULL);
    }
    """
    object sparklog_new_instance(object type, object args)

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object op)
    void PyObject_GC_Track(object op)
    bint PyObject_GC_IsTracked(object op)

cdef tuple _NO_ARGS = ()


cdef class FutureSlots:
    """The base of `futures.RecordFuture`: its batch and the record's index in it."""

    cdef public object _batch
    cdef public Py_ssize_t _index

    def __init__(self, batch, Py_ssize_t index):
        self._batch = batch
        self._index = index


cdef class BatchSlots:
    """The base of `futures.BatchFuture` and `accumulator.ProducerBatch`: their fields, as C fields (`send`
    reads and writes `records` and `size`, and makes a `batch.num.messages=1` batch whole)."""

    cdef public object topic, partition, base_offset, log_append_time, error, _done, _callbacks, records
    cdef public object created, attempts, retry_at, payload, producer_id, base_sequence
    cdef public Py_ssize_t size


cdef class SendLock:
    """The accumulator's lock: `threading.Lock`'s interface (and so `threading.Condition`'s), which `send`
    keeps with the GIL alone when no one holds it (Rule 6). Blocking waits release the GIL; unlike `threading.Lock` they
    are not interrupted by signals (it is held only for a few list and dict operations)."""

    cdef PyThread_type_lock lock
    cdef bint held

    def __cinit__(self):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError("cannot allocate a lock")

    def __dealloc__(self):
        if self.lock != NULL:
            if self.held:
                PyThread_release_lock(self.lock)
            PyThread_free_lock(self.lock)

    def acquire(self, bint blocking=True, double timeout=-1):
        cdef long long micros = -1
        cdef int acquired
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        if timeout != -1:
            if timeout * 1e6 > PY_TIMEOUT_MAX:
                raise OverflowError("timeout value is too large")
            micros = <long long>(timeout * 1e6)
        if not blocking:
            micros = 0
        acquired = PyThread_acquire_lock_timed(self.lock, 0, 0)
        if not acquired and micros != 0:
            with nogil:
                acquired = PyThread_acquire_lock_timed(self.lock, micros, 0)
        if acquired == PY_LOCK_ACQUIRED:
            self.held = True
            return True
        return False

    def release(self):
        if not self.held:
            raise RuntimeError("release unlocked lock")
        self.held = False
        PyThread_release_lock(self.lock)

    def locked(self):
        return self.held

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    cdef inline void take(self) noexcept:
        if not PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self.lock, WAIT_LOCK)
        self.held = True

    cdef inline void give(self) noexcept:
        self.held = False
        PyThread_release_lock(self.lock)


cdef inline double monotonic() noexcept:
    """time.monotonic() without the call (the same clock)."""
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec + now.tv_nsec * 1e-9


cdef long long _last_ms = -1
cdef object _last_ms_int = None


cdef inline object now_ms():
    """time.time_ns() // 1_000_000 without the call; the int object is shared by the records stamped in the
    same millisecond (one allocation per millisecond, not per record)."""
    global _last_ms, _last_ms_int
    cdef timespec now
    cdef long long ms
    clock_gettime(CLOCK_REALTIME, &now)
    ms = <long long>now.tv_sec * 1000 + now.tv_nsec // 1_000_000
    if ms != _last_ms:
        _last_ms_int = ms
        _last_ms = ms
    return _last_ms_int


cdef class SendPath:
    """The accumulator's state that `send()` touches (see sendpath.py, whose docstring this twin follows)."""

    cdef public object _lock, _open, closed_listener, _on_ready, _incomplete
    cdef readonly object ready  # (readonly: `send` holds its bound append)
    cdef public object metadata, partitioner, slow_send
    cdef type _future_type, _batch_type
    cdef public Py_ssize_t batch_size, max_records, buffer_memory, _used
    cdef public bint closed
    cdef object _acquire, _release, _ready_append
    cdef SendLock _send_lock  # the lock when it is a SendLock (taken in C), else None
    cdef object _last_topic, _last_partition, _last_tp  # the last (topic, partition) key, reused while it repeats

    def init_send_path(self, batch_size, max_records, buffer_memory, lock, ready):
        self.batch_size = batch_size
        self.max_records = max_records
        self.buffer_memory = buffer_memory
        self._lock = lock
        self._acquire = lock.acquire
        self._release = lock.release
        self._send_lock = lock if type(lock) is SendLock else None
        self._ready_append = ready.append  # (a bound method: calling it allocates nothing, Rule 6)
        self._open = {}
        self._incomplete = set()
        self.ready = ready
        self._used = 0
        self.closed = False

    @property
    def future_type(self):
        return self._future_type

    @future_type.setter
    def future_type(self, value):
        if not issubclass(value, FutureSlots):  # new_future relies on it
            raise TypeError(f"future_type must subclass FutureSlots, not {value!r}")
        self._future_type = value

    @property
    def batch_type(self):
        return self._batch_type

    @batch_type.setter
    def batch_type(self, value):
        if not issubclass(value, BatchSlots):  # new_alone relies on it
            raise TypeError(f"batch_type must subclass BatchSlots, not {value!r}")
        if value.__hash__ is not BatchSlots.__hash__ or value.__eq__ is not BatchSlots.__eq__:
            raise TypeError("batch_type must keep object's hash and equality (send's section runs no Python: Rule 6)")
        self._batch_type = value

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp=None):
        """`Producer.send`: its common case here, everything else handed to `slow_send` (sendpath.py)."""
        cdef Py_ssize_t size = RECORD_OVERHEAD, count, index
        cdef PyObject* found
        cdef BatchSlots batch
        cdef SendLock fast_lock
        cdef bint opened = False, closed = False, locked = False
        cdef list records
        cdef set incomplete
        cdef FutureSlots future
        if headers is not None and not headers:
            headers = None
        if (self.closed or headers is not None or not (value is None or PyBytes_CheckExact(value))
                or not (key is None or PyBytes_CheckExact(key)) or not PyUnicode_CheckExact(topic)):
            return self.slow_send(topic, value, key, headers, partition, timestamp)
        counts = self.metadata.partition_counts
        found = PyDict_GetItem(counts, topic)
        count = -1 if found == NULL else (<object>found if PyLong_CheckExact(<object>found) else -1)
        if partition is None:
            if found == NULL:
                return self.slow_send(topic, value, key, headers, partition, timestamp)
            partition = 0 if count == 1 else self.partitioner.partition(topic, key, <object>found)
        elif not PyLong_CheckExact(partition) or partition < 0 or (found != NULL and partition >= <object>found):
            return self.slow_send(topic, value, key, headers, partition, timestamp)
        if timestamp is None:
            timestamp = now_ms()
        elif not PyLong_CheckExact(timestamp):
            return self.slow_send(topic, value, key, headers, partition, timestamp)
        if value is not None:
            size += PyBytes_GET_SIZE(value)
        if key is not None:
            size += PyBytes_GET_SIZE(key)
        record = (key, value, None, timestamp)
        PyObject_GC_UnTrack(record)  # only bytes, None and an int: no cycle can pass through it (Rule 3)
        if topic is self._last_topic and partition is self._last_partition:
            tp = self._last_tp
        else:
            tp = self._last_tp = (topic, partition)
            self._last_topic, self._last_partition = topic, partition
        # Rule 6: everything the section needs is allocated before it: the future, and a new batch when the
        # partition has none open (a hint: if one opened meanwhile, the spare is dropped)
        future = new_future(self._future_type)
        spare = None
        found = PyDict_GetItem(self._open, tp)
        if found == NULL:
            spare = new_alone(self._batch_type, topic, partition, record, size)
        fast_lock = self._send_lock
        if fast_lock is None:
            self._acquire()
            locked = True
        elif fast_lock.held:  # a thread took it through acquire() and is inside its section: wait for it
            fast_lock.take()
            locked = True
        try:
            if locked or spare is not None:  # other threads may have run since the look above
                found = PyDict_GetItem(self._open, tp)
            if found == NULL and spare is not None and self._used + size + BATCH_OVERHEAD <= self.buffer_memory:
                # a new batch (Rule 4): accumulator.append's _open_batch, or its _append_alone
                batch = spare
                self._used += size + BATCH_OVERHEAD
                incomplete = self._incomplete
                incomplete.add(batch)
                index = 0
                if self.max_records > 1 and batch.size < self.batch_size:
                    self._open[tp] = batch
                    opened = True
                else:
                    self._ready_append(batch)
                    closed = True
            elif found == NULL or self._used + size > self.buffer_memory:
                batch = None  # memory to wait for (or no spare): the accumulator's append, after the section
            else:
                batch = <BatchSlots?>found
                self._used += size
                records = batch.records
                records.append(record)
                index = PyList_GET_SIZE(records) - 1
                batch.size += size
                if batch.size >= self.batch_size or index + 1 >= self.max_records:
                    del self._open[tp]
                    self._ready_append(batch)
                    closed = True
            if batch is not None:
                future._batch = batch
                future._index = index
        finally:
            if locked:
                if fast_lock is not None:
                    fast_lock.give()
                else:
                    self._release()
        if batch is None:  # memory to wait for: the accumulator's append does it
            return self.append(topic, partition, record, size - RECORD_OVERHEAD)
        if opened:  # the sender must learn this new batch's linger deadline
            if self._on_ready is not None:
                self._on_ready()
            return future
        if not closed:
            return future
        if self.closed_listener is not None and count != 1:  # one partition: no sticky partition to move
            self.closed_listener(topic, partition)
        if self._on_ready is not None:
            self._on_ready()
        return future


cdef BatchSlots new_alone(type batch_type, topic, partition, tuple record, Py_ssize_t size):
    """A batch of one record, made whole here: `ProducerBatch.__init__`'s fields and one record; untracked
    (Rule 5)."""
    cdef BatchSlots batch = <BatchSlots>sparklog_new_instance(batch_type, _NO_ARGS)
    cdef list records = [record]
    PyObject_GC_UnTrack(records)
    PyObject_GC_UnTrack(batch)
    batch.topic, batch.partition, batch.base_offset, batch.log_append_time = topic, partition, None, -1
    batch.error, batch._done, batch._callbacks, batch.records = None, False, None, records
    batch.size = BATCH_OVERHEAD + size
    batch.created, batch.attempts, batch.retry_at, batch.payload = monotonic(), 0, 0.0, None
    batch.producer_id = batch.base_sequence = -1
    return batch


def untrack_batch(BatchSlots batch):
    """Take `batch` and its record list (a list, or None) out of the cyclic collector's view (Rule 5)."""
    if batch.records is not None and type(batch.records) is list:
        PyObject_GC_UnTrack(batch.records)
    PyObject_GC_UnTrack(batch)


def track_batch(BatchSlots batch):
    """Show `batch` to the cyclic collector again, before it takes a callback or an error (Rule 5)."""
    if not PyObject_GC_IsTracked(batch):
        PyObject_GC_Track(batch)


cdef inline FutureSlots new_future(type future_type):
    """A future handle to fill in (its batch None until then), untracked (Rule 3)."""
    cdef FutureSlots future = <FutureSlots>sparklog_new_instance(future_type, _NO_ARGS)
    PyObject_GC_UnTrack(future)  # Rule 3: the collector never walks the futures an application keeps
    return future


cdef enum:
    RECORD_OVERHEAD = 12  # accumulator.RECORD_OVERHEAD, checked equal there at import
    BATCH_OVERHEAD = 61  # accumulator.BATCH_OVERHEAD, likewise
