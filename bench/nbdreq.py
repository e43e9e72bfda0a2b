#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
#
# nbdreq.py: the libnbd client of the benchmarks (python3-libnbd).
#
#   nbdreq.py count URI OP N QD
#       cpucost and scale: one connection; write every 4 KiB block of a
#       16 MiB region once (warm-up: later writes overwrite, later reads
#       hit data), then exactly N requests of OP (write or read, 4 KiB,
#       walking through the region), QD of them in flight, then a clean
#       disconnect.  All but the N requests is the same for any N, so
#       (cost(N2) - cost(N1)) / (N2 - N1) is the cost of one request.
#       With NBDREQ_HOLD=PREFIX in the environment it waits twice, with
#       the connection open: after the warm-up it creates PREFIX.warm
#       and goes on once that file is gone, after the N requests
#       PREFIX.done likewise (at most 10 minutes each): cpucost reads
#       the server's threads at both points.
#   nbdreq.py fill URI PERCENT SEED
#       rebuild: write random bytes into PERCENT % of the 64 KiB chunks of
#       the export, chosen at random (seeded) over the whole export, the
#       rest left untouched (holes); then flush.  Prints the bytes written.
#   nbdreq.py scatter URI COUNT
#       scale (RSS): COUNT 4 KiB writes spread evenly over the export,
#       so that they land in as many bitmap pages and activity-log
#       extents as possible; then flush.
#
# Any NBD error raises (exit status 1).

import os
import random
import sys
import time

import nbd

BLOCK = 4096
REGION = 16 << 20
CHUNK = 64 << 10


class Pipeline:
    """Keep up to qd asynchronous requests in flight on one handle.

    The completion callback holds a reference to the request's buffer,
    so a buffer lives until its request is done.
    """

    def __init__(self, h, qd):
        self.h = h
        self.room = qd
        self.errors = 0

    def _done(self, err):
        if err.value:
            self.errors += 1
        self.room += 1
        return 1                            # retire the command

    def submit(self, call, buf, offset):
        """call(buf, offset) once fewer than qd requests are in flight."""
        while self.room == 0:
            self.h.poll(-1)
        self.room -= 1
        call(buf, offset, completion=lambda err, b=buf: self._done(err))

    def drain(self):
        """Wait for every request; exit if any failed."""
        while self.h.aio_in_flight() > 0:
            self.h.poll(-1)
        if self.errors:
            sys.exit("%d requests failed" % self.errors)


def connect(uri):
    """A handle connected to uri."""
    h = nbd.NBD()
    h.connect_uri(uri)
    return h


def count(uri, op, n, qd):
    """Warm-up, then exactly n requests of op with qd in flight."""
    h = connect(uri)
    blocks = REGION // BLOCK
    data = b"\xa5" * BLOCK
    for i in range(blocks):
        h.pwrite(data, i * BLOCK)
    prefix = os.environ.get("NBDREQ_HOLD")
    hold(prefix, ".warm")
    if qd == 1:
        for i in range(n):
            if op == "write":
                h.pwrite(data, (i % blocks) * BLOCK)
            else:
                h.pread(BLOCK, (i % blocks) * BLOCK)
    else:
        p = Pipeline(h, qd)
        wbuf = nbd.Buffer.from_bytearray(bytearray(data))
        for i in range(n):
            if op == "write":
                p.submit(h.aio_pwrite, wbuf, (i % blocks) * BLOCK)
            else:
                p.submit(h.aio_pread, nbd.Buffer(BLOCK), (i % blocks) * BLOCK)
        p.drain()
    hold(prefix, ".done")
    h.shutdown()


def hold(prefix, suffix):
    """With a prefix: create prefix + suffix, then wait until it is gone
    (at most 10 minutes)."""
    if not prefix:
        return
    path = prefix + suffix
    open(path, "w").close()
    deadline = time.monotonic() + 600
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def fill(uri, percent, seed):
    """Random data in percent % of the chunks; print the bytes written."""
    h = connect(uri)
    chunks = h.get_size() // CHUNK
    picked = sorted(random.Random(seed).sample(range(chunks),
                                               chunks * percent // 100))
    p = Pipeline(h, 16)
    for c in picked:
        buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(CHUNK)))
        p.submit(h.aio_pwrite, buf, c * CHUNK)
    p.drain()
    h.flush()
    h.shutdown()
    print(len(picked) * CHUNK)


def scatter(uri, n):
    """n 4 KiB writes spread evenly over the export."""
    h = connect(uri)
    stride = (h.get_size() // n) // BLOCK * BLOCK
    p = Pipeline(h, 8)
    buf = nbd.Buffer.from_bytearray(bytearray(b"\x5a" * BLOCK))
    for i in range(n):
        p.submit(h.aio_pwrite, buf, i * stride)
    p.drain()
    h.flush()
    h.shutdown()


def main():
    a = sys.argv[1:]
    if len(a) == 5 and a[0] == "count" and a[2] in ("write", "read"):
        count(a[1], a[2], int(a[3]), int(a[4]))
    elif len(a) == 4 and a[0] == "fill":
        fill(a[1], int(a[2]), int(a[3]))
    elif len(a) == 3 and a[0] == "scatter":
        scatter(a[1], int(a[2]))
    else:
        sys.exit("usage: nbdreq.py count URI write|read N QD | "
                 "fill URI PERCENT SEED | scatter URI COUNT")


if __name__ == "__main__":
    main()
