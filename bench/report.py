#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
#
# report.py: the tables of the bench scripts, from their TSV files
# (python3 standard library only).
#
#   report.py fio JSON RW TICKS HZ   (one line of fields, for lib.sh)
#   report.py run TSV "SYSTEMS" "JOBS" AA_SYSTEM
#   report.py cpucost TSV "SYSTEMS" N1 N2
#   report.py scale FIO_TSV CG_TSV RSS_TSV
#   report.py rebuild TSV LEG_SIZE
#   report.py tls TSV COPY_TSV "JOBS"
#   report.py tcp TSV "JOBS"
#   report.py async TSV STATUS_TSV "SYSTEMS" "JOBS" AA_SYSTEM
#
# Every table is a pipe table with padded columns: readable in a
# terminal and valid markdown.  A value is the median over rounds (or
# repetitions); a ratio is the ratio of two such medians.

import csv
import json
import math
import re
import statistics
import sys

NAN = float("nan")


def num(x):
    """x as a float, NaN if it is not a number."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return NAN


def fmt(v, digits=3):
    """v with about `digits` significant digits, '-' for NaN."""
    if v != v:
        return "-"
    if v == 0:
        return "0"
    places = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    return "%.*f" % (places, v)


def fmtr(v):
    """A ratio with two decimals, '-' for NaN."""
    return "-" if v != v else "%.2f" % v


def ratio(a, b):
    """a / b, NaN when either is missing or b is 0."""
    if a != a or b != b or b == 0:
        return NAN
    return a / b


def med(values):
    """Median of the numbers in values that are not NaN."""
    v = [x for x in values if x == x]
    return statistics.median(v) if v else NAN


def table(head, rows, right=None):
    """Print a padded pipe table; columns from `right` on are right-aligned."""
    right = 1 if right is None else right
    cells = [head] + rows
    width = [max(len(r[i]) for r in cells) for i in range(len(head))]

    def line(r):
        out = []
        for i, c in enumerate(r):
            out.append(c.rjust(width[i]) if i >= right else c.ljust(width[i]))
        return "| " + " | ".join(out) + " |"

    print(line(head))
    print("|" + "|".join(("-" * (w + 1) + ":") if i >= right else
                         ("-" * (w + 2)) for i, w in enumerate(width)) + "|")
    for r in rows:
        print(line(r))


def read_tsv(path):
    """The rows of a TSV file with a header line, as dicts."""
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def load_and_failures(rows):
    """The closing lines of a fio table: the load during the runs, and
    the runs that failed."""
    loads = [num(r["load1"]) for r in rows]
    bad = [r for r in rows if r["rc"] != "0" or num(r["iops"]) != num(r["iops"])]
    print()
    print("1-min load average at the start of each fio run: min %s, median %s,"
          " max %s (%d fio runs)" % (fmt(min(loads), 2), fmt(med(loads), 2),
                                     fmt(max(loads), 2), len(rows)))
    if bad:
        print("FAILED runs: " + ", ".join(
            "%s/%s round %s (rc %s)" % (r["system"], r["job"], r["round"], r["rc"])
            for r in bad))


# ---------------------------------------------------------------------
# bench/run

# job -> (column title, TSV field, scale, unit, higher is better)
RUN_JOBS = {
    "randread": ("randread 4k QD32x2", "iops", 1e-3, "kIOPS", True),
    "randwrite": ("randwrite 4k QD32x2", "iops", 1e-3, "kIOPS", True),
    "seqwrite": ("seqwrite 64k QD8", "mibps", 1.0, "MiB/s", True),
    "seqread": ("seqread 1M QD4", "mibps", 1.0, "MiB/s", True),
    "lat1": ("write 4k QD1 latency", "lat_us", 1.0, "us", False),
}


def describe(system, aa):
    """What a system is, for the first column."""
    if aa and system == aa:
        return "second %s, started identically (A/A)" % system[:-1]
    fixed = {
        "L": "nbdkit memory, direct (the limit)",
        "P1": "nbdkit nbd plugin -> 1 replica",
        "Q3": "qsd quorum vt=1 fifo -> 3 replicas",
    }
    if system in fixed:
        return fixed[system]
    m = re.match(r"C(\d+)(f|m0)?$", system)
    if not m:
        return ""
    n, kind = int(m.group(1)), m.group(2)
    if kind == "f":
        return "filter: local memory + %d replica%s, metadata on" % (
            n - 1, "" if n == 2 else "s")
    return "plugin -> %d replica%s, metadata %s" % (
        n, "" if n == 1 else "s", "none" if kind == "m0" else "on")


def peers(system, present, aa):
    """The systems `system` is compared with, in order."""
    out = []
    if aa and system == aa:
        out.append(system[:-1])
    m = re.match(r"C(\d+)(f|m0)?$", system)
    if m:
        n, kind = int(m.group(1)), m.group(2)
        if n == 1 and kind != "m0":
            out.append("P1")
        if n == 3 and kind != "m0":
            out.append("Q3")
        if kind is None:
            out.append(system + "m0")
    return [p for p in out if p in present]


def report_run(path, systems, jobs, aa):
    """The tables of bench/run."""
    rows = read_tsv(path)
    systems = [s for s in systems.split() if any(r["system"] == s for r in rows)]
    jobs = [j for j in jobs.split() if j in RUN_JOBS]
    rounds = sorted({r["round"] for r in rows}, key=int)

    def val(r, field, scale=1.0):
        return num(r[field]) * scale

    def cell_rows(s, j):
        return [r for r in rows if r["system"] == s and r["job"] == j]

    def median_of(s, j, field=None, scale=None):
        t = RUN_JOBS[j]
        field = field or t[1]
        scale = t[2] if scale is None else scale
        return med(val(r, field, scale) for r in cell_rows(s, j))

    def per_round(s, j):
        t = RUN_JOBS[j]
        return {r["round"]: val(r, t[1], t[2]) for r in cell_rows(s, j)}

    n = "median of %d rounds" % len(rounds) if len(rounds) > 1 else "1 round"
    print()
    print("Throughput and QD1 latency (%s)" % n)
    print()
    head = ["system", "what", "conns"] + [
        "%s %s" % (RUN_JOBS[j][0], RUN_JOBS[j][3]) for j in jobs]
    out = []
    for s in systems:
        conns = next((r["conns"] for r in rows if r["system"] == s
                      and r["job"] in ("randread", "randwrite")), "-")
        out.append([s, describe(s, aa), conns] +
                   [fmt(median_of(s, j)) for j in jobs])
    table(head, out, right=2)

    if "L" in systems:
        print()
        print("Ratio to L (system / L; for latency, above 1 is slower)")
        print()
        out = []
        for s in systems:
            if s == "L":
                continue
            out.append([s] + [fmtr(ratio(median_of(s, j), median_of("L", j)))
                              for j in jobs])
        table(["system"] + [RUN_JOBS[j][0] for j in jobs], out)

    pairs = [(s, p) for s in systems for p in peers(s, systems, aa)]
    if pairs:
        print()
        print("Ratio to the peer (system / peer; above 1: the system is faster,"
              " except latency: above 1 is slower)")
        if len(rounds) > 1:
            print("[in brackets: lowest and highest of the per-round ratios]")
        print()
        out = []
        for s, p in pairs:
            line = ["%s / %s" % (s, p)]
            for j in jobs:
                cell = fmtr(ratio(median_of(s, j), median_of(p, j)))
                if len(rounds) > 1:
                    a, b = per_round(s, j), per_round(p, j)
                    rr = [ratio(a[k], b[k]) for k in a if k in b]
                    rr = [x for x in rr if x == x]
                    if rr:
                        cell += " [%s-%s]" % (fmtr(min(rr)), fmtr(max(rr)))
                line.append(cell)
            out.append(line)
        table(["comparison"] + [RUN_JOBS[j][0] for j in jobs], out)

    print()
    print("Server CPU per request, us (user+sys of the system's processes,"
          " replicas included, over the measured window / requests)")
    print()
    out = []
    for s in systems:
        line = [s]
        for j in jobs:
            v = median_of(s, j, "srv_cpu_us_op", 1.0)
            ref = median_of("L", j, "srv_cpu_us_op", 1.0) if "L" in systems else NAN
            line.append(fmt(v) + ("" if s == "L" or ref != ref else
                                  " (%sx L)" % fmtr(ratio(v, ref))))
        out.append(line)
    table(["system"] + [RUN_JOBS[j][0] for j in jobs], out)

    resolution = NAN
    if aa and aa in systems and aa[:-1] in systems:
        dev = []
        for j in jobs:
            a, b = per_round(aa, j), per_round(aa[:-1], j)
            dev += [abs(ratio(a[k], b[k]) - 1) for k in a if k in b]
        dev = [d for d in dev if d == d]
        if dev:
            resolution = statistics.median(dev)
            print()
            print("A/A: %s vs %s, the same system twice, %d cells: |ratio - 1|"
                  " median %.0f %%, max %.0f %%.  Differences smaller than"
                  " this are noise." % (aa, aa[:-1], len(dev),
                                        100 * resolution, 100 * max(dev)))
    if len(rounds) > 1:
        spread = []
        for s in systems:
            for j in jobs:
                v = [x for x in per_round(s, j).values() if x == x]
                if len(v) > 1:
                    spread.append((max(v) - min(v)) / statistics.median(v))
        if spread:
            print("Round-to-round spread of one cell, (max - min) / median:"
                  " median %.0f %%, max %.0f %%." % (
                      100 * statistics.median(spread), 100 * max(spread)))

    if "C3" in systems and "C3m0" in systems and "randwrite" in jobs:
        r = ratio(median_of("C3", "randwrite"), median_of("C3m0", "randwrite"))
        verdict = "met" if r >= 0.9 else "NOT met"
        print()
        print("Goal: C3 (metadata on) 4k randwrite >= 0.9 x C3m0 (metadata"
              " off): %s -> %s%s" % (
                  fmtr(r), verdict,
                  "" if resolution != resolution else
                  " (A/A noise %.0f %%)" % (100 * resolution)))

    load_and_failures(rows)


# ---------------------------------------------------------------------
# bench/cpucost


def per_request(rows, n1, n2, tool, system, op, qd, role, field):
    """(median over repetitions, spread) of the cost of one request:
    (sum over the processes of run N2 - the same for N1) / (N2 - N1)."""
    got = []
    for rep in sorted({r["rep"] for r in rows}):
        tot = {}
        for r in rows:
            if ((r["tool"], r["system"], r["op"], r["qd"], r["rep"]) ==
                    (tool, system, op, qd, rep) and role in ("all", r["role"])):
                v = num(r[field])
                if v == v:
                    tot[r["n"]] = tot.get(r["n"], 0.0) + v
        if n1 in tot and n2 in tot:
            got.append((tot[n2] - tot[n1]) / (int(n2) - int(n1)))
    if not got:
        return NAN, NAN
    m = statistics.median(got)
    return m, ((max(got) - min(got)) / m if len(got) > 1 and m else NAN)


def report_cpucost(path, systems, n1, n2):
    """The tables of bench/cpucost."""
    rows = read_tsv(path)
    systems = [s for s in systems.split() if any(r["system"] == s for r in rows)]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    qds = list(dict.fromkeys(r["qd"] for r in rows))
    spreads = []

    def cost(tool, s, op, qd, role, field):
        v, sp = per_request(rows, n1, n2, tool, s, op, qd, role, field)
        if sp == sp and abs(v) >= 1:    # not an idle thread's crumbs
            spreads.append((sp, "%s %s %s QD%s %s" % (tool, s, op, qd, role)))
        return v

    print()
    print("Per 4 KiB request, N2 - N1 = %d requests; instructions: callgrind"
          " (user space); syscalls, context switches, CPU: perf stat"
          % (int(n2) - int(n1)))
    print()
    head = ["system", "op", "QD", "front instr", "front w/o async threads",
            "async threads", "volume poller", "front w/o both", "all instr",
            "all / L", "front syscalls", "all syscalls", "all ctx switches",
            "all CPU us", "front CPU us w/o async threads"]
    out = []
    val = {}
    for op in ops:
        for qd in qds:
            for s in systems:
                v = {
                    "fi": cost("cg", s, op, qd, "front", "v1"),
                    "fa": cost("cg", s, op, qd, "front", "v2"),
                    "fp": cost("cg", s, op, qd, "front", "v3"),
                    "ai": cost("cg", s, op, qd, "all", "v1"),
                    "fs": cost("perf", s, op, qd, "front", "v3"),
                    "as": cost("perf", s, op, qd, "all", "v3"),
                    "ac": cost("perf", s, op, qd, "all", "v2"),
                    "at": cost("perf", s, op, qd, "all", "v1") * 1000,
                    "ft": cost("perf", s, op, qd, "front", "v4") * 1000,
                    "ca": cost("perf", s, op, qd, "front", "v5") * 1000,
                }
                v["fw"] = v["fi"] - v["fa"]
                v["cw"] = v["ft"] - v["ca"]
                v["fo"] = v["fw"] - v["fp"]
                val[(s, op, qd)] = v
                ref = val.get(("L", op, qd), {}).get("ai", NAN)
                out.append([s, op, qd, fmt(v["fi"]), fmt(v["fw"]),
                            fmt(v["fa"]), fmt(v["fp"]), fmt(v["fo"]),
                            fmt(v["ai"]),
                            fmtr(ratio(v["ai"], ref)), fmt(v["fs"]),
                            fmt(v["as"]), fmt(v["ac"]), fmt(v["at"]),
                            fmt(v["cw"])])
    table(head, out, right=2)

    pairs = [(a, b) for a, b in (("C1", "P1"), ("C1f", "P1"), ("C3", "Q3"),
                                 ("C3f", "Q3"), ("C3", "C3m0"),
                                 ("C2A", "C2"))
             if a in systems and b in systems]
    if pairs:
        print()
        print("Ratio to the peer (system / peer; below 1: the system does less work)")
        print()
        out = []
        for a, b in pairs:
            for op in ops:
                for qd in qds:
                    x, y = val[(a, op, qd)], val[(b, op, qd)]
                    out.append(["%s / %s" % (a, b), op, qd] +
                               [fmtr(ratio(x[k], y[k])) for k in
                                ("fi", "fw", "fo", "ai", "fs", "as", "ac",
                                 "cw")])
        table(["comparison", "op", "QD", "front instr",
               "front w/o async threads", "front w/o both", "all instr",
               "front syscalls", "all syscalls", "all ctx switches",
               "front CPU w/o async threads"], out, right=2)
    if ("C2A", "C2") in pairs:
        print()
        for op in ops:
            for qd in qds:
                x, y = val[("C2A", op, qd)], val[("C2", op, qd)]
                r = ratio(x["fw"], y["fw"])
                print("Goal: an asynchronous leg costs the synchronous path"
                      " <= 5 %% more instructions: C2A / C2 front-end without"
                      " the async leg's threads, %s QD%s: %s (%+.0f per"
                      " request) -> %s; without the volume's poller either:"
                      " %s (%+.0f); the"
                      " whole front-end: %s; all processes: %s" % (
                          op, qd, fmtr(r), x["fw"] - y["fw"],
                          "-" if r != r else "met" if r <= 1.05 else "NOT met",
                          fmtr(ratio(x["fo"], y["fo"])), x["fo"] - y["fo"],
                          fmtr(ratio(x["fi"], y["fi"])),
                          fmtr(ratio(x["ai"], y["ai"]))))
                r = ratio(x["cw"], y["cw"])
                print("  The same in CPU time, user and kernel (schedstat"
                      " of the front-end's threads but the async leg's,"
                      " read with the client connected), %s QD%s: %s"
                      " (%+.2f us per request, of %.2f)" % (
                          op, qd, fmtr(r), x["cw"] - y["cw"], y["cw"]))
    if spreads:
        print()
        print("Spread over repetitions, (max - min) / median:")
        for tool, what in (("cg", "instructions"),
                           ("perf", "syscalls, context switches, CPU")):
            got = [sp for sp in spreads if sp[1].startswith(tool + " ")]
            if got:
                worst = max(got)
                print("  %s: median %.1f %%, largest %.1f %% (%s)" % (
                    what, 100 * med(sp for sp, _ in got), 100 * worst[0],
                    worst[1][len(tool) + 1:]))


# ---------------------------------------------------------------------
# bench/rebuild


def parse_size(text):
    """Bytes in an nbdkit-style size: 1G, 512M, 4096."""
    m = re.match(r"(\d+)([KMGTP]?)", text.upper())
    return int(m.group(1)) * 1024 ** " KMGTP".index(m.group(2) or " ")


def report_rebuild(path, leg_size):
    """The table of bench/rebuild."""
    rows = read_tsv(path)
    pcts = sorted({int(r["percent"]) for r in rows}, reverse=True)
    mib = 1024.0 * 1024.0
    leg = parse_size(leg_size) / mib

    def times(pct, method, field):
        return [num(r[field]) for r in rows
                if int(r["percent"]) == pct and r["method"] == method]

    print()
    print("Rebuild of a blank %s leg from a memory leg holding random data in"
          " a share of its 64 KiB chunks (median of %d rounds; MiB/s = leg"
          " size / time; speed = nbdcopy time / controller time)" % (
              leg_size, len({r["round"] for r in rows})))
    print()
    head = ["data", "data MiB", "nbdcopy s", "nbdcopy MiB/s",
            "controller s (add to uptodate)", "last_resync s",
            "controller MiB/s", "speed", "speed by last_resync",
            "copied MiB", "zeroed MiB", "kind"]
    out = []
    res = {}
    for pct in pcts:
        data = med(num(r["data_bytes"]) for r in rows if int(r["percent"]) == pct)
        cp = med(times(pct, "nbdcopy", "wall_s"))
        wall = med(times(pct, "controller", "wall_s"))
        rs = med(times(pct, "controller", "resync_s"))
        kinds = {r["kind"] for r in rows if int(r["percent"]) == pct
                 and r["method"] == "controller"}
        res[pct] = (cp, wall, rs)
        out.append(["%d %%" % pct, fmt(data / mib), fmt(cp),
                    fmt(ratio(leg, cp)), fmt(wall), fmt(rs),
                    fmt(ratio(leg, wall)), fmtr(ratio(cp, wall)),
                    fmtr(ratio(cp, rs)),
                    fmt(med(times(pct, "controller", "bytes")) / mib),
                    fmt(med(times(pct, "controller", "zeroed")) / mib),
                    ",".join(sorted(kinds)) or "-"])
    table(head, out)
    if 50 in res:
        cp, wall, rs = res[50]
        r = ratio(cp, wall)
        print()
        print("Goal: full rebuild of the 50 %% leg >= 0.8 x nbdcopy's speed:"
              " %s -> %s (by last_resync.seconds: %s)" % (
                  fmtr(r), "met" if r >= 0.8 else "NOT met",
                  fmtr(ratio(cp, rs))))
    if len(pcts) > 1:
        hi, lo = pcts[0], pcts[-1]
        print("Proportional to the data: time(%d %%) / time(%d %%) = %s"
              " (controller, add to uptodate), %s (last_resync), %s (nbdcopy);"
              " the data ratio is %s" % (
                  lo, hi, fmtr(ratio(res[lo][1], res[hi][1])),
                  fmtr(ratio(res[lo][2], res[hi][2])),
                  fmtr(ratio(res[lo][0], res[hi][0])), fmtr(lo / hi)))
    if len({r["round"] for r in rows}) > 1:
        spread = []
        for pct in pcts:
            for method, field in (("nbdcopy", "wall_s"), ("controller", "wall_s"),
                                  ("controller", "resync_s")):
                v = [x for x in times(pct, method, field) if x == x]
                if len(v) > 1:
                    spread.append((max(v) - min(v)) / statistics.median(v))
        if spread:
            print("Round-to-round spread of one time, (max - min) / median:"
                  " median %.0f %%, max %.0f %%" % (
                      100 * statistics.median(spread), 100 * max(spread)))
    loads = [num(r["load1"]) for r in rows]
    print("1-min load average during the rebuilds: min %s, median %s, max %s"
          % (fmt(min(loads), 2), fmt(med(loads), 2), fmt(max(loads), 2)))


# ---------------------------------------------------------------------
# bench/scale


def grid_table(title, cells, legs, conns, digits=3):
    """Rows: legs; columns: connections per leg."""
    print()
    print(title)
    print()
    out = [["%d" % l] + [fmt(cells.get((l, c), NAN), digits) for c in conns]
           for l in legs]
    table(["legs"] + ["connections=%d" % c for c in conns], out)


def report_scale(fio_path, cg_path, rss_path):
    """The tables of bench/scale."""
    fio = read_tsv(fio_path)
    cg = read_tsv(cg_path)
    rss = read_tsv(rss_path)
    grid = [(int(r["legs"]), int(r["leg_conns"])) for r in fio + cg
            if int(r["legs"]) > 0]
    legs = sorted({g[0] for g in grid})
    conns = sorted({g[1] for g in grid})
    for job in ("randwrite", "randread"):
        ref = med(num(r["iops"]) for r in fio if r["job"] == job
                  and r["base"] == "L")
        cells = {}
        for l, c in grid:
            v = med(num(r["iops"]) / 1e3 for r in fio if r["job"] == job
                    and int(r["legs"]) == l and int(r["leg_conns"]) == c)
            if v == v:
                cells[(l, c)] = v
        if cells:
            grid_table("4k %s QD32x2, kIOPS (L, direct, in the same run: %s)"
                       % (job, fmt(ref / 1e3)), cells, legs, conns)
    ops = list(dict.fromkeys(r["op"] for r in cg))
    for op in ops:
        cells = {}
        for r in cg:
            if r["op"] == op:
                v = ratio(num(r["ir2"]) - num(r["ir1"]),
                          num(r["n2"]) - num(r["n1"]))
                cells[(int(r["legs"]), int(r["leg_conns"]))] = v
        grid_table("Controller instructions per 4 KiB %s at QD1 (callgrind;"
                   " the replicas not counted)" % op, cells, legs, conns)
    if fio:
        loads = [num(r["load1"]) for r in fio]
        print()
        print("1-min load average at the start of each fio run: min %s,"
              " median %s, max %s" % (fmt(min(loads), 2), fmt(med(loads), 2),
                                      fmt(max(loads), 2)))
    if rss:
        print()
        print("Controller memory, volume of %s over %s memory legs, metadata on"
              % (rss[0]["size"], rss[0]["legs"]))
        print()
        out = [[r["phase"], fmt(num(r["vmrss_kib"]) / 1024),
                fmt(num(r["vmhwm_kib"]) / 1024)] for r in rss]
        table(["phase", "VmRSS MiB", "VmHWM (peak) MiB"], out)
        peak = max(num(r["vmhwm_kib"]) for r in rss) / 1024
        print()
        print("Goal: RSS <= 64 MiB with one leg absent: peak %s MiB -> %s" % (
            fmt(peak), "met" if peak <= 64 else "NOT met"))


# ---------------------------------------------------------------------
# fio's JSON


# ---------------------------------------------------------------------
# bench/tls

TLS_VARIANTS = {
    "plain": "plain legs, the engine's wire",
    "libnbd": "plain legs, libnbd (-D replicate.wire=0)",
    "tls": "TLS (PSK) legs, libnbd",
}


def job_median(rows, match, job, field=None, scale=None):
    """The median over the rounds of job's figure (its RUN_JOBS field
    and scale unless given) in the rows for which match(row) holds."""
    t = RUN_JOBS[job]
    field = field or t[1]
    scale = t[2] if scale is None else scale
    return med(num(r[field]) * scale for r in rows
               if r["job"] == job and match(r))


def report_variants(rows, jobs, key, groups, variants, pairs):
    """The tables of a benchmark whose systems come in variants: for
    each group (the value of column key) and variant, throughput and
    latency, server CPU per request, and the ratios of the variant
    pairs (a, b), a / b, within each group."""
    rounds = sorted({r["round"] for r in rows}, key=int)

    def cell(g, v, j, field=None, scale=None):
        return job_median(rows, lambda r: (r[key], r["variant"]) == (g, v),
                          j, field, scale)

    n_r = "median of %d rounds" % len(rounds) if len(rounds) > 1 else "1 round"
    print()
    print("Throughput and QD1 latency (%s)" % n_r)
    print()
    out = [[g, v, variants[v]] + [fmt(cell(g, v, j)) for j in jobs]
           for g in groups for v in variants]
    table([key, "variant", "what"] +
          ["%s %s" % (RUN_JOBS[j][0], RUN_JOBS[j][3]) for j in jobs],
          out, right=3)

    print()
    print("Server CPU per request, us (front-end and replicas)")
    print()
    out = [[g, v] + [fmt(cell(g, v, j, "srv_cpu_us_op", 1.0)) for j in jobs]
           for g in groups for v in variants]
    table([key, "variant"] + [RUN_JOBS[j][0] for j in jobs], out, right=2)

    print()
    print("Ratios (throughput: below 1 is slower; latency and CPU: above 1"
          " is slower or costlier)")
    print()
    out = []
    for g in groups:
        for a, b in pairs:
            out.append([g, "%s / %s" % (a, b)] +
                       [fmtr(ratio(cell(g, a, j), cell(g, b, j)))
                        for j in jobs])
            out.append([g, "%s / %s CPU" % (a, b)] +
                       [fmtr(ratio(cell(g, a, j, "srv_cpu_us_op", 1.0),
                                   cell(g, b, j, "srv_cpu_us_op", 1.0)))
                        for j in jobs])
    table([key, "ratio"] + [RUN_JOBS[j][0] for j in jobs], out, right=2)


def report_tls(path, copy_path, jobs):
    """The tables of bench/tls."""
    rows = read_tsv(path)
    copies = read_tsv(copy_path)
    jobs = [j for j in jobs.split() if j in RUN_JOBS]
    legs = sorted({r["legs"] for r in rows}, key=int)
    report_variants(rows, jobs, "legs", legs, TLS_VARIANTS,
                    (("tls", "plain"), ("tls", "libnbd"), ("libnbd", "plain")))

    plain = med(num(r["mibps"]) for r in copies if r["variant"] == "plain")
    tls = med(num(r["mibps"]) for r in copies if r["variant"] == "tls")
    print()
    print("nbdcopy from one replica straight into null: (no controller):"
          " plain %s MiB/s, TLS %s MiB/s, TLS / plain %s (%d rounds)" % (
              fmt(plain), fmt(tls), fmtr(ratio(tls, plain)),
              len({r["round"] for r in copies})))

    load_and_failures(rows)


# ---------------------------------------------------------------------
# bench/tcp

TCP_VARIANTS = {
    "unix": "legs on Unix sockets",
    "tcp": "legs on TCP, a namespace each (veth)",
}


def report_tcp(path, jobs):
    """The tables of bench/tcp: per system, tcp against unix; then our
    three legs against qemu's quorum on each transport."""
    rows = read_tsv(path)
    for r in rows:
        r["variant"] = r["transport"]
    jobs = [j for j in jobs.split() if j in RUN_JOBS]
    systems = [s for s in ("C1", "C3", "Q3") if any(r["base"] == s for r in rows)]
    report_variants(rows, jobs, "base", systems, TCP_VARIANTS,
                    (("tcp", "unix"),))
    if "C3" in systems and "Q3" in systems:
        print()
        print("C3 / Q3 (our three legs against qemu's quorum over the same"
              " legs)")
        print()
        out = []
        for v in TCP_VARIANTS:
            def of(system, j, field=None, scale=None):
                return job_median(rows, lambda r: (r["base"], r["variant"]) ==
                                  (system, v), j, field, scale)
            out.append([v, "C3 / Q3"] + [fmtr(ratio(of("C3", j), of("Q3", j)))
                                         for j in jobs])
            out.append([v, "C3 / Q3 CPU"] +
                       [fmtr(ratio(of("C3", j, "srv_cpu_us_op", 1.0),
                                   of("Q3", j, "srv_cpu_us_op", 1.0)))
                        for j in jobs])
        table(["transport", "ratio"] + [RUN_JOBS[j][0] for j in jobs], out,
              right=2)
    load_and_failures(rows)


