# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The commit log's hot put state and its plain put in one call, compiled: the twin of
``_put_core.py`` (the reference; its docstring says what is plain and what the put does).

Here a topic's queue offsets are a C array (queue ids below 4096; others, and values that are
not int64 offsets, in a dictionary beside it), its put counters C fields, and ``put`` converts
the message's fields once, packs the record into the mapped file, moves the offset and the
counters and, when dispatch runs inline, writes the consume-queue unit itself with
``ReputMessageService.dispatch_plain``'s bookkeeping; whatever that function would not do at
once (a unit that is not the next of its queue's last file, the index's first file, the
checkpoint's times) goes to ``inline_plain``, the general inline dispatch.

Every length and position is checked before a byte is written: the body and tail against the
record's total, the record against the target's buffer, the unit against the queue file's
buffer; a check that fails before the record is written returns None (nothing written: the
general path decides and raises what it raises).
"""

import logging

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from rocketstore.store._big_endian cimport put32, put64

from rocketstore.store.log._message import Message, PutMessageResult, PutMessageStatus
from rocketstore.store.log._record import DEFAULT_BORN_HOST, DispatchRequest

cdef object _log = logging.getLogger("rocketstore.store.queue._reput")
cdef object _Message = Message
cdef object _PutMessageResult = PutMessageResult
cdef object _DispatchRequest = DispatchRequest
cdef object _PUT_OK = PutMessageStatus.PUT_OK
cdef object _new_tuple = tuple.__new__
cdef bytes _BORN_HOST = DEFAULT_BORN_HOST
cdef int32_t _MAGIC_V1 = <int32_t>0xDAA320A7
DEF HEAD_SIZE = 88
DEF UNIT_SIZE = 20
DEF DENSE_LIMIT = 4096  # queue ids below it have a C slot
DEF TRANSACTION_MASK = 0xC


cdef class _TopicState:
    """One topic's queue offsets (dense: -1 where a queue is not in the table) and counters."""

    cdef int64_t *offs
    cdef Py_ssize_t cap
    cdef dict sparse  # queue id → offset, for what has no dense slot
    cdef int64_t count
    cdef int64_t nbytes
    cdef bint counted

    def __cinit__(self):
        self.offs = NULL
        self.cap = 0
        self.sparse = {}

    def __dealloc__(self):
        PyMem_Free(self.offs)

    cdef int grow(self, Py_ssize_t qid) except -1:
        cdef Py_ssize_t n = max(qid + 1, self.cap * 2, 8)
        cdef Py_ssize_t i
        if n > DENSE_LIMIT:
            n = DENSE_LIMIT
        p = <int64_t *>PyMem_Realloc(self.offs, n * sizeof(int64_t))
        if p == NULL:
            raise MemoryError()
        for i in range(self.cap, n):
            p[i] = -1
        self.offs = p
        self.cap = n
        return 0

    cdef inline bint dense(self, object qid):
        return type(qid) is int and 0 <= qid < DENSE_LIMIT

    cdef object get(self, object qid):
        """The queue's offset, or None when it is not in the table."""
        cdef Py_ssize_t q
        if self.dense(qid):
            q = qid
            if q < self.cap and self.offs[q] >= 0:
                return self.offs[q]
        return self.sparse.get(qid) if self.sparse else None

    cdef int set(self, object qid, object value) except -1:
        cdef Py_ssize_t q
        if self.dense(qid) and type(value) is int and 0 <= value <= 0x7FFFFFFFFFFFFFFF:
            q = qid
            if q >= self.cap:
                self.grow(q)
            self.offs[q] = value
            if self.sparse:
                self.sparse.pop(qid, None)
            return 0
        if self.dense(qid):
            q = qid
            if q < self.cap:
                self.offs[q] = -1
        self.sparse[qid] = value
        return 0

    cdef object remove(self, object qid):
        """The queue's offset, taken out of the table; None when it was not there."""
        cdef Py_ssize_t q
        cdef int64_t v
        if self.dense(qid):
            q = qid
            if q < self.cap and self.offs[q] >= 0:
                v = self.offs[q]
                self.offs[q] = -1
                return v
        return self.sparse.pop(qid, None)

    cdef int clear(self) except -1:
        cdef Py_ssize_t q
        for q in range(self.cap):
            self.offs[q] = -1
        self.sparse.clear()
        return 0

    cdef list queue_items(self):
        cdef Py_ssize_t q
        out = [(q, self.offs[q]) for q in range(self.cap) if self.offs[q] >= 0]
        out.extend(self.sparse.items())
        return out


cdef class QueueOffsetTable:
    """(topic, queue id) → next queue offset, and per-topic put counters (see
    ``_put_core.QueueOffsetTable``)."""

    cdef dict _topics  # topic → _TopicState

    def __init__(self, entries=None):
        self._topics = {}
        if entries:
            for key, value in dict(entries).items():
                self[key] = value

    cdef _TopicState state(self, object topic):
        st = self._topics.get(topic)
        if st is None:
            st = _TopicState()
            self._topics[topic] = st
        return <_TopicState>st

    # ---- the put's side ---------------------------------------------------------------------

    def next_offset(self, topic, queue_id):
        st = self._topics.get(topic)
        if st is None:
            return 0
        v = (<_TopicState>st).get(queue_id)
        return 0 if v is None else v

    def advance(self, topic, queue_id, next_offset, size):
        st = self.state(topic)
        st.set(queue_id, next_offset)
        st.count += 1
        st.nbytes += size
        st.counted = True

    def count(self, topic, messages, size):
        st = self.state(topic)
        st.count += messages
        st.nbytes += size
        st.counted = True

    def reset(self, entries):
        for st in self._topics.values():
            (<_TopicState>st).clear()
        for key, value in dict(entries).items():
            self[key] = value

    def put_counts(self):
        return {t: (<_TopicState>st).count for t, st in self._topics.items()
                if (<_TopicState>st).counted}

    def put_bytes(self):
        return {t: (<_TopicState>st).nbytes for t, st in self._topics.items()
                if (<_TopicState>st).counted}

    # ---- a mapping over (topic, queue id) ---------------------------------------------------

    def __getitem__(self, key):
        topic, qid = key
        st = self._topics.get(topic)
        v = None if st is None else (<_TopicState>st).get(qid)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key, value):
        topic, qid = key
        self.state(topic).set(qid, value)

    def __delitem__(self, key):
        if self.pop(key, None) is None:
            raise KeyError(key)

    def __contains__(self, key):
        if type(key) is not tuple or len(key) != 2:
            return False
        topic, qid = key
        st = self._topics.get(topic)
        return st is not None and (<_TopicState>st).get(qid) is not None

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self.items())

    def __eq__(self, other):
        if isinstance(other, (QueueOffsetTable, dict)):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None

    def get(self, key, default=0):
        topic, qid = key
        st = self._topics.get(topic)
        v = None if st is None else (<_TopicState>st).get(qid)
        return default if v is None else v

    def pop(self, key, default=None):
        topic, qid = key
        st = self._topics.get(topic)
        v = None if st is None else (<_TopicState>st).remove(qid)
        return default if v is None else v

    def keys(self):
        return [k for k, _v in self.items()]

    def values(self):
        return [v for _k, v in self.items()]

    def items(self):
        return [((t, q), v) for t, st in self._topics.items()
                for q, v in (<_TopicState>st).queue_items()]

    def __repr__(self):
        return f"QueueOffsetTable({dict(self.items())!r})"


