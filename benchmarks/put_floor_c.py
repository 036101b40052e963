"""The put path's work written in C, for scale: records of 1 KiB bodies packed (88-byte head,
zlib's crc32 of the body, body and tail copied) into a memory-mapped file, one thread.

    python benchmarks/put_floor_c.py [--messages 500000] [--dir DIR] [--rounds 3]

Compiles a small C program with the system's gcc and zlib (``zlib.h``, ``-lz``), runs it over a
preallocated file made in a new temporary directory (or under ``--dir``), and prints the best
round's messages a second. ``rocketstore bench --scenario put_async`` gives the store's rate
on the same machine; the ratio of the two is the figure.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

PROGRAM = r"""
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static void put32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static void put64(unsigned char *p, uint64_t v) { put32(p, v >> 32); put32(p + 4, (uint32_t)v); }

int main(int argc, char **argv) {
    long n = atol(argv[2]);
    const unsigned char tail[] = "\x0a" "BenchTopic" "\x00\x00";
    size_t tlen = 13, blen = 1024, total = 88 + blen + tlen;
    size_t size = (size_t)n * total + 4096;
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || posix_fallocate(fd, 0, size) != 0) { perror("file"); return 1; }
    unsigned char *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) { perror("mmap"); return 1; }
    unsigned char bodies[64][1024];
    for (int i = 0; i < 64; i++) for (int j = 0; j < 1024; j++) bodies[i][j] = rand();
    const unsigned char host[8] = {127, 0, 0, 1, 0, 0, 0x2a, 0x9f};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    size_t pos = 0;
    int64_t now = (int64_t)a.tv_sec * 1000;
    for (long i = 0; i < n; i++) {
        unsigned char *d = m + pos, *body = bodies[i & 63];
        uint32_t crc = crc32(0L, body, blen) & 0x7FFFFFFF;
        put32(d, total); put32(d + 4, 0xDAA320A7); put32(d + 8, crc); put32(d + 12, i & 3);
        put32(d + 16, 0); put64(d + 20, i); put64(d + 28, pos); put32(d + 36, 0);
        put64(d + 40, now); memcpy(d + 48, host, 8); put64(d + 56, now); memcpy(d + 64, host, 8);
        put32(d + 72, 0); put64(d + 76, 0); put32(d + 84, blen);
        memcpy(d + 88, body, blen); memcpy(d + 88 + blen, tail, tlen);
        pos += total;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%.0f\n", n / s);
    munmap(m, size);
    close(fd);
    unlink(argv[1]);
    return 0;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to make the scratch files (default: temp)")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rocketstore-put-c-", dir=args.dir))
    try:
        src = scratch / "put.c"
        src.write_text(PROGRAM)
        exe = scratch / "put"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(src), "-lz"], check=True)
        rates = []
        for r in range(args.rounds):
            subprocess.run(["sync"], check=False)
            out = subprocess.run(
                [str(exe), str(scratch / f"data{r}"), str(args.messages)],
                capture_output=True,
                text=True,
                check=True,
            )
            rates.append(float(out.stdout))
        print(f"C put loop (zlib crc32): best {max(rates):,.0f} msgs/s, rounds {rates}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