# ---------------------------------------------------------------------
# bench/async

ASYNC_WHAT = {
    "C2": "2 legs",
    "C2A": "2 legs + async leg, no delay",
    "C2As": "2 legs + async leg on the slow server",
    "C3s": "2 legs + the slow server as a 3rd synchronous leg",
}


def report_async(path, status_path, systems, jobs, aa):
    """The tables of bench/async: medians, the ratios to C2 with their
    per-round range and the goals, and the asynchronous leg's state
    after each run."""
    rows = read_tsv(path)
    status = read_tsv(status_path)
    systems = [s for s in systems.split() if any(r["system"] == s for r in rows)]
    jobs = [j for j in jobs.split() if j in RUN_JOBS]
    rounds = sorted({r["round"] for r in rows}, key=int)

    def cell(s, j, field=None, scale=None):
        return job_median(rows, lambda r: r["system"] == s, j, field, scale)

    def per_round(s, j):
        t = RUN_JOBS[j]
        return {r["round"]: num(r[t[1]]) * t[2] for r in rows
                if r["system"] == s and r["job"] == j}

    def what(s):
        if aa and s == aa:
            return "second %s, started identically (A/A)" % s[:-1]
        return ASYNC_WHAT.get(s, "")

    n_r = "median of %d rounds" % len(rounds) if len(rounds) > 1 else "1 round"
    print()
    print("Throughput and QD1 latency (%s)" % n_r)
    print()
    head = ["system", "what"] + ["%s %s" % (RUN_JOBS[j][0], RUN_JOBS[j][3])
                                 for j in jobs]
    if "lat1" in jobs:
        head.append("write 4k QD1 p99 us")
    out = []
    for s in systems:
        line = [s, what(s)] + [fmt(cell(s, j)) for j in jobs]
        if "lat1" in jobs:
            line.append(fmt(cell(s, "lat1", "p99_us", 1.0)))
        out.append(line)
    table(head, out, right=2)

    print()
    print("Server CPU per request, us (front-end and replicas)")
    print()
    table(["system"] + [RUN_JOBS[j][0] for j in jobs],
          [[s] + [fmt(cell(s, j, "srv_cpu_us_op", 1.0)) for j in jobs]
           for s in systems])

    base = "C2"
    others = [s for s in systems if s != base]
    if base in systems and others:
        print()
        print("Ratio to %s (throughput: below 1 is slower; latency: above 1"
              " is slower)" % base)
        if len(rounds) > 1:
            print("[in brackets: lowest and highest of the per-round ratios]")
        print()
        out = []
        res = {}
        for s in others:
            line = ["%s / %s" % (s, base)]
            for j in jobs:
                r = ratio(cell(s, j), cell(base, j))
                res[(s, j)] = r
                text = fmtr(r)
                a, b = per_round(s, j), per_round(base, j)
                rr = [x for x in (ratio(a[k], b[k]) for k in a if k in b)
                      if x == x]
                if len(rounds) > 1 and rr:
                    text += " [%s-%s]" % (fmtr(min(rr)), fmtr(max(rr)))
                line.append(text)
            out.append(line)
        table(["comparison"] + [RUN_JOBS[j][0] for j in jobs], out)
        if "C2As" in systems:
            print()
            stuck = [r for r in status if r["system"] == "C2As" and
                     r.get("state_before", "replicating") != "replicating"]
            if stuck:
                print("WARNING: the asynchronous leg of C2As was not replicating"
                      " before %d of its %d runs (%s): a leg behind is sent"
                      " nothing, so those runs do not measure it." % (
                          len(stuck), len([r for r in status
                                           if r["system"] == "C2As"]),
                          ", ".join("round %s %s: %s" % (
                              r["round"], r["job"], r["state_before"])
                              for r in stuck)))
            for j, goal, ok in (("randwrite", ">= 0.9", lambda r: r >= 0.9),
                                ("lat1", "<= 1.1", lambda r: r <= 1.1)):
                r = res.get(("C2As", j), NAN)
                if j in jobs:
                    print("Goal: C2As / C2 %s %s: %s -> %s" % (
                        RUN_JOBS[j][0], goal, fmtr(r),
                        "-" if r != r else
                        "not measured (the leg stayed behind)" if stuck else
                        "met" if ok(r) else "NOT met"))
        if aa and aa in systems:
            dev = []
            for j in jobs:
                a, b = per_round(aa, j), per_round(aa[:-1], j)
                dev += [abs(ratio(a[k], b[k]) - 1) for k in a if k in b]
            dev = [d for d in dev if d == d]
            if dev:
                print("A/A: %s vs %s, %d cells: |ratio - 1| median %.0f %%,"
                      " max %.0f %%.  Differences smaller than this are"
                      " noise." % (aa, aa[:-1], len(dev),
                                   100 * statistics.median(dev),
                                   100 * max(dev)))

    if status:
        print()
        print("The asynchronous leg before and after each run (nbdrep status"
              " --json; waited: seconds before the run until it was"
              " replicating with an empty buffer, or ASYNC_WAIT in vain)")
        print()
        out = []
        for r in status:
            pulls = num(r["pull_aheads"]) - num(r["pull_aheads_before"])
            out.append([r["round"], r["system"], r["job"], r["waited_s"],
                        r.get("state_before", "-"), r["state"],
                        fmt(pulls, 1), r["pull_aheads"],
                        fmt(num(r["lag_bytes"]) / 1048576.0),
                        fmt(num(r["lag_seconds"])),
                        fmt(num(r["buffer_used"]) / 1048576.0),
                        fmt(num(r["buffer_size"]) / 1048576.0)])
        table(["round", "system", "job", "waited s", "state before",
               "state after",
               "pull-aheads in the run", "pull-aheads total", "lag MiB",
               "lag s", "buffer used MiB", "buffer MiB"], out, right=3)
    load_and_failures(rows)


