# SPDX-License-Identifier: BSD-3-Clause
#
# random-writes.py URI EXPECTED SEED COUNT: the data workload of
# test-data-plugin.sh and test-data-filter.sh.
#
# Against the NBD export URI (a controller over blank legs, so it reads
# as zeroes at first): a few fixed edge cases (offset 0, the last byte,
# across a 64K chunk and a 4M activity-log extent boundary), then COUNT
# random requests seeded by SEED: writes of 512 B..1 MiB at random
# offsets, half of them unaligned in offset and length, some with FUA;
# about one in twenty a write-zeroes and one in twenty a trim (which the
# controller must turn into zeroes on every leg, so it reads back as
# zeroes).  Every request is applied to an in-memory image too.  Then it
# flushes, reads the whole export back and compares it with the image
# (exit 1 naming the first differing offset), and writes the image to
# the file EXPECTED, exactly the export's size, for compare_legs.
# Any NBD error raises, so a request that fails fails the test.

import random
import sys

import nbd

MIB = 1024 * 1024
READ_STEP = 4 * MIB


def apply_write(h, image, rnd, offset, length, flags=0):
    """Write random bytes at offset to the export and the image."""
    buf = rnd.randbytes(length)
    h.pwrite(buf, offset, flags)
    image[offset:offset + length] = buf


def apply_zero(h, image, offset, length, trim):
    """Zero (or trim) a range of the export and the image."""
    if trim:
        h.trim(length, offset)
    else:
        h.zero(length, offset)
    image[offset:offset + length] = bytes(length)


def edge_cases(h, image, rnd, size):
    """Requests at the places where off-by-one bugs live."""
    apply_write(h, image, rnd, 0, 512)
    apply_write(h, image, rnd, size - 1, 1)
    apply_write(h, image, rnd, size - 4096 - 7, 4096 + 7)
    apply_write(h, image, rnd, 64 * 1024 - 100, 200)
    apply_write(h, image, rnd, 4 * MIB - 3, MIB + 5, nbd.CMD_FLAG_FUA)
    apply_zero(h, image, 4 * MIB - 1000, 2000, trim=False)
    apply_zero(h, image, 8 * MIB + 1, 70 * 1024, trim=True)


def random_request(h, image, rnd, size):
    """One random write, zero or trim."""
    length = rnd.randint(512, MIB)
    if rnd.random() < 0.5:
        length &= ~511
    offset = rnd.randint(0, size - length)
    if rnd.random() < 0.5:
        offset &= ~4095
    kind = rnd.random()
    if kind < 0.05:
        apply_zero(h, image, offset, length, trim=False)
    elif kind < 0.10:
        apply_zero(h, image, offset, length, trim=True)
    else:
        flags = nbd.CMD_FLAG_FUA if rnd.random() < 0.1 else 0
        apply_write(h, image, rnd, offset, length, flags)


def first_difference(h, image, size):
    """Offset of the first byte the export and the image disagree on."""
    for start in range(0, size, READ_STEP):
        n = min(READ_STEP, size - start)
        got = h.pread(n, start)
        want = image[start:start + n]
        if got != want:
            for i in range(n):
                if got[i] != want[i]:
                    return start + i
    return None


def main():
    uri, expected, seed, count = sys.argv[1:]
    rnd = random.Random(int(seed))
    h = nbd.NBD()
    h.connect_uri(uri)
    if not h.can_trim():
        sys.exit("%s does not advertise trim" % uri)
    size = h.get_size()
    image = bytearray(size)
    edge_cases(h, image, rnd, size)
    for _ in range(int(count)):
        random_request(h, image, rnd, size)
    h.flush()
    diff = first_difference(h, image, size)
    if diff is not None:
        sys.exit("seed %s: %s differs from what was written at offset %d"
                 % (seed, uri, diff))
    h.shutdown()
    with open(expected, "wb") as f:
        f.write(image)
    print("random-writes: %s requests (seed %s) read back intact from %s"
          % (int(count) + 7, seed, uri))


main()
