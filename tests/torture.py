#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
#
# tests/torture.py: a randomized fault campaign against a real controller
# (`make check-torture`; not part of `make check`).
#
# Design note.  Three stock nbdkit replicas (sparse file legs, so kill -9
# keeps their data; the fault-injection filter in front of each when it
# is built; a fourth, asynchronous, see below) and one controller (plugin shape, or TORTURE_SHAPE=filter with
# leg 0 local) run in a private temporary directory.  Writer threads, each
# with its own NBD connection to the controller, write, zero, trim, flush
# and read back; every 4 KiB block a write puts down names the write
# (writer, sequence number, offset) and is otherwise a pseudo-random
# function of them, so any block read back says which write it came from.
# Between the writes a schedule of faults runs: kill -9 and restart of a
# replica or of the controller, nbdrep fail/resync/resync --full,
# remove/add (blank or with old data), verify --repair, and fault-filter
# rules (errors, holds past timeout=, drops, exits, torn writes) on
# replicas.  The schedule of every round is a pure function of (seed,
# round): the same TORTURE_SEED replays the same actions at the same
# times.
#
# The model (the oracle's expectation) is per block a list of candidate
# values, each with the time its request was issued and completed and
# whether it was acknowledged.  An acknowledged write W removes every
# candidate whose request completed before W was issued (the device is
# linearizable: such a write is ordered before W); a write that failed, or
# was in flight when its connection died, only adds a candidate (it may
# or may not have landed).  Overlapping writes in flight together (the
# shared region) therefore leave both as candidates.  This is sound only
# if no request can land after its completion was seen; the engine
# promises that for its own legs (DESIGN.md section 13), and the campaign
# avoids the one case no engine can control: a replica holding a request
# of a controller that was killed (rules are cleared and holds drained
# before every controller kill).
#
# After every round the writers stop, rules are cleared, dead servers are
# restarted, removed legs are added back, and the volume must become
# healthy within TORTURE_HEALTHY_SECS (else a "hang" violation).  Then the
# oracle: the whole volume read through the controller must match the
# model, and every uptodate leg's data area read straight from its replica
# must be byte-identical to it.  What was read then becomes the model
# (every request has completed, so nothing else can land).  Writers also
# read back their own region while faults run (only they write there, so
# the model is exact at that moment).  A violation prints the seed, round,
# schedule so far, and per differing range which write each side holds;
# the tmpdir is kept and the exit status is 1.
#
# The asynchronous leg (unless TORTURE_ASYNC=0).  A fourth replica, r3,
# is an async= leg (DESIGN.md section 14): it takes every write but is
# never read, never a resync source, never counted, so the model does not
# speak of it while faults run.  Its configuration is part of the
# schedule (async_config, a pure function of seed and round):
# async-buffer (default, 4M or 1M: a small one makes it pull ahead) and
# async-full (pull-ahead or block) are drawn per three rounds, and a
# change restarts the controller cleanly (SIGTERM) before the round; the
# delay filter in front of r3 (delay-write=2ms, so that it falls behind)
# is drawn per round, and a change restarts r3 (kill -9).  Its own
# faults come from a random generator of their own (the synchronous
# legs' schedule of a seed is the same with or without it): kill -9 and
# restart of r3, fault rules on r3, nbdrep fail/resync, nbdrep remove
# and add --async (blank or with old data), and kill -9 of the
# controller while r3 lags (writes queued or unflushed, or behind).
# After the round, once the synchronous legs are healthy, the campaign
# waits (within the same TORTURE_HEALTHY_SECS) until r3 is syncing with
# its async state replicating and consistent, no resync running, then
# flushes through the controller and waits for lag_bytes and
# buffer_used 0: it has then flushed every write.  The oracle reads r3's
# data area straight from its server, and it must be byte-identical to
# the volume (an "async-differs" violation otherwise).  The leg's states
# are sampled every second while faults run, for the summary.
# Snapshots: at times of the schedule, if the status says the leg is
# consistent (and no resync runs), r3 is frozen (SIGSTOP), the status
# asked again, its data area copied, and it is thawed.  After the round
# (every request completed, so every write's issue and completion time
# is known) each snapshot must be crash-consistent: valid blocks only,
# and if it holds a write issued after a flush F was acknowledged, F's
# epoch is on the leg, so per block it holds a candidate of the model
# as of F's issue (acknowledged writes drop what completed before they
# were issued) or a request that completed after that (else
# "async-inconsistent").  The three defects the campaign found with
# its asynchronous leg have tests of their own:
# test-async-refused-write.sh, test-async-readd-old-gen.sh and
# test-async-fail-unflushed.sh.
#
# Environment: TORTURE_SECONDS (600), TORTURE_SEED (random, printed),
# TORTURE_ROUNDS (no limit), TORTURE_SHAPE (plugin|filter), TORTURE_WRITERS
# (3), TORTURE_TIMEOUT (controller timeout=, 3), TORTURE_HEALTHY_SECS
# (120), TORTURE_ASYNC (1; 0: no asynchronous leg), KEEP_TMPDIR=1;
# paths: NBDKIT, PLUGIN, FILTER, NBDREP, FAULTINJECT
# (optional), SANITIZER and CC (to preload the sanitizer runtime), or
# abs_top_builddir to derive them.

import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import nbd

BLOCK = 4096
MAGIC = b'TORTURE!'
ZERO_BLOCK = bytes(BLOCK)
LEG_SIZE = '64M'
KiB = 1024
MiB = 1024 * 1024


def env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v not in (None, '') else default


# ---------------------------------------------------------------------------
# Configuration.

class Config:
    def __init__(self):
        top = os.environ.get('abs_top_builddir', '')
        if not top:
            top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.nbdkit = os.environ.get('NBDKIT') or 'nbdkit'
        if self.nbdkit == 'no':
            self.nbdkit = 'nbdkit'
        self.plugin = os.environ.get('PLUGIN') or os.path.join(
            top, 'plugins/replicate/.libs/nbdkit-replicate-plugin.so')
        self.filter = os.environ.get('FILTER') or os.path.join(
            top, 'filters/replicate/.libs/nbdkit-replicate-filter.so')
        self.nbdrep = os.environ.get('NBDREP') or os.path.join(
            top, 'nbdrep/nbdrep')
        fi = os.environ.get('FAULTINJECT')
        if fi is None:
            fi = os.path.join(top, 'tests/.libs/nbdkit-faultinject-filter.so')
        self.faultinject = fi if fi and os.path.exists(fi) else None
        self.sanitizer = os.environ.get('SANITIZER', 'no') or 'no'
        self.cc = os.environ.get('CC', 'cc') or 'cc'
        self.seconds = env_int('TORTURE_SECONDS', 600)
        seed = os.environ.get('TORTURE_SEED', '')
        self.seed = int(seed) if seed else random.SystemRandom().randrange(1 << 32)
        self.rounds = env_int('TORTURE_ROUNDS', 0)
        self.shape = os.environ.get('TORTURE_SHAPE', 'plugin') or 'plugin'
        if self.shape not in ('plugin', 'filter'):
            sys.exit('torture: TORTURE_SHAPE must be plugin or filter')
        self.nwriters = env_int('TORTURE_WRITERS', 3)
        self.timeout = env_int('TORTURE_TIMEOUT', 3)
        self.healthy_secs = env_int('TORTURE_HEALTHY_SECS', 120)
        self.async_leg = os.environ.get('TORTURE_ASYNC', '1') != '0'
        self.keep = os.environ.get('KEEP_TMPDIR', '0') == '1'
        self.preload = None
        if self.sanitizer in ('address', 'thread'):
            lib = 'libasan.so' if self.sanitizer == 'address' else 'libtsan.so'
            out = subprocess.run([self.cc, '-print-file-name=' + lib],
                                 capture_output=True, text=True, timeout=30)
            self.preload = out.stdout.strip()


T0 = time.monotonic()


def now():
    return time.monotonic()


def stamp():
    return '%8.2f' % (now() - T0)


_print_lock = threading.Lock()


def say(*args):
    with _print_lock:
        print('[%s]' % stamp(), *args, flush=True)


# ---------------------------------------------------------------------------
# Block contents: which write a block came from.

