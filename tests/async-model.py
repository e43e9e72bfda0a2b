#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The model of an asynchronous leg's crash consistency (DESIGN.md 14).

  async-model.py write URI LOG SECONDS
      Write to URI for SECONDS: writes of 4K to 64K at 4K-aligned random
      offsets (often overlapping), each with content of its own, and a
      flush every few writes, one at a time.  LOG records every
      acknowledged write (offset, length, seed) and every flush, as
      JSON lines, flushed to disk as they are acknowledged.

  async-model.py check LOG IMAGE [IMAGE...]
      Every IMAGE (a copy of an asynchronous leg's data area, taken
      while its server was paused) must be a state the volume could have
      been in after a crash: the state at some client flush k, plus some
      of the writes made after flush k (and before flush k + 1: the leg
      is flushed between two epochs), overlapping writes in order.  A
      write it holds part of must be whole where no later write covers
      it.  The last acknowledged writes may be missing from the log if
      the writer was still running (an image may hold one write more
      than the log: it is then matched as unknown and fails).

  async-model.py final LOG IMAGE
      IMAGE must be the volume after every logged write.

  async-model.py order LOG SERVERLOG SIZE
      SERVERLOG is the log of nbdkit's log filter on the asynchronous
      leg's server: no write of epoch e may reach the server before every
      write of the epochs before e has been answered and a flush started
      after that has been answered (the rule that makes the leg
      crash-consistent even where its server reorders or loses unflushed
      writes).  Requests at or past SIZE (metadata) are not the
      client's; writes that match no logged write are ignored.
