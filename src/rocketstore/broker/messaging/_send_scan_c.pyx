# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A plain send's header read straight from its frame, compiled: the twin of
``_send_scan.scan_send_py`` (the reference; its docstring says what is accepted). One pass
over the JSON header's bytes, no dictionary: the names are compared as bytes, the numbers read
as C integers, the two texts (topic, properties) made once. Anything this scanner does not
handle (an escaped surrogate, a number with a fraction or exponent, a name given twice, a name
that is not the send's) returns None, and the connection decodes the frame as before.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.string cimport memcmp

from rocketstore.store._big_endian cimport get32

DEF MAX_DIGITS = 18
DEF SMALL_TEXT = 1024  # an escaped text up to this size is decoded on the stack

# what a value is, once scanned
DEF V_NULL = 0
DEF V_FALSE = 1
DEF V_TRUE = 2
DEF V_INT = 3
DEF V_TEXT = 4

# the send's fields, by index into NAMES_V1 / NAMES_V2 (the order of _send_scan.py)
DEF F_TOPIC = 0
DEF F_QUEUE = 1
DEF F_PROPS = 2
DEF F_SYS = 3
DEF F_FLAG = 4
DEF F_BORN = 5
DEF F_RECONSUME = 6
DEF F_BATCH = 7
DEF N_SEND = 14  # the send's own names (NAMES_V1 / NAMES_V2)
DEF N_FIELDS = 18  # and the request signature's (SIGNATURE_NAMES), in either spelling

cdef int64_t INT32_LIMIT = 1 << 31
cdef int64_t LIMIT_10 = 10000000000
cdef int64_t LIMIT_18 = 1000000000000000000

# the names, C strings in the order of _send_scan.NAMES_V1 / NAMES_V2
cdef const char *_NAMES_V1[N_FIELDS]
_NAMES_V1[:] = [
    b"topic", b"queueId", b"properties", b"sysFlag", b"flag", b"bornTimestamp",
    b"reconsumeTimes", b"batch", b"producerGroup", b"defaultTopic", b"defaultTopicQueueNums",
    b"unitMode", b"maxReconsumeTimes", b"brokerName",
    b"AccessKey", b"Signature", b"SecurityToken", b"OnsChannel",
]
cdef Py_ssize_t _LENGTHS_V1[N_FIELDS]
_LENGTHS_V1[:] = [5, 7, 10, 7, 4, 13, 14, 5, 13, 12, 21, 8, 17, 10, 9, 9, 13, 10]


cdef struct Value:
    int kind
    int64_t number  # V_INT: the integer; V_TEXT: the plain integer the text spells, or -1
    const unsigned char *start  # V_TEXT: the raw bytes between the quotes
    Py_ssize_t length
    bint escaped  # V_TEXT: the raw bytes hold a backslash
    bint high  # V_TEXT: the raw bytes hold a byte above 0x7F (UTF-8 to be checked)


cdef struct Scan:
    const unsigned char *p
    const unsigned char *end


cdef inline void _ws(Scan *s) noexcept:
    while s.p < s.end and (s.p[0] == 32 or s.p[0] == 9 or s.p[0] == 10 or s.p[0] == 13):
        s.p += 1


cdef inline bint _take(Scan *s, unsigned char c) noexcept:
    _ws(s)
    if s.p < s.end and s.p[0] == c:
        s.p += 1
        return True
    return False


cdef bint _text(Scan *s, Value *v) noexcept:
    """A JSON string at s.p (its opening quote): its raw span; False when it is no JSON text
    (a control character, a bad escape, no closing quote). Digits-only texts also get
    ``number`` (at most 18 digits; -1 otherwise)."""
    cdef const unsigned char *p = s.p + 1
    cdef const unsigned char *end = s.end
    cdef unsigned char c
    cdef bint escaped = False
    cdef bint high = False
    cdef int k
    while p < end:
        c = p[0]
        if c == 34:  # closing quote
            break
        if c < 32:
            return False
        if c >= 128:
            high = True
        if c == 92:  # backslash: check the escape's form here, decode it later
            escaped = True
            if p + 1 >= end:
                return False
            c = p[1]
            if c == 117:  # \uXXXX
                if p + 6 > end:
                    return False
                for k in range(2, 6):
                    c = p[k]
                    if not ((48 <= c <= 57) or (65 <= c <= 70) or (97 <= c <= 102)):
                        return False
                p += 6
                continue
            if c not in b'"\\/bfnrt':
                return False
            p += 2
            continue
        p += 1
    if p >= end:
        return False
    v.kind = V_TEXT
    v.start = s.p + 1
    v.length = p - (s.p + 1)
    v.escaped = escaped
    v.high = high
    v.number = -1
    if not escaped and 0 < v.length <= MAX_DIGITS:
        v.number = 0
        for k in range(v.length):
            c = v.start[k]
            if c < 48 or c > 57:
                v.number = -1
                break
            v.number = v.number * 10 + (c - 48)
    s.p = p + 1
    return True


cdef bint _value(Scan *s, Value *v) noexcept:
    """A scalar JSON value (text, integer of at most 18 digits, true, false, null); False for
    anything else (an object, an array, a fraction, an exponent, a longer number)."""
    cdef const unsigned char *p
    cdef unsigned char c
    cdef bint negative = False
    cdef int digits = 0
    cdef int64_t n = 0
    _ws(s)
    if s.p >= s.end:
        return False
    c = s.p[0]
    if c == 34:
        return _text(s, v)
    if c == 116:
        if s.end - s.p >= 4 and memcmp(s.p, b"true", 4) == 0:
            s.p += 4
            v.kind = V_TRUE
            return True
        return False
    if c == 102:
        if s.end - s.p >= 5 and memcmp(s.p, b"false", 5) == 0:
            s.p += 5
            v.kind = V_FALSE
            return True
        return False
    if c == 110:
        if s.end - s.p >= 4 and memcmp(s.p, b"null", 4) == 0:
            s.p += 4
            v.kind = V_NULL
            return True
        return False
    p = s.p
    if c == 45:  # minus
        negative = True
        p += 1
    if p >= s.end or p[0] < 48 or p[0] > 57:
        return False
    if p[0] == 48 and p + 1 < s.end and 48 <= p[1] <= 57:
        return False  # a leading zero: no JSON number
    while p < s.end and 48 <= p[0] <= 57:
        digits += 1
        if digits > MAX_DIGITS:
            return False
        n = n * 10 + (p[0] - 48)
        p += 1
    if p < s.end and (p[0] == 46 or p[0] == 101 or p[0] == 69):
        return False  # a fraction or an exponent: a float
    v.kind = V_INT
    v.number = -n if negative else n
    s.p = p
    return True


cdef inline int _hex(unsigned char c) noexcept:
    if c <= 57:
        return c - 48
    if c <= 70:
        return c - 55
    return c - 87


cdef object _decoded(Value *v):
    """The str a JSON text stands for; None when it cannot be made here (an escaped surrogate,
    bytes that are no UTF-8)."""
    cdef unsigned char small[SMALL_TEXT]
    cdef unsigned char *buf
    if not v.escaped:
        try:
            return PyUnicode_DecodeUTF8(<const char *>v.start, v.length, NULL)
        except UnicodeDecodeError:
            return None
    if v.length <= SMALL_TEXT:  # an escape is never shorter than what it stands for
        return _unescaped(v, small)
    buf = <unsigned char *>PyMem_Malloc(v.length)
    if buf == NULL:
        raise MemoryError()
    try:
        return _unescaped(v, buf)
    finally:
        PyMem_Free(buf)


cdef object _unescaped(Value *v, unsigned char *buf):
    cdef const unsigned char *p = v.start
    cdef const unsigned char *end = v.start + v.length
    cdef Py_ssize_t n = 0
    cdef uint32_t u
    cdef unsigned char c
    while p < end:
        c = p[0]
        if c != 92:
            buf[n] = c
            n += 1
            p += 1
            continue
        c = p[1]
        if c == 117:
            u = (_hex(p[2]) << 12) | (_hex(p[3]) << 8) | (_hex(p[4]) << 4) | _hex(p[5])
            p += 6
            if 0xD800 <= u <= 0xDFFF:
                return None
            if u < 0x80:
                buf[n] = <unsigned char>u
                n += 1
            elif u < 0x800:
                buf[n] = <unsigned char>(0xC0 | (u >> 6))
                buf[n + 1] = <unsigned char>(0x80 | (u & 0x3F))
                n += 2
            else:
                buf[n] = <unsigned char>(0xE0 | (u >> 12))
                buf[n + 1] = <unsigned char>(0x80 | ((u >> 6) & 0x3F))
                buf[n + 2] = <unsigned char>(0x80 | (u & 0x3F))
                n += 3
            continue
        p += 2
        if c == 98:
            c = 8
        elif c == 102:
            c = 12
        elif c == 110:
            c = 10
        elif c == 114:
            c = 13
        elif c == 116:
            c = 9
        buf[n] = c  # '"', '\\' and '/' stand for themselves
        n += 1
    try:
        return PyUnicode_DecodeUTF8(<const char *>buf, n, NULL)
    except UnicodeDecodeError:
        return None


cdef inline bint _is(Value *v, const char *name, Py_ssize_t size) noexcept:
    return not v.escaped and v.length == size and memcmp(v.start, name, size) == 0


cdef int _field(Value *key, bint long_names) noexcept:
    """The index of an ext field name (NAMES_V1's long names, or NAMES_V2's letters a..n,
    then SIGNATURE_NAMES in either); -1 for another name."""
    cdef int i
    cdef unsigned char c
    if key.escaped:
        return -1
    if not long_names:
        if key.length == 1:
            c = key.start[0]
            if c < 97 or c > 110:  # 'a'..'n'
                return -1
            return _LETTER[c - 97]
        for i in range(N_SEND, N_FIELDS):  # a signature's names are spelled out in both
            if _LENGTHS_V1[i] == key.length and memcmp(_NAMES_V1[i], key.start, key.length) == 0:
                return i
        return -1
    for i in range(N_FIELDS):
        if _LENGTHS_V1[i] == key.length and memcmp(_NAMES_V1[i], key.start, key.length) == 0:
            return i
    return -1


# NAMES_V2's letters a..n -> field index
cdef int _LETTER[N_SEND]
_LETTER[:] = [8, 0, 9, 10, 1, 3, 5, 4, 2, 6, 11, 12, 7, 13]


cdef inline int64_t _plain(Value *v, int64_t limit) noexcept:
    """The non-negative integer below ``limit`` a value stands for (a JSON integer, or a text
    of 1 to 10 / 18 ASCII digits, as the reference's plain_int); -1 for anything else."""
    if v.kind == V_INT:
        return v.number if 0 <= v.number < limit else -1
    if v.kind == V_TEXT and v.number >= 0:
        if (limit == LIMIT_10 and v.length > 10) or v.number >= limit:
            return -1
        return v.number
    return -1


cdef struct Header:
    int64_t code
    int64_t opaque
    int64_t flag
    int64_t version
    Value fields[N_FIELDS]
    bint seen[N_FIELDS]


cdef bint _ext_field(Header *h, Value *key, Value *value) noexcept:
    """Keep one ext field; False for a name that is not the send's (in the spelling of its
    code), a name given twice, or a text whose UTF-8 would go unchecked (only the topic and
    the properties are decoded)."""
    cdef int i = _field(key, h.code == 10)
    if i < 0 or h.seen[i]:
        return False
    if value.kind == V_TEXT and value.high and i != F_TOPIC and i != F_PROPS:
        return False
    h.seen[i] = True
    h.fields[i] = value[0]
    return True


cdef bint _json_header(const unsigned char *p, const unsigned char *end, Header *h) noexcept:
    """Read a JSON header into ``h``; False when it is not one this scanner takes."""
    cdef Scan s
    cdef Value key, value
    cdef unsigned int top = 0  # header names seen: a bit each
    cdef const unsigned char *ext_at = NULL
    cdef const unsigned char *ext_end = NULL
    s.p = p
    s.end = end
    h.code = -1
    h.opaque = h.flag = h.version = 0
    # the header object: its names, the send's ext object skipped over for now
    if not _take(&s, 123):
        return False
    if not _take(&s, 125):
        while True:
            _ws(&s)
            if s.p >= s.end or s.p[0] != 34 or not _text(&s, &key) or key.high:
                return False
            if not _take(&s, 58):
                return False
            if _is(&key, b"extFields", 9):
                if top & 128:
                    return False
                top |= 128
                _ws(&s)
                ext_at = s.p
                # skip the object: its values are scalars, so it ends at the first '}' outside
                # a text
                if not _take(&s, 123):
                    return False
                if not _take(&s, 125):
                    while True:
                        _ws(&s)
                        if s.p >= s.end or s.p[0] != 34 or not _text(&s, &value):
                            return False
                        if value.high:  # a name: the send's are ASCII
                            return False
                        if not _take(&s, 58) or not _value(&s, &value):
                            return False
                        if _take(&s, 125):
                            break
                        if not _take(&s, 44):
                            return False
                ext_end = s.p
            elif not _value(&s, &value):
                return False
            elif value.kind == V_TEXT and value.high:
                return False  # a text not decoded here: its UTF-8 would go unchecked
            elif _is(&key, b"code", 4):
                if top & 1 or value.kind != V_INT:
                    return False
                top |= 1
                h.code = value.number
            elif _is(&key, b"opaque", 6):
                if top & 2 or value.kind != V_INT:
                    return False
                top |= 2
                h.opaque = value.number
            elif _is(&key, b"flag", 4):
                if top & 4 or value.kind != V_INT:
                    return False
                top |= 4
                h.flag = value.number
            elif _is(&key, b"version", 7):
                if top & 8 or value.kind != V_INT:
                    return False
                top |= 8
                h.version = value.number
            elif _is(&key, b"language", 8):
                if top & 16 or value.kind != V_TEXT:
                    return False
                top |= 16
            elif _is(&key, b"remark", 6):
                if top & 32 or (value.kind != V_TEXT and value.kind != V_NULL):
                    return False
                top |= 32
            elif _is(&key, b"serializeTypeCurrentRPC", 23):
                if top & 64:
                    return False
                top |= 64
            else:
                return False
            if _take(&s, 125):
                break
            if not _take(&s, 44):
                return False
    _ws(&s)
    if s.p != s.end or ext_at == NULL or (h.code != 10 and h.code != 310):
        return False
    # the ext fields, by name (their syntax was checked above)
    s.p = ext_at + 1
    s.end = ext_end
    if not _take(&s, 125):
        while True:
            _ws(&s)
            _text(&s, &key)
            _take(&s, 58)
            _value(&s, &value)
            if not _ext_field(h, &key, &value):
                return False
            if _take(&s, 125):
                break
            _take(&s, 44)
    return True


cdef inline int32_t _get16(const unsigned char *p) noexcept:
    return <int16_t>((p[0] << 8) | p[1])


cdef bint _ascii(const unsigned char *p, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 128:
            return False
    return True


cdef bint _raw_text(const unsigned char *p, Py_ssize_t n, Value *v) noexcept:
    """A binary header's text as a Value (its digits read as a number)."""
    cdef Py_ssize_t k
    cdef unsigned char c
    v.kind = V_TEXT
    v.start = p
    v.length = n
    v.escaped = False
    v.high = not _ascii(p, n)
    v.number = -1
    if 0 < n <= MAX_DIGITS:
        v.number = 0
        for k in range(n):
            c = p[k]
            if c < 48 or c > 57:
                v.number = -1
                break
            v.number = v.number * 10 + (c - 48)
    return True


cdef bint _binary_header(const unsigned char *p, Py_ssize_t size, Header *h) noexcept:
    """Read a ROCKETMQ (binary) header into ``h`` as the connection's decode reads it; False
    where that decode fails, and for what this scanner does not take (a remark that is not
    ASCII, a name given twice)."""
    cdef Py_ssize_t pos, end
    cdef int32_t remark_len, ext_len, klen, vlen
    cdef Value key, value
    if size < 17:
        return False
    h.code = _get16(p)
    h.version = _get16(p + 3)
    h.opaque = <int32_t>get32(p + 5)
    h.flag = <int32_t>get32(p + 9)
    remark_len = <int32_t>get32(p + 13)
    pos = 17
    if remark_len > 0:
        if pos + remark_len > size or not _ascii(p + pos, remark_len):
            return False
        pos += remark_len
    if pos + 4 > size:
        return False
    ext_len = <int32_t>get32(p + pos)
    pos += 4
    if h.code != 10 and h.code != 310:
        return False
    if ext_len > 0:
        end = pos + ext_len
        if end > size:
            return False
        while pos < end:
            if pos + 2 > size:
                return False
            klen = _get16(p + pos)
            pos += 2
            if klen < 0 or pos + klen + 4 > end:
                return False
            _raw_text(p + pos, klen, &key)
            pos += klen
            vlen = <int32_t>get32(p + pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                return False
            _raw_text(p + pos, vlen, &value)
            pos += vlen
            if key.high or not _ext_field(h, &key, &value):
                return False
    return True


def scan_send(frame, /):
    """The plain send in ``frame`` (see ``_send_scan.scan_send_py``), or None."""
    cdef Py_buffer view
    cdef const unsigned char *b
    cdef Py_ssize_t size, body_at
    cdef uint32_t mark, serialize_type
    cdef Header h
    cdef Value value
    cdef int i
    cdef int64_t queue_id, sys_flag, message_flag, born, reconsume
    if PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0:
        return None
    try:
        b = <const unsigned char *>view.buf
        size = view.len
        if size < 4:
            return None
        mark = get32(b)
        body_at = 4 + (mark & 0xFFFFFF)
        serialize_type = mark >> 24
        if body_at > size:
            return None
        for i in range(N_FIELDS):
            h.seen[i] = False
        if serialize_type == 0:
            if not _json_header(b + 4, b + body_at, &h):
                return None
        elif serialize_type == 1:
            if not _binary_header(b + 4, body_at - 4, &h):
                return None
        else:
            return None
        if h.seen[F_BATCH]:
            value = h.fields[F_BATCH]
            if not (
                value.kind == V_NULL
                or value.kind == V_FALSE
                or (value.kind == V_TEXT and _is(&value, b"false", 5))
                or (value.kind == V_TEXT and _is(&value, b"0", 1))
            ):
                return None
        if not (h.seen[F_TOPIC] and h.seen[F_PROPS] and h.seen[F_QUEUE] and h.seen[F_SYS]
                and h.seen[F_FLAG] and h.seen[F_BORN] and h.seen[F_RECONSUME]):
            return None
        if h.fields[F_TOPIC].kind != V_TEXT or h.fields[F_PROPS].kind != V_TEXT:
            return None
        queue_id = _plain(&h.fields[F_QUEUE], LIMIT_10)
        sys_flag = _plain(&h.fields[F_SYS], LIMIT_10)
        message_flag = _plain(&h.fields[F_FLAG], LIMIT_10)
        reconsume = _plain(&h.fields[F_RECONSUME], LIMIT_10)
        born = _plain(&h.fields[F_BORN], LIMIT_18)
        if (
            queue_id < 0
            or sys_flag < 0
            or sys_flag >= INT32_LIMIT
            or message_flag < 0
            or message_flag >= INT32_LIMIT
            or born < 0
            or reconsume < 0
            or reconsume >= INT32_LIMIT
        ):
            return None
        topic = _decoded(&h.fields[F_TOPIC])
        properties = _decoded(&h.fields[F_PROPS])
        if topic is None or properties is None:
            return None
        return (
            h.code, h.opaque, h.flag, h.version, serialize_type, topic, queue_id, properties,
            sys_flag, message_flag, born, reconsume, body_at,
        )
    finally:
        PyBuffer_Release(&view)