def block_bytes(tag, w, seq, off):
    hdr = struct.pack('<8sIIQQ', MAGIC, w, seq, off, tag)
    body = hashlib.blake2b(hdr, digest_size=32).digest()
    return hdr + body * ((BLOCK - len(hdr)) // len(body))


def write_buffer(tag, w, seq, off, length):
    return b''.join(block_bytes(tag, w, seq, off + i)
                    for i in range(0, length, BLOCK))


def identify(tag, blk, off):
    """Name the value of a block: 'Z' (zeroes), (w, seq), or a string
    describing garbage."""
    if blk == ZERO_BLOCK:
        return 'Z'
    if blk[:8] == MAGIC:
        _, w, seq, boff, btag = struct.unpack('<8sIIQQ', blk[:32])
        if btag == tag and block_bytes(tag, w, seq, boff) == blk:
            if boff == off:
                return (w, seq)
            return 'misplaced w%d#%d from 0x%x' % (w, seq, boff)
    return 'garbage'


def vname(v):
    if v == 'Z':
        return 'zero'
    if isinstance(v, tuple):
        return 'w%d#%d' % v
    return v


# ---------------------------------------------------------------------------
# The model.

class Model:
    """Per block: list of [value, issue, complete, acked]."""

    def __init__(self, nblocks):
        self.lock = threading.Lock()
        self.blocks = [[('Z', 0.0, 0.0, True)] for _ in range(nblocks)]

    def record(self, first, n, value, issue, complete, acked):
        with self.lock:
            for b in range(first, first + n):
                ents = self.blocks[b]
                if acked:
                    ents = [e for e in ents if e[2] >= issue]
                ents.append((value, issue, complete, acked))
                self.blocks[b] = ents

    def candidates(self, b):
        with self.lock:
            return [e[0] for e in self.blocks[b]]

    def entries(self, b):
        with self.lock:
            return list(self.blocks[b])

    def collapse(self, observed, t):
        with self.lock:
            for b, v in enumerate(observed):
                self.blocks[b] = [(v, t, t, True)]


# ---------------------------------------------------------------------------
# Processes.

class Server:
    def __init__(self, name, tmpdir, argv_fn, env=None):
        self.name = name
        self.tmpdir = tmpdir
        self.sock = os.path.join(tmpdir, name + '.sock')
        self.pidfile = os.path.join(tmpdir, name + '.pid')
        self.log = os.path.join(tmpdir, name + '.log')
        self.argv_fn = argv_fn
        self.env = env
        self.proc = None
        self.uri = 'nbd+unix:///?socket=' + self.sock

    def start(self, timeout=60, extra_wait=None):
        for p in (self.sock, self.pidfile):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        argv = self.argv_fn()
        with open(self.log, 'a') as log:
            log.write('===== %s %s\n' % (time.strftime('%F %T'), ' '.join(argv)))
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env)
        deadline = now() + timeout
        while now() < deadline:
            if self.proc.poll() is not None:
                return False
            if (os.path.exists(self.pidfile) and os.path.getsize(self.pidfile) > 0
                    and os.path.exists(self.sock)
                    and (extra_wait is None or extra_wait())):
                return True
            time.sleep(0.05)
        return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = None
        return rc

    def stop(self, secs=10):
        """SIGTERM, wait SECS, then SIGKILL.  Returns (rc, hung)."""
        if self.proc is None:
            return (None, False)
        if self.proc.poll() is not None:
            return (self.proc.returncode, False)
        self.proc.send_signal(signal.SIGTERM)
        try:
            return (self.proc.wait(timeout=secs), False)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
            return (None, True)


def run(argv, timeout=30):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return 'timeout', e.stdout or '', e.stderr or ''


# ---------------------------------------------------------------------------
# Writers.

class Writer(threading.Thread):
    def __init__(self, camp, w):
        super().__init__(name='writer%d' % w, daemon=True)
        self.camp = camp
        self.w = w
        self.seq = 0
        self.h = None
        self.stop_ev = threading.Event()
        self.rng = None
        self.current = None
        self.stats = {'acked': 0, 'errors': 0, 'reads': 0, 'read_errors': 0,
                      'reconnects': 0}

    def connect(self):
        try:
            h = nbd.NBD()
            h.connect_uri(self.camp.ctl_server.uri)
            self.h = h
            self.can_trim = h.can_trim()
            self.can_zero = h.can_zero()
            self.can_fua = h.can_fua()
            self.stats['reconnects'] += 1
            return True
        except nbd.Error:
            self.h = None
            return False

    def drop(self):
        h, self.h = self.h, None
        if h is not None:
            try:
                h.shutdown()
            except nbd.Error:
                pass
            try:
                h.close()
            except (nbd.Error, AttributeError):
                pass

    def pick_range(self, region):
        first, n = region
        nb = self.rng.choice([1, 1, 2, 3, 4, 8, 16, 32, 64])
        nb = min(nb, n)
        b = first + self.rng.randrange(n - nb + 1)
        return b, nb

    def run(self):
        try:
            self.loop()
        except Exception as e:          # a bug of the campaign, not a violation
            import traceback
            self.camp.internal_error('writer %d: %s\n%s'
                                     % (self.w, e, traceback.format_exc()))

    def loop(self):
        camp = self.camp
        own = camp.regions[self.w]
        shared = camp.shared
        while not self.stop_ev.is_set():
            if self.h is None:
                if not self.connect():
                    time.sleep(0.2)
                    continue
            r = self.rng.random()
            if r < 0.10:
                self.read_check(own)
                continue
            if r < 0.14:
                self.flush()
                continue
            region = shared if (r < 0.32 and shared[1] > 0) else own
            b, nb = self.pick_range(region)
            op = 'write'
            r2 = self.rng.random()
            if r2 < 0.08 and self.can_zero:
                op = 'zero'
            elif r2 < 0.13 and self.can_trim and region is own:
                op = 'trim'
            fua = self.can_fua and op != 'trim' and self.rng.random() < 0.2
            self.seq += 1
            seq = self.seq
            off, length = b * BLOCK, nb * BLOCK
            value = 'Z' if op in ('zero', 'trim') else (self.w, seq)
            buf = write_buffer(camp.tag, self.w, seq, off, length) if op == 'write' else None
            flags = nbd.CMD_FLAG_FUA if fua else 0
            camp.journal('I w%d#%d %s off=0x%x len=%d fua=%d'
                         % (self.w, seq, op, off, length, fua))
            self.current = (op, off, length)
            issue = now()
            err = None
            try:
                if op == 'write':
                    self.h.pwrite(buf, off, flags)
                elif op == 'zero':
                    self.h.zero(length, off, flags)
                else:
                    self.h.trim(length, off, 0)
            except nbd.Error as e:
                err = e
            complete = now()
            self.current = None
            acked = err is None
            camp.model.record(b, nb, value, issue, complete, acked)
            camp.ops.append((self.w, seq, op, off, length, fua, issue, complete,
                             'ack' if acked else errname(err)))
            if acked:
                self.stats['acked'] += 1
                camp.journal('A w%d#%d' % (self.w, seq))
                if self.rng.random() < 0.15:
                    self.flush()
            else:
                self.stats['errors'] += 1
                camp.journal('E w%d#%d %s' % (self.w, seq, err))
                self.after_error()

    def after_error(self):
        try:
            dead = self.h.aio_is_dead() or self.h.aio_is_closed()
        except nbd.Error:
            dead = True
        if dead:
            self.drop()
        time.sleep(0.05)

    def flush(self):
        issue = now()
        try:
            self.h.flush()
        except nbd.Error:
            self.after_error()
            return
        self.camp.flushes.append((issue, now()))

    def read_check(self, own):
        camp = self.camp
        b, nb = self.pick_range(own)
        try:
            data = self.h.pread(nb * BLOCK, b * BLOCK)
        except nbd.Error:
            self.stats['read_errors'] += 1
            self.after_error()
            return
        self.stats['reads'] += 1
        for i in range(nb):
            off = (b + i) * BLOCK
            got = identify(camp.tag, data[i * BLOCK:(i + 1) * BLOCK], off)
            cands = camp.model.candidates(b + i)
            if got not in cands:
                camp.violation(
                    'online-read',
                    'writer %d read block 0x%x through the controller: it holds %s; '
                    'the model allows only %s'
                    % (self.w, off, vname(got), ', '.join(vname(c) for c in cands)),
                    blocks=[b + i])
                return


def errname(e):
    if e is None:
        return 'ok'
    n = e.errno
    if isinstance(n, int):
        return errno.errorcode.get(n, str(n))
    return str(n or e)


# ---------------------------------------------------------------------------
# Fault rules (the faultinject filter).

RULE_KINDS = [
    # kind, weight, rule words (without id/skip/count), all replicas?
    ('w-refuse-eio', 3, 'op=write phase=refuse error=EIO', False),
    ('w-refuse-enospc', 2, 'op=write phase=refuse error=ENOSPC', False),
    ('w-apply-error', 3, 'op=write phase=apply-error error=EIO', False),
    ('zt-refuse', 1, 'op=zero,trim phase=refuse error=EIO', False),
    ('meta-refuse', 2, 'op=write range=-4M- phase=refuse error=EIO', False),
    ('meta-apply-error', 2, 'op=write range=-4M- phase=apply-error error=EIO', False),
    ('flush-refuse', 2, 'op=flush phase=refuse error=EIO', False),
    ('hold', 3, 'op=write phase=hold', False),
    ('meta-hold', 1, 'op=write range=-4M- phase=hold', False),
    ('flush-hold', 1, 'op=flush phase=hold', False),
    ('drop', 2, 'op=write phase=drop', False),
    ('apply-drop', 2, 'op=write phase=apply-drop', False),
    ('exit', 1, 'op=write phase=exit', False),
    ('apply-exit', 2, 'op=write phase=apply-exit', False),
    # The replica keeps the first half of the write (in 4 KiB blocks)
    # and exits: a server killed inside its pwrite(2).
    ('torn-exit', 2, 'op=write phase=torn-exit', False),
    ('read-refuse', 1, 'op=read phase=refuse error=EIO', False),
    ('einval-all', 1, 'op=write phase=refuse error=EINVAL', True),
    ('eio-all', 1, 'op=write phase=apply-error error=EIO', True),
]

ACTION_KINDS = [
    # kind, weight
    ('kill-leg', 4),
    ('kill-controller', 2),
    ('fail-resync', 4),
    ('resync-full', 2),
    ('remove-add', 2),
    ('verify-repair', 2),
    ('rule', 10),
    ('meta-then-fail', 2),
    ('source-fail', 2),
]