"""

import json
import os
import random
import sys
import time

BLOCK = 4096


def content(seed, length):
    """The bytes of write number seed (never all zeroes)."""
    data = bytearray(random.Random(seed).randbytes(length))
    for off in range(0, length, BLOCK):
        data[off] = 1 + seed % 255
    return bytes(data)


def cmd_write(uri, log, seconds):
    import nbd
    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    blocks = size // BLOCK
    rng = random.Random(os.getpid())
    # A hot block plus up to 7, then up to 16 blocks: stays inside.
    hot = [rng.randrange(blocks - 23) for _ in range(32)]
    deadline = time.monotonic() + seconds
    seq = 0
    with open(log, "w") as f:
        while time.monotonic() < deadline:
            seq += 1
            nblocks = rng.choice([1, 1, 2, 4, 16])
            start = (rng.choice(hot) + rng.randrange(8)
                     if rng.random() < 0.6
                     else rng.randrange(blocks - nblocks))
            offset, length = start * BLOCK, nblocks * BLOCK
            h.pwrite(content(seq, length), offset)
            f.write(json.dumps({"w": [offset, length, seq]}) + "\n")
            if rng.random() < 0.15:
                h.flush()
                f.write(json.dumps({"f": seq}) + "\n")
            f.flush()
    h.shutdown()


def read_log(log):
    """The writes (offset, length, seed, epoch) and the number of flushes."""
    writes, epoch = [], 0
    with open(log) as f:
        for line in f:
            rec = json.loads(line)
            if "w" in rec:
                offset, length, seed = rec["w"]
                writes.append((offset, length, seed, epoch))
            else:
                epoch += 1
    return writes, epoch


def block_history(writes):
    """For every block written: the writes to it, in order, as
    (index in writes, epoch, the block's bytes)."""
    hist = {}
    for i, (offset, length, seed, epoch) in enumerate(writes):
        data = content(seed, length)
        for b in range(length // BLOCK):
            blk = offset // BLOCK + b
            hist.setdefault(blk, []).append(
                (i, epoch, data[b * BLOCK:(b + 1) * BLOCK]))
    return hist


def check_image(writes, flushes, hist, image):
    """None if image is a crash state (see the module note), else why."""
    with open(image, "rb") as f:
        img = f.read()
    lo, hi = 0, flushes
    shown = {}                      # block -> index of the write it shows
    zero = bytes(BLOCK)
    for blk in range(len(img) // BLOCK):
        got = img[blk * BLOCK:(blk + 1) * BLOCK]
        h = hist.get(blk, [])
        if not h:
            if got != zero:
                return "block %d was never written but is not zero" % blk
            continue
        if got == zero:
            lo_b, hi_b, idx = 0, h[0][1], -1
        else:
            pos = next((p for p, (_, _, d) in enumerate(h) if d == got), None)
            if pos is None:
                return ("block %d holds data of no logged write (torn, "
                        "or a write after the log's end)" % blk)
            idx = h[pos][0]
            lo_b = h[pos][1]
            hi_b = h[pos + 1][1] if pos + 1 < len(h) else flushes
        shown[blk] = idx
        lo, hi = max(lo, lo_b), min(hi, hi_b)
        if lo > hi:
            return ("no flush boundary fits: block %d (write %d) allows "
                    "flushes %d..%d, the blocks before it %d..%d"
                    % (blk, idx, lo_b, hi_b, lo, hi))
    # Writes in order: a write shown anywhere is whole wherever no later
    # write to that block is shown.
    for blk, idx in shown.items():
        if idx < 0:
            continue
        offset, length, _, _ = writes[idx]
        for b in range(offset // BLOCK, (offset + length) // BLOCK):
            if shown.get(b, -1) < idx:
                return ("write %d is in the image at block %d but not at "
                        "block %d, which shows an older state" % (idx, blk, b))
    return None


def cmd_check(log, images):
    writes, flushes = read_log(log)
    hist = block_history(writes)
    bad = 0
    for image in images:
        why = check_image(writes, flushes, hist, image)
        print("%s: %s" % (image, why or "a crash state of the volume"))
        bad += why is not None
    print("%d writes, %d flushes, %d images, %d bad"
          % (len(writes), flushes, len(images), bad))
    return 1 if bad else 0


def cmd_final(log, image):
    writes, flushes = read_log(log)
    hist = block_history(writes)
    with open(image, "rb") as f:
        img = f.read()
    for blk, h in hist.items():
        if img[blk * BLOCK:(blk + 1) * BLOCK] != h[-1][2]:
            print("%s: block %d is not the last write to it" % (image, blk))
            return 1
    print("%s: holds every one of %d writes" % (image, len(writes)))
    return 0


def server_events(serverlog):
    """(kind, key, offset, count, done) for every Write and Flush line of
    an nbdkit log filter's log, in order."""
    import re
    pat = re.compile(r"connection=(\d+) (\.\.\.)?(Write|Flush) id=(\d+)"
                     r"(?: offset=0x([0-9a-f]+) count=0x([0-9a-f]+))?")
    with open(serverlog) as f:
        for line in f:
            m = pat.search(line)
            if not m:
                continue
            conn, done, kind, rid, off, cnt = m.groups()
            yield (kind, (conn, rid), int(off or "0", 16),
                   int(cnt or "0", 16), done is not None)


def cmd_order(log, serverlog, size):
    writes, flushes = read_log(log)
    by_range = {}
    per_epoch = [0] * (flushes + 1)
    for i, (offset, length, _, epoch) in enumerate(writes):
        by_range.setdefault((offset, length), []).append(i)
        per_epoch[epoch] += 1
    completed = [0] * (flushes + 1)
    started = {}                    # server key -> client write index
    flush_snap = {}                 # server key -> epochs complete at start
    durable = -1                    # every epoch up to this one flushed
    matched = 0

    def complete_prefix():
        e = -1
        while e + 1 <= flushes and completed[e + 1] == per_epoch[e + 1]:
            e += 1
        return e

    for kind, key, offset, count, done in server_events(serverlog):
        if kind == "Flush":
            if not done:
                flush_snap[key] = complete_prefix()
            elif key in flush_snap:
                durable = max(durable, flush_snap.pop(key))
            continue
        if done:
            i = started.pop(key, None)
            if i is not None:
                completed[writes[i][3]] += 1
            continue
        if offset >= size or not by_range.get((offset, count)):
            continue
        i = by_range[(offset, count)].pop(0)
        epoch = writes[i][3]
        if epoch - 1 > durable:
            print("write %d (epoch %d) reached the server before epoch %d "
                  "was answered and flushed (flushed up to epoch %d)"
                  % (i, epoch, epoch - 1, durable))
            return 1
        started[key] = i
        matched += 1
    print("%d writes reached the server in epoch order (%d logged)"
          % (matched, len(writes)))
    return 0 if matched > 0 else 1


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        cmd_write(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        return 0
    if cmd == "check":
        return cmd_check(sys.argv[2], sys.argv[3:])
    if cmd == "final":
        return cmd_final(sys.argv[2], sys.argv[3])
    if cmd == "order":
        return cmd_order(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    sys.exit("usage: see the module note")


if __name__ == "__main__":
    sys.exit(main())
