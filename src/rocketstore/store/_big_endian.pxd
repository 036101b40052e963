# cython: language_level=3
# Big-endian integers in and out of raw bytes, for the compiled writers and readers of store
# records (log/_record_c, queue/_unit_write_c, queue/_index_write_c, read/_raw_read_c).

from libc.stdint cimport uint32_t, uint64_t


cdef inline void put32(unsigned char *p, uint32_t v) noexcept:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


cdef inline void put64(unsigned char *p, uint64_t v) noexcept:
    put32(p, <uint32_t>(v >> 32))
    put32(p + 4, <uint32_t>v)


cdef inline uint32_t get32(const unsigned char *p) noexcept:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]