# The asynchronous leg's own faults (TORTURE_ASYNC=1): drawn from a
# random generator of their own, so that the synchronous legs' schedule
# of a seed is the same with or without it.
ASYNC_ACTION_KINDS = [
    ('kill-leg', 4),
    ('rule', 6),
    ('remove-add', 2),
    ('fail-resync', 2),
    ('kill-controller-behind', 2),
]

ASYNC = 3                           # the replica (and leg) index of the async leg


def async_config(seed, rnd):
    """The asynchronous leg's configuration for round RND:
    ((async-buffer or None, async-full), delay-write or None).  The
    controller's part holds for three rounds at a time (changing it
    restarts the controller), the delay filter's is drawn per round
    (changing it restarts the leg's replica)."""
    rng = random.Random('%d:%d:async-params' % (seed, (rnd - 1) // 3))
    buf = rng.choice([None, None, '1M', '4M'])
    full = 'block' if rng.random() < 0.3 else 'pull-ahead'
    rng = random.Random('%d:%d:async-delay' % (seed, rnd))
    delay = '2ms' if rng.random() < 0.4 else None
    return (buf, full), delay


def wchoice(rng, items):
    total = sum(i[1] for i in items)
    x = rng.uniform(0, total)
    for i in items:
        x -= i[1]
        if x <= 0:
            return i
    return items[-1]


# ---------------------------------------------------------------------------
# The campaign.

class Violation(Exception):
    pass


class Campaign:
    def __init__(self, cfg):
        self.cfg = cfg
        self.tag = cfg.seed & ((1 << 64) - 1)
        self.tmpdir = tempfile.mkdtemp(prefix='torture.', dir=os.environ.get('TMPDIR'))
        self.violations = []
        self.suspects = []          # evidence short of a violation
        self.vlock = threading.Lock()
        self.internal = []
        self.faults = {}
        self.history = []           # (time, round, text) of every action
        self.ops = []               # every completed request
        self.flushes = []           # (issue, complete) of every acknowledged flush
        self.snapshots = []         # the async leg's, this round: (time, data, why)
        self.round_ops = 0          # len(self.ops) when the round started
        self.round_start = ([], 0.0)    # (values of the volume, time) then
        self.round = 0
        self.jfile = open(os.path.join(self.tmpdir, 'journal.log'), 'w')
        self.jlock = threading.Lock()
        self.replicas = []
        self.rules = {}             # replica index -> list of rule lines
        self.hold_until = 0.0       # held requests may land until then
        self.hold_armed = False
        self.killed_ctl = False
        self.verify_proc = None
        self.sanitizer_offset = 0
        self.fired_seen = {}        # log path -> bytes parsed
        self.expected_dead = set()  # replicas we killed (not to restart)
        self.exits_fired = {}       # replica -> exit rules fired, not yet seen
        self.nlegs = 3
        self.uris = []
        self.async_params = None    # (buffer, full) of the running controller
        self.async_delay = None     # delay-write of replica 3's delay filter
        self.async_seen = {}        # async state -> samples seen while faults ran
        self.async_max_lag = 0
        self.async_max_pull_aheads = 0
        self.last_sample = 0.0
        self.async_checked = 0      # rounds whose async leg was compared
        self.async_snapshots_checked = 0
        self.async_status = {'index': None, 'async': None}

    # -- bookkeeping --------------------------------------------------------

    def journal(self, line):
        with self.jlock:
            self.jfile.write('%s %s\n' % (stamp(), line))

    def count(self, kind, n=1):
        self.faults[kind] = self.faults.get(kind, 0) + n

    def act(self, text):
        self.history.append((stamp(), self.round, text))
        self.journal('ACT r%d %s' % (self.round, text))
        say('round %d: %s' % (self.round, text))

    def violation(self, kind, text, blocks=()):
        with self.vlock:
            self.violations.append({'kind': kind, 'round': self.round,
                                    'text': text, 'blocks': list(blocks),
                                    'time': stamp()})
        say('VIOLATION (%s) in round %d: %s' % (kind, self.round, text))

    def internal_error(self, text):
        self.internal.append(text)
        say('INTERNAL ERROR (campaign bug, not a violation): ' + text)

    # -- processes ----------------------------------------------------------

    def replica_argv(self, i):
        img = os.path.join(self.tmpdir, 'r%d.img' % i)
        argv = [self.cfg.nbdkit, '-f', '-U', self.replicas[i].sock,
                '-P', self.replicas[i].pidfile]
        if self.cfg.faultinject:
            argv.append('--filter=' + self.cfg.faultinject)
        if i == ASYNC and self.async_delay:
            argv.append('--filter=delay')
        argv += ['file', 'file=' + img]
        if i == ASYNC and self.async_delay:
            argv.append('delay-write=' + self.async_delay)
        if self.cfg.faultinject:
            argv += ['rules=' + self.rules_path(i), 'log=' + self.fi_log(i)]
        return argv

    def rules_path(self, i):
        return os.path.join(self.tmpdir, 'r%d.rules' % i)

    def fi_log(self, i):
        return os.path.join(self.tmpdir, 'r%d.fault.log' % i)

    def ctl_argv(self):
        c = self.cfg
        s = self.ctl_server
        argv = [c.nbdkit, '-f', '-v', '-U', s.sock, '-P', s.pidfile]
        common = ['control=' + self.ctl, 'timeout=%d' % c.timeout]
        if c.shape == 'plugin':
            argv += [c.plugin] + [self.replicas[i].uri for i in range(3)]
        else:
            argv += ['--filter=' + c.filter]
            if c.faultinject:
                argv.append('--filter=' + c.faultinject)
            argv += ['file', 'file=' + os.path.join(self.tmpdir, 'l0.img')]
            if c.faultinject:
                argv += ['rules=' + self.rules_path(0), 'log=' + self.fi_log(0)]
            argv += ['replica=' + self.replicas[i].uri for i in (1, 2)]
        if c.async_leg:
            buf, full = self.async_params
            argv.append('async=' + self.replicas[ASYNC].uri)
            if buf:
                argv.append('async-buffer=' + buf)
            argv.append('async-full=' + full)
        return argv + common

    def setup(self):
        c = self.cfg
        if c.async_leg:
            self.async_params, self.async_delay = async_config(c.seed, 1)
        for i in self.replica_ids():
            r = Server('r%d' % i, self.tmpdir, lambda i=i: self.replica_argv(i))
            self.replicas.append(r)
            self.rules[i] = []
            self.write_rules(i)
        for i in self.replica_ids():
            img = os.path.join(self.tmpdir, 'r%d.img' % i)
            with open(img, 'wb') as f:
                f.truncate(64 * MiB)
        if c.shape == 'filter':
            with open(os.path.join(self.tmpdir, 'l0.img'), 'wb') as f:
                f.truncate(64 * MiB)
        env = dict(os.environ)
        if c.preload:
            env['LD_PRELOAD'] = c.preload
        self.ctl = os.path.join(self.tmpdir, 'c.ctl')
        self.ctl_server = Server('c', self.tmpdir, self.ctl_argv, env=env)
        for i in self.leg_servers():
            if not self.replicas[i].start():
                raise RuntimeError('replica %d did not start (see %s)'
                                   % (i, self.replicas[i].log))
        if not self.start_controller():
            raise RuntimeError('the controller did not start (see %s)'
                               % self.ctl_server.log)
        st = self.wait_status(lambda s: s['volume']['state'] == 'healthy', 60)
        if st is None:
            raise RuntimeError('the volume did not become healthy at start')
        self.size = st['volume']['size']
        self.uris = [l['uri'] for l in st['legs']]
        if c.async_leg:
            # Legs 0-2 (the local leg first in the filter shape), then
            # the asynchronous one.
            if len(self.uris) != 4 or self.uris[ASYNC] != self.replicas[ASYNC].uri \
                    or st['legs'][ASYNC].get('async') is None:
                raise RuntimeError('the asynchronous leg is not leg 3: %s' % self.uris)
        nblocks = self.size // BLOCK
        self.model = Model(nblocks)
        self.round_start = (['Z'] * nblocks, 0.0)
        shared = nblocks // 4
        per = (nblocks - shared) // c.nwriters
        self.regions = [(w * per, per) for w in range(c.nwriters)]
        self.shared = (c.nwriters * per, nblocks - c.nwriters * per)
        say('volume size %d (%d blocks), %d writers of %d blocks each, '
            'shared region %d blocks at 0x%x'
            % (self.size, nblocks, c.nwriters, per, self.shared[1],
               self.shared[0] * BLOCK))
        self.writers = [Writer(self, w) for w in range(c.nwriters)]

    def leg_servers(self):
        """Replica indexes that are separate servers."""
        legs = [0, 1, 2] if self.cfg.shape == 'plugin' else [1, 2]
        return legs + [ASYNC] if self.cfg.async_leg else legs

    def replica_ids(self):
        """Every replica index (rule files, images)."""
        return range(4) if self.cfg.async_leg else range(3)

    def start_controller(self):
        # Started means the engine says so in this launch's log: in the
        # filter shape the engine starts in .after_fork, after nbdkit has
        # written its pidfile and bound its socket, so a start that fails
        # (a leg lost during crash recovery, say) is an exit after those
        # appeared: a refused start, to be retried, not a crash.
        log = self.ctl_server.log
        try:
            since = os.path.getsize(log)
        except OSError:
            since = 0

        def started():
            if not os.path.exists(self.ctl):
                return False
            try:
                with open(log, 'rb') as f:
                    f.seek(since)
                    text = f.read()
            except OSError:
                return False
            return re.search(rb'debug: volume (started|created) at generation',
                             text) is not None
        ok = self.ctl_server.start(timeout=90, extra_wait=started)
        if ok:
            self.killed_ctl = False
        return ok

    # -- control ------------------------------------------------------------

    def nbdrep(self, *args, timeout=30):
        rc, out, err = run([self.cfg.nbdrep] + list(args), timeout=timeout)
        return rc, out.strip(), err.strip()

    def status(self):
        rc, out, err = self.nbdrep('status', '--json', self.ctl)
        if rc not in (0, 3):
            return None
        try:
            return json.loads(out)
        except ValueError:
            return None

    def wait_status(self, pred, secs):
        deadline = now() + secs
        while True:
            s = self.status()
            if s is not None and pred(s):
                return s
            if now() >= deadline:
                return None
            time.sleep(0.2)

    def leg_index(self, st, i):
        """The current index of leg i (by URI; by position for the local
        leg), and its state; (None, None) if it is not in the volume."""
        if st is None:
            return None, None
        if self.cfg.shape == 'filter' and i == 0:
            for l in st['legs']:
                if l['index'] == 0:
                    return 0, l['state']
        found = (None, None)
        for l in st['legs']:
            if l['uri'] == self.uris[i]:
                if l['state'] != 'removed':
                    return l['index'], l['state']
                found = (l['index'], 'removed')
        return found

    # -- fault rules ----------------------------------------------------------

    def write_rules(self, i):
        path = self.rules_path(i)
        tmp = path + '.tmp'
        with open(tmp, 'w') as f:
            for line in self.rules[i]:
                f.write(line + '\n')
        os.rename(tmp, path)

    def clear_rules(self):
        for i in self.replica_ids():
            if self.rules[i]:
                self.rules[i] = []
                self.write_rules(i)

    def count_firings(self):
        if not self.cfg.faultinject:
            return
        for i in self.replica_ids():
            path = self.fi_log(i)
            try:
                with open(path) as f:
                    f.seek(self.fired_seen.get(path, 0))
                    text = f.read()
                    self.fired_seen[path] = f.tell()
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                w = line.split()
                if len(w) >= 2 and w[0] == 'fire':
                    kind = w[1].split('.')[0]
                    self.count('fired:' + kind)
                    self.journal('FIRE r%d %s' % (i, line))
                    if len(w) >= 3 and w[2] in ('exit', 'apply-exit', 'torn-exit'):
                        self.exits_fired[i] = self.exits_fired.get(i, 0) + 1

    # -- the schedule -------------------------------------------------------

    def make_schedule(self, rnd):
        rng = random.Random('%d:%d' % (self.cfg.seed, rnd))
        dur = rng.uniform(6, 18)
        legs = [0, 1, 2]
        victims = rng.sample(legs, 2 if rng.random() < 0.2 else 1)
        events = []
        nfaults = rng.randint(2, 6)
        # A slow resync makes resyncs overlap the other faults.
        rate = rng.choice([0, 0, 4 * MiB, 16 * MiB, 64 * MiB])
        events.append((0.0, 'set-rate', rate))
        kinds = ACTION_KINDS if self.cfg.faultinject else \
            [k for k in ACTION_KINDS if k[0] not in ('rule', 'meta-then-fail')]
        for k in range(nfaults):
            t = rng.uniform(0.5, dur * 0.75)
            kind = wchoice(rng, kinds)[0]
            leg = rng.choice(victims)
            if kind == 'kill-leg':
                events.append((t, 'kill-leg', leg))
                events.append((t + rng.uniform(0.3, 5), 'restart-leg', leg))
            elif kind == 'kill-controller':
                events.append((t, 'kill-controller', None))
                events.append((t + rng.uniform(0, 2), 'start-controller', None))
            elif kind == 'fail-resync':
                events.append((t, 'fail', leg))
                events.append((t + rng.uniform(0.3, 4), 'resync', leg))
            elif kind == 'resync-full':
                events.append((t, 'resync-full', leg))
            elif kind == 'remove-add':
                blank = rng.random() < 0.5
                events.append((t, 'remove', leg))
                events.append((t + rng.uniform(0.3, 3), 'add-blank' if blank else 'add', leg))
            elif kind == 'verify-repair':
                events.append((t, 'verify-repair', None))
            elif kind == 'meta-then-fail':
                # The recording of a leg's failure fails on the others.
                others = tuple(l for l in legs if l != leg)
                rk = wchoice(rng, [r for r in RULE_KINDS if r[0].startswith('meta')])
                words = rk[2]
                if 'hold' in words:
                    words += ' secs=%d' % (self.cfg.timeout + rng.randint(1, 4))
                rid = '%s.r%dn%d' % (rk[0], rnd, k)
                line = 'id=%s %s skip=0 count=%d' % (rid, words, rng.choice([1, 2, 4]))
                events.append((t, 'arm', (others, line)))
                events.append((t + 0.1, rng.choice(['fail', 'kill-leg']), leg))
                events.append((t + rng.uniform(2, 5), 'disarm', (others, rid)))
                events.append((t + rng.uniform(2, 6), 'restart-leg', leg))
            elif kind == 'source-fail':
                # A resync whose source leaves uptodate under it.
                src = rng.choice([l for l in legs if l != leg])
                events.append((t, 'set-rate', rng.choice([4 * MiB, 8 * MiB])))
                events.append((t + 0.05, 'resync-full', leg))
                events.append((t + rng.uniform(0.3, 2), rng.choice(['fail', 'kill-leg']), src))
                events.append((t + rng.uniform(2.5, 5), 'restart-leg', src))
            else:
                kinds_ok = RULE_KINDS
                if self.cfg.shape == 'filter' and leg == 0:
                    # Leg 0's fault filter runs inside the controller:
                    # an exit or a drop there would be the controller's.
                    kinds_ok = [r for r in RULE_KINDS
                                if not any(p in r[2] for p in ('exit', 'drop'))]
                rk = wchoice(rng, kinds_ok)
                rid = '%s.r%dn%d' % (rk[0], rnd, k)
                line = self.rule_line(rng, rk, rid)
                targets = legs if rk[3] else [leg]
                events.append((t, 'arm', (tuple(targets), line)))
                events.append((t + rng.uniform(1, 6), 'disarm', (tuple(targets), rid)))
        if self.cfg.async_leg:
            events += self.async_schedule(rnd, dur)
        events.sort(key=lambda e: e[0])
        return dur, victims, events

    def rule_line(self, rng, rk, rid):
        """A fault-filter rule of kind RK named RID, its hold, skip and
        count drawn from RNG."""
        words = rk[2]
        if 'hold' in words:
            words += ' secs=%d' % (self.cfg.timeout + rng.randint(1, 4))
        skip = rng.choice([0, 0, 1, 3, 10, 30]) if 'range=' not in words \
            else rng.choice([0, 0, 1, 2])
        cnt = rng.choice([1, 1, 1, 2, 3, 8])
        return 'id=%s %s skip=%d count=%d' % (rid, words, skip, cnt)

    def async_schedule(self, rnd, dur):
        """The asynchronous leg's own faults in round RND, and when its
        replica is frozen for a snapshot."""
        rng = random.Random('%d:%d:async-snapshot' % (self.cfg.seed, rnd))
        events = [(rng.uniform(0.5, dur), 'async-snapshot', None)
                  for _ in range(rng.choice([0, 1, 2, 3]))]
        rng = random.Random('%d:%d:async' % (self.cfg.seed, rnd))
        if rng.random() < 0.2:
            return events           # only the others' faults this round
        kinds = ASYNC_ACTION_KINDS if self.cfg.faultinject else \
            [k for k in ASYNC_ACTION_KINDS if k[0] != 'rule']
        for k in range(rng.randint(1, 3)):
            t = rng.uniform(0.5, dur * 0.75)
            kind = wchoice(rng, kinds)[0]
            if kind == 'kill-leg':
                events.append((t, 'kill-leg', ASYNC))
                events.append((t + rng.uniform(0.3, 5), 'restart-leg', ASYNC))
            elif kind == 'remove-add':
                blank = rng.random() < 0.5
                events.append((t, 'remove', ASYNC))
                events.append((t + rng.uniform(0.3, 3), 'add-blank' if blank else 'add',
                               ASYNC))
            elif kind == 'fail-resync':
                events.append((t, 'fail', ASYNC))
                events.append((t + rng.uniform(0.3, 4), 'resync', ASYNC))
            elif kind == 'kill-controller-behind':
                events.append((t, 'kill-controller-behind', None))
                events.append((t + rng.uniform(0, 2), 'start-controller', None))
            else:
                rk = wchoice(rng, [r for r in RULE_KINDS if not r[3]])
                rid = '%s.r%da%d' % (rk[0], rnd, k)
                line = self.rule_line(rng, rk, rid)
                events.append((t, 'arm', ((ASYNC,), line)))
                events.append((t + rng.uniform(1, 6), 'disarm', ((ASYNC,), rid)))
        return events

    def leg_ok_for(self, kind, leg):
        if self.cfg.shape == 'filter' and leg == 0:
            return kind in ('fail', 'resync', 'resync-full', 'arm', 'disarm')
        return True

    def do_event(self, ev):
        _, kind, arg = ev
        if kind in ('kill-leg', 'restart-leg', 'fail', 'resync', 'resync-full',
                    'remove', 'add', 'add-blank') and not self.leg_ok_for(kind, arg):
            self.act('%s leg %d: not applicable to the local leg: skipped' % (kind, arg))
            return
        if kind == 'kill-leg':
            r = self.replicas[arg]
            if r.alive():
                r.kill9()
                self.expected_dead.add(arg)
                self.count('kill-leg')
                self.act('kill -9 replica %d' % arg)
            else:
                self.act('kill -9 replica %d: already down' % arg)
        elif kind == 'set-rate':
            rc, out, err = self.nbdrep('set', self.ctl, 'resync-rate', str(arg))
            self.act('nbdrep set resync-rate %d: rc=%s %s' % (arg, rc, (out + err)[:200]))
        elif kind == 'restart-leg':
            self.restart_replica(arg)
        elif kind == 'kill-controller':
            self.kill_controller()
        elif kind == 'kill-controller-behind':
            self.kill_controller(async_behind=True)
        elif kind == 'async-snapshot':
            self.async_snapshot()
        elif kind == 'start-controller':
            self.ensure_controller()
        elif kind in ('fail', 'resync', 'resync-full', 'remove'):
            st = self.status()
            idx, state = self.leg_index(st, arg)
            if idx is None or state == 'removed':
                self.act('%s leg %d: not in the volume (%s): skipped' % (kind, arg, state))
                return
            if kind == 'fail':
                args = ('fail', self.ctl, str(idx))
            elif kind == 'resync':
                args = ('resync', self.ctl, str(idx))
            elif kind == 'resync-full':
                args = ('resync', self.ctl, str(idx), '--full')
            else:
                args = ('remove', self.ctl, str(idx))
            rc, out, err = self.nbdrep(*args)
            if rc == 0:
                self.count(kind)
            self.act('nbdrep %s (leg %d, index %s, was %s): rc=%s %s'
                     % (' '.join(a for a in args if a != self.ctl), arg, idx,
                        state, rc, (out + ' ' + err).strip()[:200]))
        elif kind in ('add', 'add-blank'):
            self.add_leg(arg, kind == 'add-blank')
        elif kind == 'verify-repair':
            if self.verify_proc is not None and self.verify_proc.poll() is None:
                self.act('verify --repair: one still runs: skipped')
                return
            self.verify_proc = subprocess.Popen(
                [self.cfg.nbdrep, 'verify', self.ctl, '--repair', '--wait'],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)
            self.count('verify-repair')
            self.act('nbdrep verify --repair --wait started (pid %d)' % self.verify_proc.pid)
        elif kind == 'arm':
            targets, line = arg
            for i in targets:
                self.rules[i].append(line)
                self.write_rules(i)
            if 'phase=hold' in line:
                self.hold_armed = True
            self.count('rule-armed:' + line.split()[0][3:].split('.')[0])
            self.act('arm rule on replica(s) %s: %s' % (','.join(map(str, targets)), line))
        elif kind == 'disarm':
            targets, rid = arg
            for i in targets:
                self.rules[i] = [l for l in self.rules[i]
                                 if not l.startswith('id=%s ' % rid)]
                self.write_rules(i)
            self.act('disarm rule %s' % rid)

    def restart_replica(self, i):
        r = self.replicas[i]
        self.expected_dead.discard(i)
        if r.alive():
            self.act('restart replica %d: it is running' % i)
            return True
        ok = r.start()
        self.act('restart replica %d: %s' % (i, 'ok' if ok else 'FAILED to start'))
        return ok

    def drain_holds(self):
        """Clear every rule and wait until no held request can still
        land (see the design note)."""
        self.clear_rules()
        if self.hold_armed:
            wait = self.cfg.timeout + 4 + 1.5
            self.act('rules cleared; waiting %.1f s for held requests to land' % wait)
            time.sleep(wait)
            self.hold_armed = False

    def kill_controller(self, async_behind=False):
        if not self.ctl_server.alive():
            self.act('kill -9 controller: already down')
            return
        self.drain_holds()
        how = ''
        if async_behind:
            # Wait (a little) until the asynchronous leg holds less than
            # the volume: writes queued or unflushed, or behind.
            deadline = now() + 3
            while True:
                a = self.async_sample()
                if a is not None and (a['state'] != 'replicating' or a['lag_bytes'] > 0):
                    how = ' (async leg %s, lag %d bytes)' % (a['state'], a['lag_bytes'])
                    self.count('kill-controller-async-%s' % (
                        'lagging' if a['state'] == 'replicating' else a['state']))
                    break
                if now() >= deadline:
                    how = ' (async leg not behind: %s)' % (a and a['state'])
                    self.count('kill-controller-async-caught-up')
                    break
                time.sleep(0.1)
        self.ctl_server.kill9()
        self.killed_ctl = True
        self.count('kill-controller')
        self.act('kill -9 controller' + how)

    def ensure_controller(self):
        if self.ctl_server.alive():
            return True
        if not self.killed_ctl:
            self.controller_died()
        # Every member must be reachable for an election with quorum 1.
        for i in self.leg_servers():
            if not self.replicas[i].alive():
                self.restart_replica(i)
        self.drain_holds()
        for attempt in range(3):
            # A replica may have died meanwhile: stock nbdkit sometimes
            # aborts (raw_send_socket: Assertion `sock >= 0') when the
            # controller it served is killed, or a failed start dropped it.
            self.reap_replicas()
            for i in self.leg_servers():
                if not self.replicas[i].alive():
                    self.restart_replica(i)
            ok = self.start_controller()
            self.act('start controller: %s' % ('ok' if ok else 'FAILED'))
            if ok:
                self.count('restart-controller')
                return True
            self.ctl_server.kill9()
            time.sleep(1)
        self.violation('start-refused',
                       'the controller does not start again with every replica up '
                       'and no fault rule armed; its log: %s\n%s'
                       % (self.ctl_server.log, tail(self.ctl_server.log, 30)))
        return False

    def controller_died(self):
        rc = self.ctl_server.proc.returncode if self.ctl_server.proc else None
        self.violation('controller-crash',
                       'the controller exited by itself (status %s); log %s:\n%s'
                       % (rc, self.ctl_server.log, tail(self.ctl_server.log, 40)))
        self.killed_ctl = True      # reported once

    def add_leg(self, i, blank):
        st = self.status()
        idx, state = self.leg_index(st, i)
        if st is None:
            self.act('add leg %d: no status (controller down?): skipped' % i)
            return
        if state != 'removed' and idx is not None:
            self.act('add leg %d: it is %s, not removed: skipped' % (i, state))
            return
        if blank:
            r = self.replicas[i]
            r.kill9()
            img = os.path.join(self.tmpdir, 'r%d.img' % i)
            os.unlink(img)
            with open(img, 'wb') as f:
                f.truncate(64 * MiB)
            r.start()
            self.count('blank-leg')
        extra = ('--async',) if i == ASYNC else ()
        rc, out, err = self.nbdrep('add', self.ctl, self.uris[i], *extra)
        if rc == 0:
            self.count('add-async' if i == ASYNC else 'add')
        self.act('nbdrep add %s%s (leg %d%s): rc=%s %s'
                 % (self.uris[i], ' --async' if extra else '', i,
                    ', blanked' if blank else '', rc, (out + ' ' + err).strip()[:200]))
        if rc != 0 and i == ASYNC and not blank and 'split brain' in out + err:
            # The asynchronous leg's generation is its last full
            # resync's: once more than 32 bumps old it has left the
            # history, and its own storage is refused when added back
            # (test-async-readd-old-gen.sh).
            text = ('nbdrep add --async of the asynchronous leg\'s own storage, '
                    'removed moments ago, was refused: %s' % (out + ' ' + err).strip())
            self.violation('async-readd-refused', text + '\n' + self.status_dump())

    # -- a round --------------------------------------------------------------

    def run_round(self, rnd):
        self.round = rnd
        if self.cfg.async_leg:
            self.reconfigure(rnd)
            if self.violations:
                return
        dur, victims, events = self.make_schedule(rnd)
        say('=== round %d: %.1f s, victims %s%s, schedule:'
            % (rnd, dur, victims, '' if not self.cfg.async_leg else
               ', async leg: async-buffer=%s async-full=%s delay-write=%s'
               % (self.async_params[0] or 'default', self.async_params[1],
                  self.async_delay or 'none')))
        for ev in events:
            say('      +%6.2f %s %s' % (ev[0], ev[1], fmt_arg(ev[2])))
        self.history.append((stamp(), rnd, 'round %d schedule: %s'
                             % (rnd, '; '.join('+%.2f %s %s' % (e[0], e[1], fmt_arg(e[2]))
                                               for e in events))))
        self.round_ops = len(self.ops)
        self.snapshots = []
        for w in self.writers:
            w.rng = random.Random('%d:%d:w%d' % (self.cfg.seed, rnd, w.w))
        for w in self.writers:
            w.stop_ev.clear()
        self.writers = [self.fresh_writer(w) for w in self.writers]
        for w in self.writers:
            w.start()
        t0 = now()
        pending = list(events)
        while True:
            t = now() - t0
            while pending and pending[0][0] <= t:
                self.do_event(pending.pop(0))
            if self.violations:
                break
            self.watch_processes()
            if self.cfg.async_leg and now() >= self.last_sample + 1:
                self.last_sample = now()
                self.async_sample()
            if not pending and t >= dur:
                break
            time.sleep(0.05)
        self.quiesce()
        if not self.violations and self.snapshots:
            self.check_snapshots()
        if not self.violations:
            self.oracle()
        self.count_firings()
        self.check_sanitizer()

    def fresh_writer(self, old):
        """A thread object cannot be restarted: carry the state over."""
        w = Writer(self, old.w)
        w.seq, w.h, w.rng, w.stats = old.seq, old.h, old.rng, old.stats
        for a in ('can_trim', 'can_zero', 'can_fua'):
            if hasattr(old, a):
                setattr(w, a, getattr(old, a))
        return w

    def watch_processes(self):
        if not self.ctl_server.alive() and not self.killed_ctl:
            self.controller_died()
            self.ensure_controller()
        self.reap_replicas()

    def reap_replicas(self):
        """Restart every replica that exited by itself (an exit rule, or
        a crash of stock nbdkit), counting it."""
        for i in self.leg_servers():
            r = self.replicas[i]
            if r.proc is not None and not r.alive() and i not in self.expected_dead:
                rc = r.proc.returncode
                # An exit rule, or a crash of the replica server (stock
                # nbdkit and the fault filter: not the engine; a suspect).
                self.count_firings()
                if self.exits_fired.get(i, 0) > 0:
                    self.exits_fired[i] = 0     # several may fire at once
                    self.act('replica %d exited (exit rule; status %s): restarting it'
                             % (i, rc))
                    self.count('replica-exited')
                else:
                    self.act('replica %d exited by itself with no exit rule fired '
                             '(status %s): restarting it' % (i, rc))
                    self.count('replica-crashed')
                    self.suspects.append('round %d: replica %d exited with status %s '
                                         'and no exit rule fired; its log %s ends:\n%s'
                                         % (self.round, i, rc, r.log, tail(r.log, 15)))
                time.sleep(0.3)
                self.restart_replica(i)

    def quiesce(self):
        say('round %d: quiesce' % self.round)
        for w in self.writers:
            w.stop_ev.set()
        deadline = now() + max(120, 4 * self.cfg.timeout + 30)
        for w in self.writers:
            w.join(max(0.1, deadline - now()))
        stuck = [w for w in self.writers if w.is_alive()]
        if stuck:
            self.violation('hang', 'writers %s still wait for a request after %d s: %s\n%s'
                           % ([w.w for w in stuck], 120,
                              [w.current for w in stuck], self.status_dump()))
            return
        self.drain_holds()
        if self.verify_proc is not None:
            try:
                out, _ = self.verify_proc.communicate(timeout=120)
                rc = self.verify_proc.returncode
                self.act('verify --repair finished: rc=%s %s' % (rc, out.strip()[-300:]))
                self.count('verify-done-rc%s' % rc)
                m = re.search(r'checked, (\S+ \S+|0) mismatched', out)
                if m and not m.group(1).startswith('0'):
                    # Uptodate legs differed while verify held the chunk
                    # lock: a divergence the repair may have hidden.
                    self.suspects.append('round %d: verify --repair found mismatches '
                                         'among uptodate legs: %s'
                                         % (self.round, out.strip()[-1500:]))
                    self.count('verify-mismatch')
            except subprocess.TimeoutExpired:
                self.verify_proc.kill()
                self.verify_proc.wait(timeout=30)
                self.violation('hang', 'nbdrep verify --repair --wait did not finish '
                               'in 120 s after the round\n' + self.status_dump())
            self.verify_proc = None
        for i in self.leg_servers():
            if not self.replicas[i].alive():
                self.restart_replica(i)
        if not self.ensure_controller():
            return
        rc, out, err = self.nbdrep('set', self.ctl, 'resync-rate', '0')
        # Legs removed (and not added back) come back now.
        st = self.status()
        for i in ([0, 1, 2, ASYNC] if self.cfg.async_leg else [0, 1, 2]):
            if not self.leg_ok_for('add', i):
                continue
            idx, state = self.leg_index(st, i)
            if idx is None or state == 'removed':
                self.add_leg(i, False)
        # Wait for healthy, nudging legs that stay failed or stale.
        deadline = now() + self.cfg.healthy_secs
        next_nudge = now() + 15
        while True:
            st = self.status()
            if st is not None and st['volume']['state'] == 'healthy' and \
                    all(self.leg_index(st, i)[1] == 'uptodate' for i in range(3)):
                break
            if now() >= deadline:
                self.violation('hang', 'the volume is not healthy %d s after the '
                               'round\n%s' % (self.cfg.healthy_secs, self.status_dump()))
                return
            if st is not None and now() >= next_nudge:
                next_nudge = now() + 15
                for i in range(3):
                    idx, state = self.leg_index(st, i)
                    if state in ('failed', 'stale'):
                        rc, out, err = self.nbdrep('resync', self.ctl, str(idx))
                        self.act('nudge: nbdrep resync %s (leg %d %s): rc=%s %s'
                                 % (idx, i, state, rc, (out + err)[:200]))
            if not self.ctl_server.alive():
                if not self.ensure_controller():
                    return
            time.sleep(0.3)
        self.healthy_status = st
        if self.cfg.async_leg and not self.wait_async(deadline):
            return
        say('round %d: healthy (generation %s); writers so far: %s'
            % (self.round, st['volume']['generation'],
               ', '.join('w%d %d acked/%d failed/%d reads' % (w.w, w.stats['acked'],
                                                           w.stats['errors'], w.stats['reads'])
                         for w in self.writers)))

    def stop_controller(self):
        """Stop the controller with SIGTERM, as an operator would; it must
        exit cleanly within 60 s."""
        if not self.ctl_server.alive():
            return
        rc, hung = self.ctl_server.stop(60)
        self.killed_ctl = True      # not a crash
        if hung:
            unloaded = 'debug: replicate: unload' in open(
                self.ctl_server.log, errors='replace').read()
            if not (self.cfg.preload and unloaded):
                self.violation('shutdown-hang', 'the controller did not exit within '
                               '60 s of SIGTERM')
        elif rc != 0:
            self.check_sanitizer()
            if not any(v['kind'] == 'sanitizer' for v in self.violations):
                text = tail(self.ctl_server.log, 60)
                leak = text.find('ERROR: LeakSanitizer')
                if not (leak >= 0 and self.only_nbdkit_leaks(text[leak:])):
                    self.violation('controller-exit', 'the controller exited with '
                                   'status %s after SIGTERM:\n%s' % (rc, text))

    # -- the asynchronous leg ---------------------------------------------------

    def async_leg(self, st):
        """The asynchronous leg's entry in status ST, or None (removed)."""
        if st is None:
            return None
        for l in st['legs']:
            if l['uri'] == self.uris[ASYNC] and l['state'] != 'removed':
                return l
        return None

    def async_sample(self):
        """The asynchronous leg's async object now (state, lag_bytes ...),
        or None; remembered for the summary."""
        l = self.async_leg(self.status())
        a = l and l.get('async')
        if a is None:
            return None
        key = '%s/%s' % (l['state'], a['state'])
        self.async_seen[key] = self.async_seen.get(key, 0) + 1
        self.async_max_lag = max(self.async_max_lag, a.get('lag_bytes', 0))
        self.async_max_pull_aheads = max(self.async_max_pull_aheads,
                                         a.get('pull_aheads', 0))
        return a

    def async_snapshot(self):
        """Freeze the asynchronous leg's replica (SIGSTOP: a request it
        is applying completes its pwrite first) and copy its data area,
        if the status says the leg is consistent before and during the
        freeze; checked after the round (check_snapshots)."""
        r = self.replicas[ASYNC]

        def consistent():
            l = self.async_leg(self.status())
            a = l and l.get('async')
            if a is None or not a.get('consistent') or l['resync'] is not None:
                return None
            return '%s/%s lag %d' % (l['state'], a['state'], a['lag_bytes'])
        if not r.alive():
            self.act('async snapshot: replica %d is down: skipped' % ASYNC)
            return
        before = consistent()
        if before is None:
            self.act('async snapshot: the leg is not consistent: skipped')
            self.count('async-snapshot-skipped')
            return
        pid = r.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            during = consistent()
            data = None
            if during is not None:
                data = self.read_all(path=os.path.join(self.tmpdir, 'r%d.img' % ASYNC))
        finally:
            os.kill(pid, signal.SIGCONT)
        if data is None:
            self.act('async snapshot: the leg is no longer consistent: skipped')
            self.count('async-snapshot-skipped')
            return
        self.snapshots.append((now(), data, 'before: %s; frozen: %s' % (before, during)))
        self.count('async-snapshot')
        self.act('async snapshot %d taken (before: %s; frozen: %s)'
                 % (len(self.snapshots), before, during))

    def check_snapshots(self):
        """Every snapshot of the asynchronous leg must be a crash-consistent
        state: valid blocks only; and if it holds a write issued after a
        flush F was acknowledged, it holds, per block, a value the volume
        could have held after F (every write acknowledged before F was
        issued is there or overwritten by one not ordered before it).
        Sound with concurrent writers: see the rules below."""
        t = now()
        nblocks = self.size // BLOCK
        start_vals, start_t = self.round_start
        ops = self.ops[self.round_ops:]
        by_id = {}
        per_block = {}
        for o in ops:
            w, seq, op, off, length, fua, issue, complete, res = o
            value = (w, seq) if op == 'write' else 'Z'
            if op == 'write':
                by_id[(w, seq)] = o
            for b in range(off // BLOCK, (off + length) // BLOCK):
                per_block.setdefault(b, []).append((value, issue, complete, res == 'ack'))
        flushes = sorted(self.flushes)
        for n, (taken, data, why) in enumerate(self.snapshots, 1):
            vals = [identify(self.tag, data[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                    for b in range(nblocks)]
            bad = [b for b in range(nblocks) if not (vals[b] == 'Z' or
                                                      isinstance(vals[b], tuple))]
            # The newest write it holds, by issue time: every flush
            # acknowledged before that write was issued has its epoch
            # flushed on the leg (the marker is queued when the flush
            # starts, the write after it is issued).
            t_new = max([by_id[v][6] for v in vals if v in by_id] or [0.0])
            fl = [f for f in flushes if f[1] < t_new and f[0] >= start_t]
            # With no such flush: the round's start (a flush) plus any
            # of the round's requests.
            fi = fl[-1][0] if fl else float('inf')
            allowed = {}
            for b in range(nblocks):
                if b in bad:
                    continue
                # The candidates after F, as the model computes them
                # (an acknowledged write W drops what completed before
                # W was issued), from the round's start: those that
                # completed before F was issued, then all the others.
                cands = [(start_vals[b], start_t, start_t, True)]
                later = []
                for e in per_block.get(b, ()):
                    if fi == float('inf'):
                        later.append(e)
                    elif e[2] < fi:
                        if e[3]:
                            cands = [c for c in cands if c[2] >= e[1]]
                        cands.append(e)
                    else:
                        later.append(e)
                if vals[b] not in [c[0] for c in cands + later]:
                    bad.append(b)
                    allowed[b] = cands + later
            if bad:
                bad.sort()
                self.violation('async-inconsistent',
                               'snapshot %d of the asynchronous leg (taken at %.2f, %s) '
                               'is not a crash-consistent state in %d blocks (its newest '
                               'write was issued at %.2f, after the flush issued at %s '
                               'was acknowledged):\n%s'
                               % (n, taken - T0, why, len(bad), t_new - T0,
                                  '%.2f' % (fi - T0) if fl else 'none',
                                  self.describe_snapshot(bad, vals, allowed)),
                               blocks=bad)
                path = os.path.join(self.tmpdir, 'async-snapshot-r%d-%d.img' % (self.round, n))
                with open(path, 'wb') as f:
                    f.write(data)
                say('snapshot kept as %s' % path)
                break
        say('round %d: %d snapshots of the asynchronous leg checked (%.1f s)'
            % (self.round, len(self.snapshots), now() - t))
        if not self.violations:
            self.async_snapshots_checked += len(self.snapshots)
        self.snapshots = []

    def describe_snapshot(self, bad, vals, allowed, limit=20):
        """What the snapshot holds at the first BAD blocks, and what the
        check allowed there."""
        lines = []
        for b in bad[:limit]:
            lines.append('  block 0x%x: the snapshot holds %s; allowed: %s'
                         % (b * BLOCK, vname(vals[b]),
                            ', '.join('%s(%s, issued %.2f, done %.2f)'
                                      % (vname(e[0]), 'acked' if e[3] else 'not acked',
                                         e[1] - T0, e[2] - T0)
                                      for e in allowed.get(b, ())) or 'a valid block'))
            lines.append('    last requests over 0x%x: %s' % (b * BLOCK, self.ops_over(b * BLOCK)))
        if len(bad) > limit:
            lines.append('  ... and %d more blocks' % (len(bad) - limit))
        return '\n'.join(lines)

    def reconfigure(self, rnd):
        """Give the asynchronous leg round RND's configuration (see
        async_config): restart the controller cleanly if async-buffer or
        async-full change, and the leg's replica if its delay does."""
        params, delay = async_config(self.cfg.seed, rnd)
        if params == self.async_params and delay == self.async_delay:
            return
        if params != self.async_params:
            self.stop_controller()
            self.async_params = params
            self.count('async-reconfigure-controller')
        if delay != self.async_delay:
            self.async_delay = delay
            # kill -9: nbdkit waits for its client (the controller) on
            # SIGTERM; the file legs keep their data either way.
            r = self.replicas[ASYNC]
            r.kill9()
            ok = r.start()
            self.count('async-delay-switch')
            if not ok:
                raise RuntimeError('replica %d did not start (see %s)' % (ASYNC, r.log))
        self.act('async leg: async-buffer=%s async-full=%s, replica delay-write=%s'
                 % (params[0] or 'default', params[1], delay or 'none'))
        self.ensure_controller()

    def flush_volume(self):
        """A flush through the controller (ends the asynchronous leg's
        epoch).  Returns an error text or None."""
        try:
            h = nbd.NBD()
            h.connect_uri(self.ctl_server.uri)
            h.flush()
            h.shutdown()
            return None
        except nbd.Error as e:
            return str(e)

    def wait_async(self, deadline):
        """After the round: wait until the asynchronous leg replicates
        again and, after a flush, holds everything (no lag, empty buffer).
        Returns False after a violation."""
        next_nudge = now() + 15
        flushed = False
        while True:
            st = self.status()
            l = self.async_leg(st)
            a = l and l.get('async')
            if a is not None and l['state'] == 'syncing' and l['resync'] is None \
                    and a['state'] == 'replicating' and a.get('consistent', True):
                if not flushed:
                    err = self.flush_volume()
                    if err is not None:
                        self.act('flush through the controller failed: %s' % err)
                    else:
                        flushed = True
                    continue
                if a['lag_bytes'] == 0 and a['buffer_used'] == 0:
                    self.async_status = l
                    return True
            else:
                flushed = False
            if now() >= deadline:
                self.violation('hang', 'the asynchronous leg has not caught up %d s '
                               'after the round (replicating, consistent, no lag after '
                               'a flush)\n%s' % (self.cfg.healthy_secs, self.status_dump()))
                return False
            if l is None and st is not None and now() >= next_nudge:
                next_nudge = now() + 15
                self.add_leg(ASYNC, False)
            elif l is not None and now() >= next_nudge and \
                    l['state'] in ('failed', 'stale'):
                next_nudge = now() + 15
                rc, out, err = self.nbdrep('resync', self.ctl, str(l['index']))
                self.act('nudge: nbdrep resync %s (async leg, %s/%s): rc=%s %s'
                         % (l['index'], l['state'], a and a['state'], rc, (out + err)[:200]))
            if not self.ctl_server.alive():
                if not self.ensure_controller():
                    return False
            time.sleep(0.3)

    def status_dump(self):
        st = self.status()
        if st is None:
            return 'status: unavailable'
        for l in st.get('legs', []):
            l.pop('latency', None)
        return 'status: ' + json.dumps(st, indent=1)

    # -- the oracle -----------------------------------------------------------

    def read_all(self, uri=None, path=None):
        if path is not None:
            with open(path, 'rb') as f:
                data = f.read(self.size)
            return data
        h = nbd.NBD()
        h.connect_uri(uri)
        parts = []
        step = 4 * MiB
        for off in range(0, self.size, step):
            parts.append(h.pread(min(step, self.size - off), off))
        h.shutdown()
        return b''.join(parts)

    def oracle(self):
        t = now()
        try:
            data = self.read_all(uri=self.ctl_server.uri)
        except nbd.Error as e:
            self.violation('read-error', 'reading the healthy volume through the '
                           'controller failed: %s' % e)
            return
        nblocks = self.size // BLOCK
        observed = [identify(self.tag, data[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                    for b in range(nblocks)]
        bad = [b for b in range(nblocks) if observed[b] not in self.model.candidates(b)]
        if bad:
            self.violation('lost-write', 'the volume read through the controller '
                           'does not match the model in %d blocks:\n%s'
                           % (len(bad), self.describe(bad, {'controller': observed})),
                           blocks=bad)
        # Every uptodate leg's data area, straight from its server.
        legs = {}
        for i in range(3):
            try:
                if self.cfg.shape == 'filter' and i == 0:
                    legs[i] = self.read_all(path=os.path.join(self.tmpdir, 'l0.img'))
                else:
                    legs[i] = self.read_all(uri=self.replicas[i].uri)
            except (nbd.Error, OSError) as e:
                self.violation('read-error', 'reading leg %d directly failed: %s' % (i, e))
                return
        for i, ld in legs.items():
            if ld == data:
                continue
            diff = [b for b in range(nblocks)
                    if ld[b * BLOCK:(b + 1) * BLOCK] != data[b * BLOCK:(b + 1) * BLOCK]]
            lobs = [identify(self.tag, ld[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                    for b in range(nblocks)]
            self.violation('legs-differ', 'uptodate leg %d differs from the volume '
                           'read through the controller in %d blocks:\n%s'
                           % (i, len(diff), self.describe(diff, {'controller': observed,
                                                                 'leg %d' % i: lobs})),
                           blocks=diff)
        # The asynchronous leg, caught up (quiesce waited for it: it
        # replicates, and after a flush nothing is queued or unflushed):
        # its data area must be the volume's too.  It is syncing, never
        # uptodate, so the loop above does not look at it.
        nasync = 0
        if self.cfg.async_leg:
            try:
                ad = self.read_all(uri=self.replicas[ASYNC].uri)
            except (nbd.Error, OSError) as e:
                self.violation('read-error', 'reading the asynchronous leg directly '
                               'failed: %s' % e)
                return
            nasync = 1
            if ad != data:
                diff = [b for b in range(nblocks)
                        if ad[b * BLOCK:(b + 1) * BLOCK] != data[b * BLOCK:(b + 1) * BLOCK]]
                aobs = [identify(self.tag, ad[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                        for b in range(nblocks)]
                a = self.async_status
                self.violation('async-differs', 'the asynchronous leg (replica %d, leg %d, '
                               'caught up: %s) differs from the volume read through '
                               'the controller in %d blocks:\n%s'
                               % (ASYNC, a['index'], json.dumps(a['async']), len(diff),
                                  self.describe(diff, {'controller': observed,
                                                       'async leg': aobs})),
                               blocks=diff)
            else:
                self.async_checked += 1
        if not self.violations:
            self.model.collapse(observed, t)
            self.round_start = (observed, t)
            say('round %d: oracle ok: %d blocks checked on the volume, %d legs%s (%.1f s)'
                % (self.round, nblocks, len(legs),
                   ' and the asynchronous leg' if nasync else '', now() - t))

    def describe(self, bad, sides, limit=40):
        """Group BAD blocks into runs and say what each side holds."""
        lines = []
        runs = []
        for b in bad:
            if runs and runs[-1][1] == b - 1 and all(
                    s[b] == s[runs[-1][0]] for s in sides.values()) and \
                    self.model.candidates(b) == self.model.candidates(runs[-1][0]):
                runs[-1][1] = b
            else:
                runs.append([b, b])
        for first, last in runs[:limit]:
            held = ', '.join('%s holds %s' % (k, vname(v[first])) for k, v in sides.items())
            cands = self.model.entries(first)
            lines.append('  0x%x-0x%x (%d blocks): %s; model allows %s'
                         % (first * BLOCK, (last + 1) * BLOCK - 1, last - first + 1, held,
                            ', '.join('%s(%s, issued %.2f, done %.2f)'
                                      % (vname(e[0]), 'acked' if e[3] else 'not acked',
                                         e[1] - T0, e[2] - T0) for e in cands)))
            lines.append('    last requests over 0x%x: %s'
                         % (first * BLOCK, self.ops_over(first * BLOCK)))
        if len(runs) > limit:
            lines.append('  ... and %d more runs' % (len(runs) - limit))
        return '\n'.join(lines)

    def ops_over(self, off, n=6):
        hits = [o for o in self.ops if o[3] <= off < o[3] + o[4]]
        return '; '.join('w%d#%d %s 0x%x+%d fua=%d [%.2f..%.2f] %s'
                         % (o[0], o[1], o[2], o[3], o[4], o[5], o[6] - T0, o[7] - T0, o[8])
                         for o in hits[-n:])

    def check_sanitizer(self):
        log = self.ctl_server.log
        try:
            with open(log, errors='replace') as f:
                f.seek(self.sanitizer_offset)
                text = f.read()
                self.sanitizer_offset = f.tell()
        except FileNotFoundError:
            return
        for pat in ('ERROR: AddressSanitizer', 'runtime error:',
                    'WARNING: ThreadSanitizer', 'ERROR: LeakSanitizer'):
            i = text.find(pat)
            if i < 0:
                continue
            if pat == 'ERROR: LeakSanitizer' and self.only_nbdkit_leaks(text[i:]):
                continue
            self.violation('sanitizer', 'the controller log %s has a sanitizer report:\n%s'
                           % (log, text[max(0, i - 200):i + 4000]))

    def only_nbdkit_leaks(self, report):
        """Is the LeakSanitizer report REPORT (from its ERROR line on) made
        only of blocks the nbdkit binary allocated itself, the frame above
        the allocator being in nbdkit?  nbdkit 1.32 leaks a connection's
        context when SIGTERM comes while the connection closes (see
        _only_nbdkit_leaks in functions.sh.in); a block our plugin or
        filter allocated names our library and is reported."""
        end = report.find('SUMMARY:')
        callers = re.findall(r'^ +#1 .*$', report[:end if end >= 0 else None],
                             re.MULTILINE)
        binary = shutil.which(self.cfg.nbdkit) or self.cfg.nbdkit
        return bool(callers) and all('(%s+0x' % binary in c for c in callers)

    # -- end ------------------------------------------------------------------

    def shutdown(self):
        for w in self.writers:
            w.stop_ev.set()
        for w in self.writers:
            if w.is_alive():
                w.join(30)
            w.drop()
        if self.verify_proc is not None and self.verify_proc.poll() is None:
            self.verify_proc.kill()
            self.verify_proc.wait(timeout=30)
        self.stop_controller()
        self.check_sanitizer()
        for i in self.leg_servers():
            self.replicas[i].stop(3)
        self.count_firings()
        self.jfile.close()


def fmt_arg(a):
    if a is None:
        return ''
    if isinstance(a, int) and a >= 4096:
        return '%d' % a
    if isinstance(a, tuple):
        return 'replicas %s: %s' % (','.join(map(str, a[0])), a[1])
    return 'leg %s' % a


def tail(path, n):
    try:
        with open(path, errors='replace') as f:
            return ''.join(f.readlines()[-n:])
    except OSError:
        return ''


def main():
    cfg = Config()
    for what, path in (('plugin', cfg.plugin), ('filter', cfg.filter),
                       ('nbdrep', cfg.nbdrep)):
        if not os.path.exists(path):
            sys.exit('torture: the %s is not built: %s' % (what, path))
    say('torture: TORTURE_SEED=%d TORTURE_SECONDS=%d TORTURE_SHAPE=%s%s%s; fault filter: %s'
        % (cfg.seed, cfg.seconds, cfg.shape,
           ' TORTURE_ROUNDS=%d' % cfg.rounds if cfg.rounds else '',
           '' if cfg.async_leg else ' TORTURE_ASYNC=0',
           cfg.faultinject or 'not built (rule faults disabled)'))
    if cfg.preload:
        say('torture: sanitizer %s: controller preloads %s' % (cfg.sanitizer, cfg.preload))
    camp = Campaign(cfg)

    def on_signal(signum, frame):
        raise KeyboardInterrupt('signal %d' % signum)
    signal.signal(signal.SIGTERM, on_signal)
    say('torture: tmpdir %s' % camp.tmpdir)
    deadline = now() + cfg.seconds
    rounds = 0
    try:
        camp.setup()
        while not camp.violations and not camp.internal:
            if cfg.rounds and rounds >= cfg.rounds:
                break
            if rounds and now() + 20 > deadline:
                break
            rounds += 1
            camp.run_round(rounds)
    except KeyboardInterrupt as e:
        camp.internal_error('interrupted (%s): the campaign did not finish' % (e or 'SIGINT'))
    except Exception as e:
        import traceback
        camp.internal_error('%s\n%s' % (e, traceback.format_exc()))
    finally:
        try:
            camp.shutdown()
        except Exception as e:
            camp.internal_error('shutdown: %s' % e)
    acked = sum(w.stats['acked'] for w in camp.writers)
    errs = sum(w.stats['errors'] for w in camp.writers)
    reads = sum(w.stats['reads'] for w in camp.writers)
    print()
    print('===== torture summary =====')
    print('seed: %d (replay: TORTURE_SEED=%d TORTURE_SHAPE=%s%s)'
          % (cfg.seed, cfg.seed, cfg.shape, '' if cfg.async_leg else ' TORTURE_ASYNC=0'))
    print('rounds: %d in %.0f s' % (rounds, now() - T0))
    print('requests: %d acknowledged, %d failed; %d online read checks'
          % (acked, errs, reads))
    # Injected events: kills, nbdrep actions, rule firings (not the
    # arming of a rule, nor restarts, nor the exits a firing caused).
    injected = {k: v for k, v in camp.faults.items()
                if not k.startswith(('verify-done', 'rule-armed', 'restart-',
                                     'replica-exited', 'verify-mismatch',
                                     'replica-crashed'))}
    if cfg.async_leg:
        print('asynchronous leg: compared equal to the volume after %d rounds; '
              '%d snapshots found crash-consistent; '
              'states sampled while faults ran: %s; largest lag %d bytes, '
              'pull-aheads of one controller up to %d'
              % (camp.async_checked, camp.async_snapshots_checked,
                 ', '.join('%s %d' % kv for kv in sorted(camp.async_seen.items())),
                 camp.async_max_lag, camp.async_max_pull_aheads))
    print('faults injected: %d (by kind below; rule-armed, restart-*, '
          'verify-done-rc* and replica-exited are not counted)' % sum(injected.values()))
    for k in sorted(camp.faults):
        print('  %-28s %d' % (k, camp.faults[k]))
    if camp.suspects:
        print('suspects (not counted as violations): %d' % len(camp.suspects))
        for t in camp.suspects:
            print('  ' + t)
    print('violations: %d' % len(camp.violations))
    for v in camp.violations:
        print('--- violation: %s, round %d, at %s s' % (v['kind'], v['round'], v['time']))
        print(v['text'])
    if camp.violations or camp.internal:
        print('--- actions so far (time, round, action):')
        for t, r, text in camp.history:
            print('  %s r%d %s' % (t, r, text))
    if camp.internal:
        print('campaign errors (bugs of torture.py, not of the engine): %d' % len(camp.internal))
        for t in camp.internal:
            print(t)
    failed = bool(camp.violations or camp.internal)
    if failed or cfg.keep or camp.suspects:
        print('tmpdir kept: %s' % camp.tmpdir)
    else:
        shutil.rmtree(camp.tmpdir, ignore_errors=True)
    print('torture: seed %d: %s' % (cfg.seed, 'FAILED' if failed else 'ok'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
