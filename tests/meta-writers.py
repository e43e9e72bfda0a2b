# SPDX-License-Identifier: BSD-3-Clause
# Writers that log what was acknowledged, and the checker that proves
# every acknowledged write reads back (used by the test-meta-*.sh tests).
#
#   meta-writers.py write CID URI LOG REGION
#       Client CID writes blocks of 4-128 KiB (4 KiB aligned) at random
#       places of its region [CID * REGION, (CID + 1) * REGION), one
#       write at a time, until a write fails or the file LOG.stop exists.
#       Write number SEQ carries random.Random(CID << 32 | SEQ) bytes,
#       so the data need not be logged.  LOG gets "A SEQ OFFSET LENGTH"
#       after each acknowledgement (line-buffered), and "U SEQ OFFSET
#       LENGTH ERROR" for the write that failed (in flight when the
#       server died: it may or may not have landed).
#
#   meta-writers.py check IMAGE CLIENTS REGION LOG-PREFIX
#       IMAGE (a file, or an NBD URI) must hold, in each client's
#       region, exactly the client's acknowledged writes replayed in
#       order over zeroes, and in each 4 KiB block of its failed write
#       either that or the failed write's data.  Exits 1 naming the
#       first wrong byte.
#
# The failed write is judged per block, not whole: it may have landed
# on a leg in part.  A replica SIGKILLed in the middle of its pwrite(2)
# keeps the pages (on ext4 with large folios, the folios) copied before
# the kernel saw the signal: with Linux 6.18 on ext4 about half of the
# kills of a process rewriting a 48 KiB range leave it torn at a folio
# boundary.  The recovery then copies the source leg's torn range to
# the others (DESIGN.md section 5, invariant 3), as a single disk would
# keep it: NBD gives a failed write no atomicity, and torture.py's
# model treats an unacknowledged write the same way, per block.

import os
import random
import sys

BLOCK = 4096                    # the writes' alignment and the unit of tearing


def data_of(cid, seq, length):
    """The bytes of write seq of client cid."""
    return random.Random(cid << 32 | seq).randbytes(length)


def write(cid, uri, log, region):
    """Write and log until a write fails or log.stop appears."""
    import nbd
    h = nbd.NBD()
    h.connect_uri(uri)
    rng = random.Random(1000 + cid)
    with open(log, "w", buffering=1) as f:
        seq = 0
        while not os.path.exists(log + ".stop"):
            blocks = rng.randrange(1, 33)
            off = cid * region + \
                rng.randrange(0, region // 4096 - blocks + 1) * 4096
            data = data_of(cid, seq, blocks * 4096)
            try:
                h.pwrite(data, off)
            except nbd.Error as e:
                f.write("U %d %d %d %s\n" % (seq, off, len(data), e))
                return
            f.write("A %d %d %d\n" % (seq, off, len(data)))
            seq += 1
    h.shutdown()


def read_region(image, off, length):
    """length bytes at off of a file or an NBD URI."""
    if "://" in image:
        import nbd
        h = nbd.NBD()
        h.connect_uri(image)
        buf = bytearray()
        while len(buf) < length:
            n = min(length - len(buf), 32 * 1024 * 1024)
            buf += h.pread(n, off + len(buf))
        h.shutdown()
        return bytes(buf)
    with open(image, "rb") as f:
        f.seek(off)
        return f.read(length)


def check(image, clients, region, prefix):
    """Every client's region holds its acknowledged writes."""
    total = 0
    for cid in range(clients):
        base = cid * region
        exp = bytearray(region)
        unknown = None
        with open("%s%d" % (prefix, cid)) as f:
            for line in f:
                kind, seq, off, n = line.split()[:4]
                seq, off, n = int(seq), int(off), int(n)
                data = data_of(cid, seq, n)
                if kind == "A":
                    exp[off - base:off - base + n] = data
                    total += 1
                else:
                    unknown = (off - base, data)
        got = read_region(image, base, region)
        if got == exp:
            continue
        # Blocks of the failed write may hold its data instead.
        new = 0
        if unknown:
            uoff, data = unknown
            for b in range(0, len(data), BLOCK):
                blk = data[b:b + BLOCK]
                if got[uoff + b:uoff + b + len(blk)] == blk:
                    exp[uoff + b:uoff + b + len(blk)] = blk
                    new += 1
        if got == exp:
            if 0 < new < len(unknown[1]) // BLOCK:
                print("%s: client %d: the failed write at %d landed in %d "
                      "of its %d blocks" % (image, cid, base + unknown[0],
                                            new, len(unknown[1]) // BLOCK))
            continue
        bad = next(i for i in range(region) if got[i] != exp[i])
        if unknown and unknown[0] <= bad < unknown[0] + len(unknown[1]):
            sys.exit("%s: client %d: byte %d is neither what its "
                     "acknowledged writes left there nor its failed "
                     "write's" % (image, cid, base + bad))
        sys.exit("%s: client %d: byte %d is not what its acknowledged "
                 "writes left there" % (image, cid, base + bad))
    print("%s: the %d acknowledged writes of %d clients read back"
          % (image, total, clients))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "check":
        check(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit("usage: meta-writers.py write|check ...")
