#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
#
# check-layers.py MAP OBJDIR: check the engine's layering (MAP:
# common/replication/layers.txt, which says the rule) against what its
# objects in OBJDIR (FOLDER/.libs/libFOLDER_la-FILE.o) define and use,
# read with nm.  Fails, naming the functions, on a call from a file to a
# file of a higher layer, on a cycle of calls inside a layer not marked
# "cycles", on an object the map does not place (or a file it names that
# has no object), and on a file outside the folder of its layer.  Prints the layers and their calls when it passes.

import collections
import glob
import os
import re
import subprocess
import sys



def read_map(path):
    """[(name, allows_cycles, public_only, [files])], lowest first."""
    layers = []
    with open(path) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r'layer (\S+)((?: cycles| public)*):\s*(.*)', line)
            if not m:
                sys.exit('%s: cannot read: %s' % (path, line))
            layers.append((m.group(1), 'cycles' in m.group(2),
                           'public' in m.group(2), m.group(3).split()))
    return layers


def read_objects(objdir):
    """(defined symbol -> file, file -> symbols it uses, file -> folder)."""
    defs, uses, folder = {}, {}, {}
    objs = sorted(glob.glob(os.path.join(objdir, '*', '.libs', 'lib*_la-*.o')))
    if not objs:
        sys.exit('no objects in %s: build the engine first' % objdir)
    for obj in objs:
        name = os.path.basename(obj).split('_la-', 1)[1][:-2]
        folder[name] = os.path.basename(os.path.dirname(os.path.dirname(obj)))
        out = subprocess.run(['nm', obj], capture_output=True, text=True,
                             check=True).stdout
        uses[name] = set()
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in 'TDBRV':
                defs[f[2]] = name
            elif len(f) == 2 and f[0] == 'U':
                uses[name].add(f[1])
    return defs, uses, folder


def calls(defs, uses):
    """(caller, callee) -> the callee's symbols the caller uses."""
    edges = collections.defaultdict(set)
    for f, syms in uses.items():
        for s in syms:
            g = defs.get(s)
            if g is not None and g != f:
                edges[(f, g)].add(s)
    return edges


def cycles(files, edges):
    """The strongly connected sets of more than one file among files."""
    succ = collections.defaultdict(list)
    for (a, b) in edges:
        if a in files and b in files:
            succ[a].append(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(files):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: check-layers.py MAP OBJDIR')
    layers = read_map(sys.argv[1])
    defs, uses, folder = read_objects(sys.argv[2])
    edges = calls(defs, uses)
    level = {}
    for i, (name, _, _, files) in enumerate(layers):
        for f in files:
            if f in level:
                sys.exit('%s is placed twice in the map' % f)
            level[f] = i
    problems = []
    for f in sorted(set(uses) - set(level)):
        problems.append('%s.c is in no layer of the map' % f)
    for f in sorted(set(level) - set(uses)):
        problems.append('the map names %s, which has no object' % f)
    for f in sorted(set(level) & set(folder)):
        if folder[f] != layers[level[f]][0]:
            problems.append('%s.c is in %s/, not in the folder of its layer, '
                            '%s/' % (f, folder[f], layers[level[f]][0]))
    for (a, b), syms in sorted(edges.items()):
        if a in level and b in level and level[b] > level[a]:
            problems.append('%s (%s) calls up into %s (%s): %s'
                            % (a, layers[level[a]][0], b, layers[level[b]][0],
                               ' '.join(sorted(syms))))
    for (a, b), syms in sorted(edges.items()):
        if a in level and b in level and layers[level[a]][2] and \
                level[b] != level[a] and level[b] != 0:
            private = sorted(s for s in syms if not s.startswith('engine_'))
            if private:
                problems.append('%s (%s) may call only the engine\'s public '
                                'functions (engine_*) and the pure layer, but '
                                'calls into %s: %s'
                                % (a, layers[level[a]][0], b, ' '.join(private)))
    for name, allowed, _, files in layers:
        for comp in cycles(set(files), edges):
            if allowed:
                continue
            inner = ['%s -> %s: %s' % (a, b, ' '.join(sorted(s)))
                     for (a, b), s in sorted(edges.items())
                     if a in comp and b in comp]
            problems.append('a cycle in layer %s: %s' % (name, '; '.join(inner)))
    for name, allowed, _, files in reversed(layers):
        below = sorted({layers[level[b]][0] for (a, b) in edges
                        if a in files and b in level and level[b] < level[a]})
        loops = cycles(set(files), edges)
        print('%-11s %s%s' % (name, ' '.join(files),
                              '' if not below else '  -> ' + ' '.join(below)))
        for comp in loops:
            print('            cycle (allowed): %s' % ' '.join(comp))
    if problems:
        for p in problems:
            print('check-layers: ' + p, file=sys.stderr)
        sys.exit(1)
    print('check-layers: %d files in %d layers, no call goes up'
          % (len(level), len(layers)))


if __name__ == '__main__':
    main()