cdef inline int64_t _floor_ms(int64_t ns) noexcept:
    cdef int64_t q = ns // 1000000
    if ns < 0 and q * 1000000 != ns:
        q -= 1
    return q


cdef class PutCore:
    """The plain put in one call (see ``_put_core.PutCore``)."""

    cdef public QueueOffsetTable table
    cdef public dict tails
    cdef public bytes store_host
    cdef public Py_ssize_t file_size
    cdef public Py_ssize_t max_message_size
    cdef public object crc32
    cdef public object now_ns
    cdef public long long begin_ns
    cdef public long long busy_timeout_ms
    cdef public bint disk_full_logged
    cdef public bint refused
    cdef public long long served
    cdef public object lock
    cdef public object queue
    cdef public object reput
    cdef public object inline_plain
    cdef public object handoff
    cdef public object on_append
    cdef object _acquire
    cdef object _release

    def __init__(self, QueueOffsetTable table, dict tails, bytes store_host, Py_ssize_t file_size,
                 Py_ssize_t max_message_size, crc32, now_ns, long long busy_timeout_ms):
        self.table = table
        self.tails = tails
        self.store_host = store_host
        self.file_size = file_size
        self.max_message_size = max_message_size
        self.crc32 = crc32
        self.now_ns = now_ns
        self.begin_ns = 0
        self.busy_timeout_ms = busy_timeout_ms
        self.disk_full_logged = False
        self.served = 0
        self.refused = True
        self.lock = None
        self.queue = None
        self.reput = None
        self.inline_plain = None
        self.handoff = None
        self.on_append = None

    def wire(self, lock, queue, reput, inline_plain, handoff, on_append):
        self.lock = lock
        self._acquire = lock.acquire
        self._release = lock.release
        self.queue = queue
        self.reput = reput
        self.inline_plain = inline_plain
        self.handoff = handoff
        self.on_append = on_append

    def put(self, msg):
        cdef int32_t queue_id, flag, sys_flag, reconsume
        cdef int64_t born, prepared, pos, phys, now, now_ns, qoff
        cdef Py_ssize_t blen, tlen, total
        cdef uint32_t crc
        cdef Py_buffer view
        cdef unsigned char *d
        cdef _TopicState st
        if self.refused or self.begin_ns or type(msg) is not _Message or self._acquire is None:
            return None
        if msg.properties or msg.born_host:
            return None
        topic = msg.topic
        tail = self.tails.get(topic)
        body = msg.body
        if type(tail) is not bytes or type(body) is not bytes:
            return None
        blen = PyBytes_GET_SIZE(body)
        tlen = PyBytes_GET_SIZE(tail)
        if blen > self.max_message_size or PyBytes_GET_SIZE(self.store_host) != 8:
            return None
        q_o = msg.queue_id
        flag_o = msg.flag
        sys_o = msg.sys_flag
        born_o = msg.born_timestamp
        re_o = msg.reconsume_times
        prep_o = msg.prepared_transaction_offset
        if (type(q_o) is not int or type(flag_o) is not int or type(sys_o) is not int
                or type(born_o) is not int or type(re_o) is not int or type(prep_o) is not int):
            return None
        try:  # every field as its C integer (out of range: the general path raises)
            queue_id = q_o
            flag = flag_o
            sys_flag = sys_o
            born = born_o
            reconsume = re_o
            prepared = prep_o
        except OverflowError:
            return None
        if queue_id < 0 or sys_flag & TRANSACTION_MASK:
            return None
        total = HEAD_SIZE + blen + tlen
        if total + 8 > self.file_size:
            return None
        crc = <uint32_t>(<uint64_t>self.crc32(body) & 0x7FFFFFFF)
        self._acquire()
        try:
            if self.refused:
                return None
            files = self.queue.files
            if type(files) is not list or PyList_GET_SIZE(files) == 0:
                return None
            mf = <object>PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)
            pos = mf.wrote_position
            if pos < 0 or pos + total + 8 > mf.allocated:
                return None  # a roll or a step of disk blocks: the general path
            st = self.table.state(topic)
            if queue_id < st.cap and st.offs[queue_id] >= 0:
                qoff = st.offs[queue_id]
            else:  # not in the array: beside it, or not in the table (0)
                got = st.sparse.get(queue_id) if st.sparse else None
                if got is None:
                    qoff = 0
                elif type(got) is int and -0x8000000000000000 <= got <= 0x7FFFFFFFFFFFFFFF:
                    qoff = got
                else:
                    return None  # no int64 offset: the general path raises
            now_ns = self.now_ns()
            self.begin_ns = now_ns
            try:
                now = _floor_ms(now_ns)
                phys = mf.from_offset + pos
                try:
                    PyObject_GetBuffer(mf.write_target, &view, PyBUF_WRITABLE)
                except BufferError:
                    return None
                try:
                    if pos > view.len or total > view.len - pos:
                        return None
                    d = <unsigned char *>view.buf + pos
                    put32(d, <uint32_t>total)
                    put32(d + 4, <uint32_t>_MAGIC_V1)
                    put32(d + 8, crc)
                    put32(d + 12, <uint32_t>queue_id)
                    put32(d + 16, <uint32_t>flag)
                    put64(d + 20, <uint64_t>qoff)
                    put64(d + 28, <uint64_t>phys)
                    put32(d + 36, <uint32_t>sys_flag)
                    put64(d + 40, <uint64_t>(born if born else now))
                    memcpy(d + 48, PyBytes_AS_STRING(_BORN_HOST), 8)
                    put64(d + 56, <uint64_t>now)
                    memcpy(d + 64, PyBytes_AS_STRING(self.store_host), 8)
                    put32(d + 72, <uint32_t>reconsume)
                    put64(d + 76, <uint64_t>prepared)
                    put32(d + 84, <uint32_t>blen)
                    memcpy(d + HEAD_SIZE, PyBytes_AS_STRING(body), blen)
                    memcpy(d + HEAD_SIZE + blen, PyBytes_AS_STRING(tail), tlen)
                finally:
                    PyBuffer_Release(&view)
                mf.wrote_position = pos + total
                mf.store_timestamp = now
                if queue_id < st.cap and 0 <= qoff < 0x7FFFFFFFFFFFFFFF and not st.sparse:
                    st.offs[queue_id] = qoff + 1
                else:  # a slot to make, or an offset beside the array
                    st.set(queue_id, (<object>qoff) + 1)
                st.count += 1
                st.nbytes += total
                st.counted = True
                if self.reput is not None:
                    self._dispatch(topic, queue_id, phys, total, now, qoff)
                elif self.handoff is not None:
                    self.handoff.append(_new_tuple(_DispatchRequest, (
                        topic, queue_id, phys, total, 0, now, qoff, None, None, sys_flag,
                        prepared)))
            finally:
                self.begin_ns = 0
            self.served += 1
        finally:
            self._release()
        on_append = self.on_append
        if on_append is not None:
            on_append()
        return _new_tuple(
            _PutMessageResult, (_PUT_OK, phys, total, qoff, now, self.store_host, 1, None, ()))

    cdef int _dispatch(self, object topic, int32_t queue_id, int64_t phys, Py_ssize_t size,
                       int64_t now, int64_t qoff) except -1:
        """``ReputMessageService.dispatch_plain`` for the unit it writes at once; everything
        else to ``inline_plain``. Put lock held, the record readable."""
        cdef int64_t end = phys + size
        cdef int64_t wrote, allocated, from_offset, dispatched
        cdef Py_buffer view
        cdef unsigned char *p
        cdef bint fits
        reput = self.reput
        if reput.reput_from_offset != phys or not reput.inline or reput.physic_at_dispatch:
            return self._general(topic, queue_id, phys, size, now, qoff)
        index = reput.index
        if index is not None and not index.files:
            return self._general(topic, queue_id, phys, size, now, qoff)
        table = reput.consume_queues
        queues = table.queues
        if type(queues) is not dict:
            return self._general(topic, queue_id, phys, size, now, qoff)
        by_id = (<dict>queues).get(topic)
        if type(by_id) is not dict:
            return self._general(topic, queue_id, phys, size, now, qoff)
        cq = (<dict>by_id).get(queue_id)
        if cq is None:
            return self._general(topic, queue_id, phys, size, now, qoff)
        if end > <int64_t>cq.max_physic_offset:
            files = cq.queue.files
            if type(files) is not list or PyList_GET_SIZE(files) == 0:
                return self._general(topic, queue_id, phys, size, now, qoff)
            mf = <object>PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)
            wrote = mf.wrote_position
            allocated = mf.allocated
            from_offset = mf.from_offset
            if (wrote <= 0 or wrote + UNIT_SIZE > allocated
                    or from_offset + wrote != qoff * UNIT_SIZE):
                return self._general(topic, queue_id, phys, size, now, qoff)
            if not mf.writer_held:  # not mapped for the writer (MappingLRU): the general path
                return self._general(topic, queue_id, phys, size, now, qoff)
            try:
                PyObject_GetBuffer(mf.mm, &view, PyBUF_WRITABLE)
            except BufferError:
                return self._general(topic, queue_id, phys, size, now, qoff)
            fits = wrote <= view.len - UNIT_SIZE
            if fits:
                p = <unsigned char *>view.buf + wrote
                put64(p, <uint64_t>phys)
                put32(p + 8, <uint32_t>size)
                put64(p + 12, 0)
            PyBuffer_Release(&view)
            if not fits:  # a mapping shorter than its file: the general path raises
                return self._general(topic, queue_id, phys, size, now, qoff)
            mf.wrote_position = wrote + UNIT_SIZE
            cq.max_physic_offset = end
            if not cq.flush_pending:  # the queue's next flush round takes it (mark_written)
                cq.mark_written()
        table.last_store_timestamp = now
        reput.reput_from_offset = end
        dispatched = reput.dispatched
        reput.dispatched = dispatched + 1
        listener = reput.listener
        if listener is not None:
            try:
                listener(topic, queue_id, qoff + 1, 0, now)
            except Exception:
                _log.exception("message arriving listener failed")
        return 0

    cdef int _general(self, object topic, int32_t queue_id, int64_t phys, Py_ssize_t size,
                      int64_t now, int64_t qoff) except -1:
        self.inline_plain(topic, queue_id, phys, size, 0, now, qoff)
        return 0
