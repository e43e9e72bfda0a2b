#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
#
# The systemd units run without systemd (tests/test-systemd.sh).
#
#   systemd-exec.py expand UNIT INSTANCE KEY [--map FROM=TO]...
#     Print the command line of the unit's KEY (ExecStart, ExecStartPost)
#     as systemd would run it for INSTANCE, one word a line: the
#     specifiers %i, %I, %t (the runtime directory, /run) and %% are
#     replaced, the Environment= and EnvironmentFile= variables
#     substituted (${X} in place, a word $X split at whitespace), the
#     prefixes -@:+! of the executable dropped.  Every path starting
#     with FROM (e.g. /etc/nbdkit-replicate or /run) becomes TO first,
#     also in the environment's values and files' names.
#   systemd-exec.py run UNIT INSTANCE KEY [--map FROM=TO]...
#     Run that command line with the unit's environment added to ours
#     (exec: its exit status is ours).
#   systemd-exec.py listen UNIT INSTANCE [--map FROM=TO]...
#     Print the ListenStream= path of a socket unit.
#   systemd-exec.py activate SOCKET CMD ARGS...
#     Listen on the Unix socket SOCKET and exec CMD with it as fd 3
#     (LISTEN_FDS=1, LISTEN_PID: systemd's socket activation); with
#     ACTIVATE_PRELOAD in the environment, CMD gets it as LD_PRELOAD.
#
# Only the part of systemd's syntax these units use is understood
# (systemd.service(5), systemd.exec(5)): a line continued by a
# backslash, quotes, and KEY=VALUE files with optional quotes.

import os
import re
import shlex
import socket
import sys


def read_unit(path):
    """The unit as {section: [(key, value)]}."""
    sections, section, pending = {}, None, ""
    with open(path) as f:
        for raw in f:
            line = pending + raw.rstrip("\n")
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            m = re.match(r"\[(.+)\]$", line)
            if m:
                section = sections.setdefault(m.group(1), [])
                continue
            key, _, value = line.partition("=")
            section.append((key.strip(), value.strip()))
    return sections


def mapped(text, maps):
    """text with every path starting with FROM (a whole path component)
    made to start with TO."""
    for src, dst in maps:
        text = re.sub(r"(?<![\w./-])" + re.escape(src) + r"(?![\w.-])",
                      lambda m: dst, text)
    return text


def specifiers(text, instance, maps):
    def one(m):
        c = m.group(1)
        if c in "iI":
            return instance
        if c == "t":
            return mapped("/run", maps)
        if c == "%":
            return "%"
        sys.exit("systemd-exec.py: specifier %%%s not supported" % c)
    return re.sub(r"%(.)", one, text)


def read_env_file(path, env):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            key, _, value = line.partition("=")
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            env[key.strip()] = value


def environment(service, instance, maps):
    env = {}
    for key, value in service:
        if key == "Environment":
            for word in shlex.split(specifiers(value, instance, maps)):
                k, _, v = word.partition("=")
                env[k] = v
        elif key == "EnvironmentFile":
            optional = value.startswith("-")
            path = mapped(specifiers(value.lstrip("-"), instance, maps), maps)
            if os.path.exists(path):
                read_env_file(path, env)
            elif not optional:
                sys.exit("systemd-exec.py: %s: no such file" % path)
    return {k: mapped(v, maps) for k, v in env.items()}


def expand(unit, instance, key, maps, env):
    service = read_unit(unit)["Service"]
    env.update(environment(service, instance, maps))
    lines = [v for k, v in service if k == key]
    if len(lines) != 1:
        sys.exit("systemd-exec.py: %s: %d %s= lines" % (unit, len(lines), key))
    words = []
    for word in shlex.split(specifiers(lines[0], instance, maps)):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            words += env.get(m.group(1), "").split()
            continue
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                      lambda m: env.get(m.group(1), ""), word)
        words.append(word.replace("$$", "$"))
    words[0] = words[0].lstrip("-@:+!")
    return [mapped(w, maps) for w in words]


def main(argv):
    maps = []
    while "--map" in argv:
        i = argv.index("--map")
        src, _, dst = argv[i + 1].partition("=")
        maps.append((src, dst))
        del argv[i:i + 2]
    cmd = argv[1]
    if cmd == "expand":
        for word in expand(argv[2], argv[3], argv[4], maps, {}):
            print(word)
    elif cmd == "run":
        env = dict(os.environ)
        words = expand(argv[2], argv[3], argv[4], maps, env)
        os.execvpe(words[0], words, env)
    elif cmd == "listen":
        sock = read_unit(argv[2])["Socket"]
        paths = [v for k, v in sock if k == "ListenStream"]
        print(mapped(specifiers(paths[-1], argv[3], maps), maps))
    elif cmd == "activate":
        path = argv[2]
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(128)
        if s.fileno() != 3:
            os.dup2(s.fileno(), 3)
        os.set_inheritable(3, True)
        os.environ["LISTEN_FDS"] = "1"
        os.environ["LISTEN_PID"] = str(os.getpid())
        # A sanitizer runtime for CMD alone (not for python3, whose pyenv
        # shim is a shell script that LeakSanitizer would report).
        if os.environ.get("ACTIVATE_PRELOAD"):
            os.environ["LD_PRELOAD"] = os.environ.pop("ACTIVATE_PRELOAD")
        os.execvp(argv[3], argv[3:])
    else:
        sys.exit("systemd-exec.py: unknown command %s" % cmd)


main(sys.argv)