def fio_fields(path, rw, ticks, hz):
    """iops, MiB/s, mean latency us, p99 completion latency us, server
    CPU us per request and requests of one fio run, tab-separated."""
    vals = ["nan"] * 6
    try:
        with open(path) as f:
            text = f.read()
        j = json.loads(text[text.index("{"):])["jobs"][0]
        s = j["read" if "read" in rw else "write"]
        ios = s["total_ios"]
        p99 = s["clat_ns"].get("percentile", {}).get("99.000000", NAN)
        cpu = int(ticks) * 1e6 / int(hz) / ios if ios else NAN
        vals = ["%.1f" % s["iops"], "%.2f" % (s["bw"] / 1024),
                "%.2f" % (s["lat_ns"]["mean"] / 1e3), "%.1f" % (p99 / 1e3),
                "%.2f" % cpu, str(ios)]
    except (OSError, ValueError, KeyError, IndexError) as e:
        print("cannot read %s: %s" % (path, e), file=sys.stderr)
    print("\t".join(vals))


def main():
    a = sys.argv[1:]
    if len(a) == 5 and a[0] == "fio":
        fio_fields(a[1], a[2], a[3], a[4])
    elif len(a) == 5 and a[0] == "run":
        report_run(a[1], a[2], a[3], a[4])
    elif len(a) == 4 and a[0] == "scale":
        report_scale(a[1], a[2], a[3])
    elif len(a) == 3 and a[0] == "rebuild":
        report_rebuild(a[1], a[2])
    elif len(a) == 5 and a[0] == "cpucost":
        report_cpucost(a[1], a[2], a[3], a[4])
    elif len(a) == 4 and a[0] == "tls":
        report_tls(a[1], a[2], a[3])
    elif len(a) == 3 and a[0] == "tcp":
        report_tcp(a[1], a[2])
    elif len(a) == 6 and a[0] == "async":
        report_async(a[1], a[2], a[3], a[4], a[5])
    else:
        sys.exit("usage: report.py run TSV SYSTEMS JOBS AA | cpucost TSV SYSTEMS N1 N2"
                 " | scale FIO CG RSS | rebuild TSV LEG_SIZE | tls TSV COPY_TSV JOBS"
                 " | tcp TSV JOBS | async TSV STATUS_TSV SYSTEMS JOBS AA")


if __name__ == "__main__":
    main()
