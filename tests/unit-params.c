/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of common/replication/pure/params.c.
 *
 * set_cases: a sequence of key=value (plugin or filter shape) is fed
 * to config_set then config_check; the row expects "OK" followed by
 * FIELD=VALUE pairs (formatted by format_field), "UNKNOWN KEY" (config_set
 * returned 1 for KEY) or a substring of the error message.  Every
 * message from config_set must start with the key it is about.
 * uri_cases, socket_cases, same_leg_cases, size_cases and
 * seconds_cases test the parsers alone.
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "params.h"
#include "unit.h"

#define ARRAY_SIZE(a) (sizeof (a) / sizeof (a)[0])
#define MAX_PARAMS 20

/* Strings of 10, 100 and 400 characters for length limits (a Unix
 * socket path holds 107 bytes).
 */
#define A10 "/aaaaaaaaa"
#define A100 A10 A10 A10 A10 A10 A10 A10 A10 A10 A10
#define Z10 "0000000000"
#define Z100 Z10 Z10 Z10 Z10 Z10 Z10 Z10 Z10 Z10 Z10
#define Z400 Z100 Z100 Z100 Z100

#define SIXTEEN_LEGS                                                    \
  "nbd://h1", "nbd://h2", "nbd://h3", "nbd://h4", "nbd://h5",           \
  "nbd://h6", "nbd://h7", "nbd://h8", "nbd://h9", "nbd://h10",          \
  "nbd://h11", "nbd://h12", "nbd://h13", "nbd://h14", "nbd://h15",      \
  "nbd://h16"

#define DEFAULTS                                                        \
  "connections=4 quorum=1 majority=false read=least-busy timeout=10 "   \
  "control=(null) chunk=65536 max-legs=8 al-extent=4194304 "            \
  "al-extents=1024 resync-rate=0 resync-min-rate=4194304 init=none "    \
  "wait=10 force=false prefer=-1 metadata=internal ublk=-1 "            \
  "ublk-queues=1 ublk-depth=128 sched=auto"

struct set_case {
  bool filter;                          /* local_leg0 */
  const char *params[MAX_PARAMS];       /* "key=value" in order */
  const char *expect;   /* "OK [FIELD=VALUE ...]", "UNKNOWN KEY" or error */
};

/* Replica keys are written "replica=URI" so that rows read like the
 * command line; SIXTEEN_LEGS are bare and get "replica=" added.
 */
static const struct set_case set_cases[] = {
  /* Defaults and leg counts. */
  { true, { NULL }, "OK legs=1 " DEFAULTS },
  { false, { NULL }, "no legs: give at least one replica=URI" },
  { false, { "replica=nbd://a" }, "OK legs=1 uri0=nbd://a " DEFAULTS },
  { true, { "replica=nbd://a" }, "OK legs=2 uri0=nbd://a" },
  { false, { "replica=nbd://a", "replica=nbd+unix:///?socket=/r0",
             "replica=nbd+vsock://3" }, "OK "
    "legs=3 uri0=nbd://a uri1=nbd+unix:///?socket=/r0 "
    "uri2=nbd+vsock://3" },
  { false, { SIXTEEN_LEGS }, "OK legs=16 max-legs=16 uri15=nbd://h16" },
  { false, { SIXTEEN_LEGS, "replica=nbd://h17" },
    "replica=nbd://h17: too many legs (at most 16)" },
  { true, { "nbd://h1", "nbd://h2", "nbd://h3", "nbd://h4", "nbd://h5",
            "nbd://h6", "nbd://h7", "nbd://h8", "nbd://h9", "nbd://h10",
            "nbd://h11", "nbd://h12", "nbd://h13", "nbd://h14",
            "nbd://h15" }, "OK legs=16 uri14=nbd://h15" },
  { true, { SIXTEEN_LEGS },
    "replica=nbd://h16: too many legs (at most 16, the local leg 0 "
    "included)" },

  /* Bad URIs are reported with the key. */
  { false, { "replica=foo://x" },
    "replica=foo://x: unknown scheme 'foo' (expected nbd, nbds, nbd+unix, "
    "nbds+unix, nbd+vsock or nbds+vsock)" },
  { false, { "replica=nbd://a\nb" },
    "replica=nbd://a\\x0ab: whitespace or control character at offset 7" },
  { true, { "replica=/dev/sdb" }, "replica=/dev/sdb: not an NBD URI" },

  /* Duplicate legs, numbered from 0 in the plugin, 1 in the filter. */
  { false, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://a" },
    "replica=nbd://a: duplicate leg: leg 2 is the same as leg 0 "
    "(nbd://a)" },
  { true, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://a" },
    "replica=nbd://a: duplicate leg: leg 3 is the same as leg 1 "
    "(nbd://a)" },
  { true, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://b/" },
    "duplicate leg: leg 3 is the same as leg 2 (nbd://b)" },
  { false, { "replica=nbd+unix:///?socket=/a",
             "replica=nbd+unix://?socket=/a" },
    "duplicate leg: leg 1 is the same as leg 0" },
  { false, { "replica=nbd+unix:///?socket=/a",
             "replica=nbds+unix:///?tls-verify-peer=false&socket=/a" },
    "duplicate leg: leg 1 is the same as leg 0" },
  { false, { "replica=nbd://A:10809/", "replica=nbd://a" },
    "duplicate leg: leg 1 is the same as leg 0 (nbd://A:10809/)" },
  { false, { "replica=nbds://alice@a/e", "replica=nbd://a:10809/e" },
    "duplicate leg: leg 1 is the same as leg 0" },
  { false, { "replica=nbd+vsock://3", "replica=nbds+vsock://3:10809/" },
    "duplicate leg: leg 1 is the same as leg 0" },
  { false, { "replica=nbd://[::1]:10810/", "replica=nbd://[::1]:10810" },
    "duplicate leg: leg 1 is the same as leg 0" },
  { false, { "replica=nbd://a/x", "replica=nbd://a/y", "replica=nbd://a",
             "replica=nbd://a:10810", "replica=nbd://b/x" }, "OK "
    "legs=5" },
  { false, { "replica=nbd+unix:///?socket=/a",
             "replica=nbd+unix:///?socket=/b",
             "replica=nbd+unix:///e?socket=/a",
             "replica=nbd://a/?x=1" }, "OK legs=4" },
  { false, { "replica=nbd+vsock://3", "replica=nbd+vsock://4",
             "replica=nbd+vsock://3:10810", "replica=nbd+vsock://3/e",
             "replica=nbd://3" }, "OK legs=5" },

  /* connections */
  { true, { "connections=1" }, "OK connections=1" },
  { true, { "connections=64" }, "OK connections=64" },
  { true, { "connections=0" }, "connections=0: must be between 1 and 64" },
  { true, { "connections=65" }, "connections=65: must be between 1 and 64" },
  { true, { "connections=four" },
    "connections=four: must be a whole number between 1 and 64" },
  /* Whole numbers in nbdkit's grammar (nbdkit_parse_unsigned). */
  { true, { "connections=+4" }, "OK connections=4" },
  { true, { "connections= 4" }, "OK connections=4" },
  { true, { "connections=\t+4" }, "OK connections=4" },
  { true, { "connections=0x10" }, "OK connections=16" },
  { true, { "connections=0X3f" }, "OK connections=63" },
  { true, { "connections=010" }, "OK connections=8" },
  { true, { "connections=0x41" },
    "connections=0x41: must be between 1 and 64" },
  { true, { "connections=0100" }, "OK connections=64" },
  { true, { "connections=0101" },
    "connections=0101: must be between 1 and 64" },
  { true, { "connections=00" }, "connections=00: must be between 1 and 64" },
  { true, { "connections=08" },
    "connections=08: must be a whole number between 1 and 64" },
  { true, { "connections=0x" }, "connections=0x: must be a whole number" },
  { true, { "connections=0xg" }, "connections=0xg: must be a whole number" },
  { true, { "connections=-1" }, "connections=-1: must be a whole number" },
  { true, { "connections=-0" }, "connections=-0: must be a whole number" },
  { true, { "connections=+-4" }, "connections=+-4: must be a whole number" },
  { true, { "connections=4 " }, "connections=4 : must be a whole number" },
  { true, { "connections=" }, "connections=: must be a whole number" },
  { true, { "connections=4.0" }, "must be a whole number" },
  { true, { "connections=4K" }, "connections=4K: must be a whole number" },
  { true, { "connections=99999999999999999999999" },
    "must be a whole number" },
  { true, { "connections=2", "connections=3" },
    "connections given twice: connections=3" },

  /* quorum */
  { false, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://c",
             "quorum=2" }, "OK quorum=2 majority=false" },
  { false, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://c",
             "quorum=3" }, "OK quorum=3" },
  { false, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://c",
             "quorum=4" },
    "quorum=4 is larger than the number of legs (3)" },
  { true, { "quorum=2" }, "quorum=2 is larger than the number of legs (1)" },
  { true, { "replica=nbd://a", "quorum=2" }, "OK legs=2 quorum=2" },
  { true, { "quorum=0" },
    "quorum=0: must be majority or a number of legs between 1 and 16" },
  { true, { "quorum=17" }, "quorum=17: must be majority" },
  { true, { "quorum=Majority" }, "quorum=Majority: must be majority" },
  { true, { "quorum=-1" }, "quorum=-1: must be majority" },
  { true, { "quorum=0x1" }, "OK quorum=1 majority=false" },
  { true, { "quorum=0x" }, "quorum=0x: must be majority" },
  { true, { "quorum=majority", "quorum=2" },
    "quorum given twice: quorum=2" },
  { false, { "quorum=majority", "replica=nbd://a" }, "OK "
    "quorum=1 majority=true" },
  { false, { "quorum=majority", "replica=nbd://a", "replica=nbd://b" },
    "OK quorum=2 majority=true" },
  { false, { "quorum=majority", "replica=nbd://a", "replica=nbd://b",
             "replica=nbd://c" }, "OK quorum=2" },
  { false, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://c",
             "replica=nbd://d", "quorum=majority" }, "OK quorum=3" },
  { false, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://c",
             "replica=nbd://d", "replica=nbd://e", "quorum=majority" },
    "OK quorum=3" },
  { true, { "quorum=majority" }, "OK legs=1 quorum=1" },
  { true, { "quorum=majority", "replica=nbd://a", "replica=nbd://b" },
    "OK legs=3 quorum=2" },
  { false, { SIXTEEN_LEGS, "quorum=majority" }, "OK quorum=9" },

  /* read */
  { true, { "read=least-busy" }, "OK read=least-busy" },
  { true, { "read=round-robin" }, "OK read=round-robin" },
  { true, { "read=first" }, "OK read=first" },
  { true, { "read=fastest" },
    "read=fastest: must be least-busy, round-robin or first" },
  { true, { "read=FIRST" }, "read=FIRST: must be least-busy" },
  { true, { "read=first", "read=first" }, "read given twice: read=first" },

  /* timeout and wait */
  { true, { "timeout=0.5" }, "OK timeout=0.5" },
  { true, { "timeout=2.25" }, "OK timeout=2.25" },
  { true, { "timeout=3600" }, "OK timeout=3600" },
  { true, { "timeout=0" },
    "timeout=0: must be more than 0 and at most 3600 seconds" },
  { true, { "timeout=0.0" }, "timeout=0.0: must be more than 0" },
  { true, { "timeout=3600.5" },
    "timeout=3600.5: must be at most 3600 seconds" },
  { true, { "timeout=10s" },
    "timeout=10s: not a number of seconds (such as 10 or 0.5, without a "
    "unit)" },
  { true, { "timeout=-1" }, "timeout=-1: not a number of seconds" },
  { true, { "timeout=1e3" }, "timeout=1e3: not a number of seconds" },
  { true, { "timeout=" }, "timeout=: not a number of seconds" },
  { true, { "wait=0" }, "OK wait=0" },
  { true, { "wait=0.25" }, "OK wait=0.25" },
  { true, { "wait=86400" }, "OK wait=86400" },
  { true, { "wait=86400.01" },
    "wait=86400.01: must be at most 86400 seconds" },
  { true, { "wait=inf" }, "wait=inf: not a number of seconds" },
  { true, { "wait=1", "wait=2" }, "wait given twice: wait=2" },

  /* control */
  { true, { "control=/run/vol.ctl" }, "OK control=/run/vol.ctl" },
  { true, { "control=" A100 "/234567" }, "OK control=" A100 "/234567" },
  { true, { "control=" A100 "/2345678" },
    "control=" A100 "/2345678: longer than 107 bytes, the limit of a Unix "
    "socket path" },
  { true, { "control=" }, "control=: must not be empty" },
  { true, { "control=/a", "control=/b" }, "control given twice: control=/b" },

  /* chunk, al-extent, al-extents, max-legs */
  { true, { "chunk=4K" }, "OK chunk=4096" },
  { true, { "chunk=4096", "al-extent=4096" }, "OK "
    "chunk=4096 al-extent=4096" },
  { true, { "chunk=8k" }, "OK chunk=8192" },
  { true, { "chunk=128s" }, "OK chunk=65536" },
  { true, { "chunk=64M" }, "OK chunk=67108864 al-extent=67108864" },
  { true, { "chunk=64MiB" }, "chunk=64MiB: not a size" },
  { true, { "chunk=8kb" }, "chunk=8kb: not a size" },
  { true, { "chunk=3000" },
    "chunk=3000: must be a power of two between 4K and 64M" },
  { true, { "chunk=2K" }, "chunk=2K: must be a power of two between 4K" },
  { true, { "chunk=48K" }, "chunk=48K: must be a power of two" },
  { true, { "chunk=128M" }, "chunk=128M: must be a power of two" },
  { true, { "chunk=1E" }, "chunk=1E: must be a power of two" },
  { true, { "chunk=abc" },
    "chunk=abc: not a size (bytes, or a number with a b, s, K, M, G, T, P "
    "or E suffix)" },
  { true, { "chunk=-4K" }, "chunk=-4K: not a size" },
  { true, { "al-extent=1G" }, "OK al-extent=1073741824" },
  { true, { "al-extent=2G" },
    "al-extent=2G: must be a power of two between 4K and 1G" },
  { true, { "al-extent=3M" }, "al-extent=3M: must be a power of two" },
  { true, { "al-extent=32K" }, "al-extent=32K is smaller than chunk=64K" },
  { true, { "al-extent=1M", "chunk=2M" },
    "al-extent=1M is smaller than chunk=2M" },
  { true, { "chunk=2M", "al-extent=2M" }, "OK "
    "chunk=2097152 al-extent=2097152" },
  { true, { "chunk=16M" }, "OK al-extent=16777216" },
  { true, { "chunk=4K", "chunk=8K" }, "chunk given twice: chunk=8K" },
  { true, { "al-extents=1" }, "OK al-extents=1" },
  { true, { "al-extents=65536" }, "OK al-extents=65536" },
  { true, { "al-extents=0" }, "al-extents=0: must be between 1 and 65536" },
  { true, { "al-extents=65537" }, "al-extents=65537: must be between" },
  { true, { "al-extents=1K" }, "al-extents=1K: must be a whole number" },
  { true, { "al-extents=0x10000" }, "OK al-extents=65536" },
  { true, { "max-legs=020" }, "OK max-legs=16" },
  { true, { "max-legs=1" }, "OK max-legs=1" },
  { true, { "max-legs=16" }, "OK max-legs=16" },
  { true, { "max-legs=0" }, "max-legs=0: must be between 1 and 16" },
  { true, { "max-legs=17" }, "max-legs=17: must be between 1 and 16" },
  { true, { "max-legs=2", "replica=nbd://a", "replica=nbd://b" },
    "max-legs=2 is smaller than the number of legs (3)" },
  { true, { "max-legs=3", "replica=nbd://a", "replica=nbd://b" }, "OK "
    "max-legs=3" },
  { false, { "replica=nbd://1", "replica=nbd://2", "replica=nbd://3",
             "replica=nbd://4", "replica=nbd://5", "replica=nbd://6",
             "replica=nbd://7", "replica=nbd://8", "replica=nbd://9",
             "replica=nbd://10" }, "OK legs=10 max-legs=10" },

  /* resync rates */
  { true, { "resync-rate=0" }, "OK resync-rate=0" },
  { true, { "resync-rate=100M" }, "OK "
    "resync-rate=104857600 resync-min-rate=4194304" },
  { true, { "resync-rate=1M" }, "OK "
    "resync-rate=1048576 resync-min-rate=1048576" },
  { true, { "resync-rate=1M", "resync-min-rate=1M" }, "OK "
    "resync-min-rate=1048576" },
  { true, { "resync-min-rate=2M", "resync-rate=1M" },
    "resync-min-rate=2M is larger than resync-rate=1M" },
  { true, { "resync-min-rate=8M" }, "OK "
    "resync-rate=0 resync-min-rate=8388608" },
  { true, { "resync-rate=1M", "resync-min-rate=0" }, "OK "
    "resync-min-rate=0" },
  { true, { "resync-rate=1 M" }, "resync-rate=1 M: not a size" },
  { true, { "resync-min-rate=1MiBs" }, "resync-min-rate=1MiBs: not a size" },
  { true, { "resync-rate=0", "resync-rate=0" },
    "resync-rate given twice: resync-rate=0" },

  /* init, force, metadata */
  { true, { "init=copy" }, "OK init=copy" },
  { true, { "init=zero" }, "OK init=zero" },
  { true, { "init=assume-clean" }, "OK init=assume-clean" },
  { true, { "init=none" }, "init=none: must be copy, zero or assume-clean" },
  { true, { "init=Copy" }, "init=Copy: must be copy, zero or assume-clean" },
  { true, { "force=1" }, "OK force=true" },
  { true, { "force=0" }, "OK force=false" },
  { true, { "force=true" }, "OK force=true" },
  { true, { "force=FALSE" }, "OK force=false" },
  { true, { "force=Yes" }, "OK force=true" },
  { true, { "force=no" }, "OK force=false" },
  { true, { "force=ON" }, "OK force=true" },
  { true, { "force=off" }, "OK force=false" },
  { true, { "force=2" },
    "force=2: must be 1/0, true/false, yes/no or on/off" },
  { true, { "force=" }, "force=: must be 1/0" },
  { true, { "force=yes", "force=no" }, "force given twice: force=no" },
  { true, { "metadata=internal" }, "OK metadata=internal" },
  { true, { "metadata=none" }, "OK metadata=none" },
  { true, { "metadata=external" },
    "metadata=external: must be internal or none" },
  { true, { "sched=keep" }, "OK sched=keep" },
  { true, { "sched=auto" }, "OK sched=auto" },
  { true, { "sched=batch" }, "sched=batch: must be auto or keep" },
  { true, { "sched=keep", "sched=auto" }, "sched given twice: sched=auto" },

  /* prefer */
  { false, { "replica=nbd://a", "prefer=0" }, "OK prefer=0" },
  { false, { "replica=nbd://a", "replica=nbd://b", "replica=nbd://c",
             "prefer=2" }, "OK prefer=2" },
  { false, { "prefer=3", "replica=nbd://a", "replica=nbd://b",
             "replica=nbd://c" },
    "prefer=3 is not a leg (the legs are 0 to 2)" },
  { true, { "prefer=1", "replica=nbd://a" }, "OK prefer=1" },
  { true, { "prefer=1" }, "prefer=1 is not a leg (the legs are 0 to 0)" },
  { true, { "prefer=16" }, "prefer=16: must be between 0 and 15" },
  { true, { "prefer=-1" }, "prefer=-1: must be a whole number" },
  { true, { "prefer=0x1", "replica=nbd://a" }, "OK prefer=1" },
  { true, { "prefer=1x" }, "prefer=1x: must be a whole number" },

  /* ublk */
  { true, { "ublk=0" }, "OK ublk=0 ublk-queues=1 ublk-depth=128" },
  { true, { "ublk=1048575", "ublk-queues=64", "ublk-depth=4096" }, "OK "
    "ublk=1048575 ublk-queues=64 ublk-depth=4096" },
  { true, { "ublk-depth=100", "ublk=7", "ublk-queues=1" }, "OK "
    "ublk=7 ublk-depth=100 ublk-queues=1" },
  { true, { "ublk=1048576" }, "ublk=1048576: must be between 0 and 1048575" },
  { true, { "ublk=-1" }, "ublk=-1: must be a whole number" },
  { true, { "ublk=0xfffff" }, "OK ublk=1048575" },
  { true, { "ublk=0x100000" }, "ublk=0x100000: must be between 0 and" },
  { true, { "ublk=0", "ublk-depth=0x1000" }, "OK ublk-depth=4096" },
  { true, { "ublk=1", "ublk-queues=0" },
    "ublk-queues=0: must be between 1 and 64" },
  { true, { "ublk=1", "ublk-queues=65" }, "ublk-queues=65: must be between" },
  { true, { "ublk=1", "ublk-depth=0" },
    "ublk-depth=0: must be between 1 and 4096" },
  { true, { "ublk=1", "ublk-depth=4097" }, "ublk-depth=4097: must be" },
  { true, { "ublk-queues=2" }, "ublk-queues is given without ublk=ID" },
  { true, { "ublk=0" }, "OK ublk-keep=false" },
  { true, { "ublk=0", "ublk-keep=true" }, "OK ublk=0 ublk-keep=true" },
  { true, { "ublk-keep=yes" }, "ublk-keep is given without ublk=ID" },
  { true, { "ublk=0", "ublk-keep=maybe" },
    "ublk-keep=maybe: must be 1/0, true/false, yes/no or on/off" },
  { true, { "ublk-depth=64" }, "ublk-depth is given without ublk=ID" },
  { true, { "ublk=1", "ublk=2" }, "ublk given twice: ublk=2" },

  /* TLS: as nbdkit-nbd-plugin's keys; unset until given. */
  { true, { NULL }, "OK tls=unset tls-certificates=(null) tls-verify=-1 "
    "tls-username=(null) tls-psk=(null)" },
  { true, { "tls=require" }, "OK tls=require" },
  { true, { "tls=REQUIRE" }, "OK tls=require" },
  { true, { "tls=on" }, "OK tls=on" },
  { true, { "tls=off" }, "OK tls=off" },
  { true, { "tls=yes" }, "OK tls=on" },
  { true, { "tls=0" }, "OK tls=off" },
  { true, { "tls=maybe" }, "tls=maybe: must be off, on or require" },
  { true, { "tls=" }, "tls=: must be off, on or require" },
  { true, { "tls=on", "tls=off" }, "tls given twice: tls=off" },
  { false, { "nbd://a", "tls-certificates=/etc/pki/libnbd",
             "tls-verify=false", "tls-username=alice", "tls-psk=/k.psk" },
    "OK tls=unset tls-certificates=/etc/pki/libnbd tls-verify=0 "
    "tls-username=alice tls-psk=/k.psk" },
  { true, { "tls-verify=on" }, "OK tls-verify=1" },
  { true, { "tls-verify=x" }, "tls-verify=x: " },
  { true, { "tls-certificates=" }, "tls-certificates=: must not be empty" },
  { true, { "tls-username=" }, "tls-username=: must not be empty" },
  { true, { "tls-psk=" }, "tls-psk=: must not be empty" },
  { true, { "tls-psk=/a", "tls-psk=/b" }, "tls-psk given twice: tls-psk=/b" },

  /* Unknown keys are not ours: config_set returns 1. */
  { false, { "replica=nbd://a", "file=/x" }, "UNKNOWN file" },
  { true, { "size=1G" }, "UNKNOWN size" },
  { true, { "Replica=nbd://a" }, "UNKNOWN Replica" },
  { true, { "replicas=nbd://a" }, "UNKNOWN replicas" },
  { true, { "=x" }, "UNKNOWN " },
};

/* enum tls_mode from TLS_MODE_UNSET (-1) on. */
static const char *const tls_mode_names[] = { "unset", "off", "on", "require" };

/* s, or "(null)". */
static const char *
str_or_null (const char *s)
{
  return s ? s : "(null)";
}

/* Format the field called name of c into buf; false if no such field. */
static bool
format_field (const struct config *c, const char *name, char *buf,
              size_t len)
{
  unsigned i;

  if (strcmp (name, "legs") == 0)
    snprintf (buf, len, "%zu", config_nr_legs (c));
  else if (sscanf (name, "uri%u", &i) == 1 && i < c->nr_uris)
    snprintf (buf, len, "%s", c->uris[i]);
  else if (strcmp (name, "connections") == 0)
    snprintf (buf, len, "%u", c->connections);
  else if (strcmp (name, "quorum") == 0)
    snprintf (buf, len, "%u", c->quorum);
  else if (strcmp (name, "majority") == 0)
    snprintf (buf, len, "%s", c->quorum_majority ? "true" : "false");
  else if (strcmp (name, "read") == 0)
    snprintf (buf, len, "%s", read_policy_name (c->read));
  else if (strcmp (name, "timeout") == 0)
    snprintf (buf, len, "%g", c->timeout);
  else if (strcmp (name, "control") == 0)
    snprintf (buf, len, "%s", str_or_null (c->control));
  else if (strcmp (name, "chunk") == 0)
    snprintf (buf, len, "%" PRIu32, c->chunk);
  else if (strcmp (name, "max-legs") == 0)
    snprintf (buf, len, "%u", c->max_legs);
  else if (strcmp (name, "al-extent") == 0)
    snprintf (buf, len, "%" PRIu32, c->al_extent);
  else if (strcmp (name, "al-extents") == 0)
    snprintf (buf, len, "%u", c->al_extents);
  else if (strcmp (name, "resync-rate") == 0)
    snprintf (buf, len, "%" PRIu64, c->resync_rate);
  else if (strcmp (name, "resync-min-rate") == 0)
    snprintf (buf, len, "%" PRIu64, c->resync_min_rate);
  else if (strcmp (name, "init") == 0)
    snprintf (buf, len, "%s", init_mode_name (c->init));
  else if (strcmp (name, "wait") == 0)
    snprintf (buf, len, "%g", c->wait);
  else if (strcmp (name, "force") == 0)
    snprintf (buf, len, "%s", c->force ? "true" : "false");
  else if (strcmp (name, "prefer") == 0)
    snprintf (buf, len, "%d", c->prefer);
  else if (strcmp (name, "metadata") == 0)
    snprintf (buf, len, "%s",
              c->metadata == METADATA_INTERNAL ? "internal" : "none");
  else if (strcmp (name, "sched") == 0)
    snprintf (buf, len, "%s", c->sched == SCHED_MODE_AUTO ? "auto" : "keep");
  else if (strcmp (name, "ublk") == 0)
    snprintf (buf, len, "%d", c->ublk_id);
  else if (strcmp (name, "ublk-queues") == 0)
    snprintf (buf, len, "%u", c->ublk_queues);
  else if (strcmp (name, "ublk-depth") == 0)
    snprintf (buf, len, "%u", c->ublk_depth);
  else if (strcmp (name, "ublk-keep") == 0)
    snprintf (buf, len, "%s", c->ublk_keep ? "true" : "false");
  else if (strcmp (name, "tls") == 0)
    snprintf (buf, len, "%s", tls_mode_names[c->tls.mode + 1]);
  else if (strcmp (name, "tls-certificates") == 0)
    snprintf (buf, len, "%s", str_or_null (c->tls.certificates));
  else if (strcmp (name, "tls-verify") == 0)
    snprintf (buf, len, "%d", c->tls.verify);
  else if (strcmp (name, "tls-username") == 0)
    snprintf (buf, len, "%s", str_or_null (c->tls.username));
  else if (strcmp (name, "tls-psk") == 0)
    snprintf (buf, len, "%s", str_or_null (c->tls.psk));
  else
    return false;
  return true;
}

/* Compare each "name=value" of fields with c. */
static void
check_fields (size_t row, const struct config *c, const char *fields)
{
  char copy[1024], actual[256];
  char *saveptr, *item;

  snprintf (copy, sizeof copy, "%s", fields);
  for (item = strtok_r (copy, " ", &saveptr); item != NULL;
       item = strtok_r (NULL, " ", &saveptr)) {
    char *eq = strchr (item, '=');

    CHECKF (eq != NULL, "row %zu: bad field '%s'", row, item);
    if (eq == NULL)
      continue;
    *eq = '\0';
    CHECKF (format_field (c, item, actual, sizeof actual),
            "row %zu: no field '%s'", row, item);
    CHECKF (strcmp (actual, eq + 1) == 0,
            "row %zu: %s is '%s', expected '%s'", row, item, actual, eq + 1);
  }
}

/* Feed one "key=value" (or a bare URI) to config_set. */
static int
set_param (size_t row, struct config *c, const char *param,
           char *err, size_t errlen, char *key, size_t keylen)
{
  const char *eq = strchr (param, '=');
  const char *value;
  int r;

  if (strncmp (param, "nbd", 3) == 0) {     /* a bare URI */
    snprintf (key, keylen, "replica");
    value = param;
  }
  else {
    CHECKF (eq != NULL, "row %zu: bad param '%s'", row, param);
    if (eq == NULL)
      return -1;
    snprintf (key, keylen, "%.*s", (int) (eq - param), param);
    value = eq + 1;
  }
  r = config_set (c, key, value, err, errlen);
  if (r == -1)
    CHECKF (strncmp (err, key, strlen (key)) == 0,
            "row %zu: message '%s' does not start with '%s'", row, err, key);
  if (r == 1)
    CHECKF (err[0] == '\0', "row %zu: message for an unknown key", row);
  return r;
}

/* Run one set_case; the outcome ("OK UNKNOWN KEY" or the message)
 * is written to result.
 */
static void
run_set_case (size_t row, const struct set_case *t, struct config *c,
              char *result, size_t len)
{
  char err[512], key[64];
  size_t i;

  config_init (c, t->filter);
  for (i = 0; i < MAX_PARAMS && t->params[i] != NULL; i++) {
    int r = set_param (row, c, t->params[i], err, sizeof err,
                       key, sizeof key);

    if (r == 1) {
      snprintf (result, len, "UNKNOWN %s", key);
      return;
    }
    if (r == -1) {
      snprintf (result, len, "%s", err);
      return;
    }
  }
  if (config_check (c, err, sizeof err) == -1)
    snprintf (result, len, "%s", err);
  else
    snprintf (result, len, "OK");
}

/* The key=value table. */
static void
test_set_cases (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (set_cases); row++) {
    const struct set_case *t = &set_cases[row];
    struct config c;
    char result[512];

    run_set_case (row, t, &c, result, sizeof result);
    if (strncmp (t->expect, "OK", 2) == 0) {
      CHECKF (strcmp (result, "OK") == 0,
              "row %zu: got '%s', expected OK", row, result);
      if (strcmp (result, "OK") == 0)
        check_fields (row, &c, t->expect + 2);
    }
    else if (strncmp (t->expect, "UNKNOWN ", 8) == 0)
      CHECKF (strcmp (result, t->expect) == 0,
              "row %zu: got '%s', expected '%s'", row, result, t->expect);
    else
      CHECKF (strstr (result, t->expect) != NULL,
              "row %zu: got '%s', expected '%s'", row, result, t->expect);
  }
}

/* Messages are cut to any buffer size, always NUL-terminated. */
static void
test_small_buffers (void)
{
  static const size_t sizes[] = { 1, 2, 8, 20, 64 };
  const char *value = "foo://x";
  char full[512], buf[72];
  struct config c;
  size_t i;

  config_init (&c, false);
  CHECK (config_set (&c, "replica", value, full, sizeof full) == -1);
  CHECK (strlen (full) > 64);
  for (i = 0; i < ARRAY_SIZE (sizes); i++) {
    memset (buf, 'X', sizeof buf);
    CHECKF (config_set (&c, "replica", value, buf, sizes[i]) == -1,
            "size %zu", sizes[i]);
    CHECKF (strlen (buf) == sizes[i] - 1, "size %zu: length %zu",
            sizes[i], strlen (buf));
    CHECKF (strncmp (buf, full, sizes[i] - 1) == 0, "size %zu: '%s'",
            sizes[i], buf);
    CHECKF (buf[sizes[i]] == 'X', "size %zu: wrote past the end", sizes[i]);
  }
  CHECK (config_set (&c, "replica", value, NULL, 0) == -1);
  CHECK (config_set (&c, "connections", "0", NULL, 0) == -1);
  config_init (&c, false);
  CHECK (config_check (&c, NULL, 0) == -1);
  CHECK (config_check_uri ("nbd://", NULL, 0) == -1);
}

struct uri_case {
  const char *uri;
  const char *expect;           /* NULL = valid, else error substring */
};

static const struct uri_case uri_cases[] = {
  /* Valid. */
  { "nbd://a", NULL },
  { "nbd://a/", NULL },
  { "nbd://a:10810/", NULL },
  { "nbd://host.example.com:1/export", NULL },
  { "nbd://192.168.0.1:65535/x", NULL },
  { "nbds://alice@b/disk", NULL },
  { "nbd://[::1]/", NULL },
  { "nbd://[::1]:10810/e", NULL },
  { "nbd://[::ffff:192.168.0.1]", NULL },
  { "nbd://[fe80::1%25eth0]:10809/", NULL },
  { "nbd://a/exp/with/slashes", NULL },
  { "nbd://a/%20x?tls-certificates=/etc/pki", NULL },
  { "nbd+unix:///?socket=/run/r0.sock", NULL },
  { "nbd+unix://?socket=/a", NULL },
  { "nbds+unix:///export?socket=/a&tls-certificates=/etc/pki", NULL },
  { "nbd+unix:///?socket=%2Frun%2Fa", NULL },
  { "nbd+unix:///?socket=" A100 "/234567", NULL },
  { "nbds+unix://alice@/?socket=/a", NULL },
  { "nbds+unix://alice@?socket=/a&tls-psk-file=/etc/k.psk", NULL },
  { "nbds://alice@b/?tls-psk-file=%2Fetc%2Fk.psk", NULL },
  { "nbds://b/?tls-certificates=/etc/pki&tls-psk-file=/k", NULL },
  { "nbd+vsock://3", NULL },
  { "nbds+vsock://2:10810/e", NULL },
  { "nbd+vsock://4294967295:2147483647/", NULL },
  /* As libnbd reads them (xmlParseURI, its query split): a name may be
   * %-encoded; port 0 is 10809; ';' ends a parameter when no '&'
   * follows.
   */
  { "nbd+unix:///?%73ocket=/a", NULL },
  { "nbd+unix:///?socket=/a;x=1", NULL },
  { "nbd://a:0/", NULL },
  { "nbd+vsock://3:0", NULL },
  { "nbd://a/b+c?x", NULL },
  { "nbd://user:pw@a/", NULL },

  /* Not NBD URIs. */
  { "foo://x",
    "replica=foo://x: unknown scheme 'foo' (expected nbd, nbds, nbd+unix, "
    "nbds+unix, nbd+vsock or nbds+vsock)" },
  { "http://a", "replica=http://a: unknown scheme 'http'" },
  { "NBD://a", "unknown scheme 'NBD'" },
  { "nbd+tcp://a", "unknown scheme 'nbd+tcp'" },
  { "", "replica=: not an NBD URI" },
  { "/dev/sdb", "replica=/dev/sdb: not an NBD URI (such as "
    "nbd://HOST[:PORT][/EXPORT] or nbd+unix:///[EXPORT]?socket=PATH)" },
  { "nbd:a", "not an NBD URI" },
  { "nbd:/a", "not an NBD URI" },

  /* Characters. */
  { "nbd://a b/", "replica=nbd://a b/: whitespace or control character at "
    "offset 7" },
  { "nbd://a\t/", "replica=nbd://a\\x09/: whitespace or control" },
  { "nbd://a/\x7f", "replica=nbd://a/\\x7f: whitespace or control "
    "character at offset 8" },
  { " nbd://a", "at offset 0" },
  { "nbd://a/x#frag", "unexpected fragment '#frag'" },
  { "nbd://a/%zz", "bad %-escape '%zz'" },
  { "nbd://a/%4", "bad %-escape '%4'" },
  { "nbd+unix:///?socket=/a%00b", "bad %-escape '%00' (a NUL)" },
  /* libxml2 (and so libnbd) cannot parse these. */
  { "nbd://a/e{x}", "replica=nbd://a/e{x}: not a URI libnbd can parse "
    "(RFC 3986: characters such as < > \" { } | \\ ^ ` must be "
    "%-escaped)" },
  { "nbd+unix:///?socket=/run/a|b", "not a URI libnbd can parse" },
  { "nbd://a/<x>", "not a URI libnbd can parse" },
  { "nbd://a:10810/\"x\"", "not a URI libnbd can parse" },
  { "nbd://a/x^y", "not a URI libnbd can parse" },

  /* TCP. */
  { "nbd://", "replica=nbd://: no host (expected nbd://HOST[:PORT]"
    "[/EXPORT])" },
  { "nbds:///x", "no host (expected nbds://" },
  { "nbd://:10809/", "no host" },
  { "nbd://a:65536", "bad port '65536' (expected a number from 1 to "
    "65535)" },
  { "nbd://a:/", "bad port ''" },
  { "nbd://a:x", "bad port 'x'" },
  { "nbd://a:10809x/", "bad port '10809x'" },
  { "nbd://a:+1/", "bad port '+1'" },
  { "nbd://[::1/", "'[' without ']' in the host" },
  { "nbd://[]/", "bad host '[]'" },
  { "nbd://[zz::1]/", "bad host '[zz::1]'" },
  { "nbd://[1.2.3.4]/", "bad host '[1.2.3.4]'" },
  { "nbd://[::1]x/", "unexpected 'x' after the host" },
  { "nbd://a!b/", "bad host 'a!b'" },
  { "nbd://a@b@c/", "more than one '@' in 'a@b@c'" },
  { "nbd://@a/", "empty user name before '@'" },
  { "nbd://a?socket=/x", "socket= is only for nbd+unix and nbds+unix" },

  /* Unix. */
  { "nbd+unix:///", "no socket (expected nbd+unix:///[EXPORT]"
    "?socket=PATH)" },
  { "nbds+unix:///?sock=/a", "no socket (expected nbds+unix:///" },
  { "nbd+unix://host/?socket=/a", "nbd+unix takes no host ('host')" },
  { "nbd+unix://localhost?socket=/a", "takes no host ('localhost')" },
  { "nbd+unix:///?socket=", "socket= is empty" },
  { "nbd+unix:///?socket=run/a", "socket=run/a is not an absolute path" },
  { "nbd+unix:///?socket=%41a", "socket=%41a is not an absolute path" },
  { "nbd+unix:///?socket=/a&socket=/b", "socket= given twice" },
  { "nbd+unix:///?socket=" A100 "/2345678",
    "socket path longer than 107 bytes" },
  { "nbds+unix://@/?socket=/a", "empty user name before '@'" },
  { "nbds+unix://alice@host/?socket=/a", "nbds+unix takes no host ('host'): "
    "expected nbds+unix://[USER@]/[EXPORT]?socket=PATH" },
  { "nbds+unix://alice@:10809/?socket=/a", "takes no host (':10809')" },
  { "nbds+unix://alice@b@/?socket=/a", "more than one '@'" },
  { "nbds+unix://alice@/", "no socket" },

  /* libnbd's TLS files. */
  { "nbds://b/?tls-psk-file=k.psk", "replica=nbds://b/?tls-psk-file=k.psk: "
    "tls-psk-file=k.psk is not an absolute path" },
  { "nbds+unix:///?socket=/a&tls-certificates=certs",
    "tls-certificates=certs is not an absolute path" },
  { "nbds://b/?tls-certificates=", "tls-certificates= is not an absolute" },
  { "nbds://b/?tls-psk-file=%41", "tls-psk-file=%41 is not an absolute" },
  { "nbds://b/?tls-psk-fil%65=k", "tls-psk-fil%65=k is not an absolute" },
  { "nbds://b/?x=1;tls-certificates=c", "tls-certificates=c is not an" },

  /* vsock. */
  { "nbd+vsock://", "bad or missing CID (expected nbd+vsock://CID[:PORT]"
    "[/EXPORT] with a numeric CID)" },
  { "nbd+vsock://x/", "bad or missing CID" },
  { "nbd+vsock://4294967296/", "bad or missing CID" },
  { "nbd+vsock://-1/", "bad or missing CID" },
  { "nbd+vsock://3:4294967296", "bad port '4294967296' (expected a number "
    "from 1 to 2147483647)" },
  { "nbd+vsock://3:4294967295", "bad port" },
  { "nbd+vsock://3x", "bad or missing CID" },
  { "nbd+vsock://3?socket=/a", "socket= is only for" },
};

/* The URI table. */
static void
test_uris (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (uri_cases); row++) {
    const struct uri_case *t = &uri_cases[row];
    char err[512] = "";
    int r = config_check_uri (t->uri, err, sizeof err);

    if (t->expect == NULL)
      CHECKF (r == 0, "row %zu: %s: unexpected error '%s'", row, t->uri,
              err);
    else {
      CHECKF (r == -1, "row %zu: %s: accepted", row, t->uri);
      CHECKF (strstr (err, t->expect) != NULL,
              "row %zu: got '%s', expected '%s'", row, err, t->expect);
      CHECKF (strncmp (err, "replica=", 8) == 0,
              "row %zu: '%s' does not name replica=", row, err);
    }
  }
}

/* The socket path of Unix URIs, as libnbd reads it (decoded; the query
 * split at '&', or at ';' when no '&' follows).  NULL: not one.
 */
static const struct {
  const char *uri;
  const char *path;
} socket_cases[] = {
  { "nbd+unix:///?socket=/run/r0.sock", "/run/r0.sock" },
  { "nbds+unix://alice@/e?tls-verify-peer=false&socket=/a", "/a" },
  { "nbd+unix:///?socket=%2Frun%2Fa%20b", "/run/a b" },
  { "nbd+unix:///?%73ocket=/s", "/s" },
  { "nbd+unix:///?socket=/a;x=1", "/a" },
  { "nbd+unix:///?x=1;socket=/b", "/b" },
  { "nbd+unix:///?socket=/a%3Bx", "/a;x" },
  { "nbd+unix:///?socket=/a&x=1;y", "/a" },
  { "nbd+unix:///?socket=/a;x=1&y=2", "/a;x=1" },
  { "nbd+unix:///?socket=/a+b", "/a+b" },
  { "nbd+unix:///?=/x&socket=/a", "/a" },
  { "nbd+unix:///?socket=" A100 "/234567", A100 "/234567" },
  { "nbd+unix:///?socket=/a&socket=/b", NULL },
  { "nbd://a/?socket=/a", NULL },
  { "nbd+unix:///", NULL },
  { "nbd+unix:///?sock=/a", NULL },
};

/* The socket table. */
static void
test_unix_sockets (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (socket_cases); row++) {
    char path[128] = "";
    int r = config_unix_socket (socket_cases[row].uri, path, sizeof path);

    if (socket_cases[row].path == NULL)
      CHECKF (r == -1, "socket row %zu: %s: got '%s'", row,
              socket_cases[row].uri, path);
    else
      CHECKF (r == 0 && strcmp (path, socket_cases[row].path) == 0,
              "socket row %zu: %s: got %d '%s'", row, socket_cases[row].uri,
              r, path);
  }
}

/* Pairs of URIs and whether they name the same leg, compared decoded as
 * libnbd uses them.
 */
static const struct {
  const char *a, *b;
  bool same;
} same_leg_cases[] = {
  { "nbd://a/%61", "nbd://a/a", true },
  { "nbd://%61/x", "nbd://A/x", true },
  { "nbd://a:0", "nbd://a:10809/", true },
  { "nbd://a/b+c", "nbd://a/b%2Bc", true },
  { "nbd://a/b+c", "nbd://a/b%20c", false },
  { "nbd://a/e%3Fx", "nbd://a/e?x", false },
  { "nbd://a/%2F", "nbd://a//", true },
  { "nbd://[::1]:10810", "nbd://[::1]:10810/", true },
  { "nbd://[fe80::1%25eth0]", "nbd://[fe80::1%25eth1]", false },
  { "nbd+unix:///?socket=%2Fa", "nbd+unix:///?socket=/a", true },
  { "nbd+unix:///?socket=/a;x=1", "nbd+unix:///?socket=/a", true },
  { "nbd+unix:///?%73ocket=/a", "nbds+unix:///?socket=/a", true },
  { "nbd+unix:///?socket=/a%3Bx=1", "nbd+unix:///?socket=/a", false },
  { "nbd+unix:///e?socket=/a", "nbd+unix:///?socket=/a", false },
  { "nbd+vsock://3", "nbd+vsock://3:10809", true },
  { "nbd+vsock://3:0", "nbd+vsock://3", true },
  { "nbd+vsock://3", "nbd://3", false },
  { "nbd://a/e{x}", "nbd://a/e{x}", false },   /* malformed */
};

/* The same-leg table, both ways round. */
static void
test_same_legs (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (same_leg_cases); row++) {
    const char *a = same_leg_cases[row].a, *b = same_leg_cases[row].b;
    bool same = same_leg_cases[row].same;

    CHECKF (config_same_leg (a, b) == same && config_same_leg (b, a) == same,
            "same-leg row %zu: %s and %s: expected %d", row, a, b, same);
  }
}

/* Which URIs name their own TLS files. */
static void
test_uri_tls_files (void)
{
  static const struct {
    const char *uri;
    bool names;
  } rows[] = {
    { "nbds://b/?tls-psk-file=/k", true },
    { "nbds+unix:///?socket=/a&tls-certificates=/d", true },
    { "nbds://b/?tls-psk-file=k", true },       /* relative: still named */
    { "nbds://b/", false },
    { "nbds://alice@b/?tls-psk-files=/k", false },
    { "nbds://b/?x-tls-psk-file=/k", false },
    { "nbds://b/tls-psk-file=/k", false },      /* the export name */
    { "foo://b/?tls-psk-file=/k", false },      /* not an NBD URI */
  };
  size_t row;

  for (row = 0; row < ARRAY_SIZE (rows); row++)
    CHECKF (config_uri_names_tls_files (rows[row].uri) == rows[row].names,
            "row %zu: %s", row, rows[row].uri);
}

/* config_set_tls: the TLS keys alone, for nbdrep (repeats replace). */
static void
test_set_tls (void)
{
  struct tls_params t;
  char err[256];

  config_tls_init (&t);
  CHECK (t.mode == TLS_MODE_UNSET && t.verify == -1 && t.psk == NULL);
  CHECK (config_set_tls (&t, "tls", "require", err, sizeof err) == 0);
  CHECK (t.mode == TLS_MODE_REQUIRE);
  CHECK (config_set_tls (&t, "tls", "off", err, sizeof err) == 0);
  CHECK (t.mode == TLS_MODE_OFF);
  CHECK (config_set_tls (&t, "tls-psk", "k", err, sizeof err) == 0);
  CHECK (strcmp (t.psk, "k") == 0);
  CHECK (config_set_tls (&t, "tls-verify", "no", err, sizeof err) == 0);
  CHECK (t.verify == 0);
  CHECK (config_set_tls (&t, "tls", "x", err, sizeof err) == -1);
  CHECK (strcmp (err, "tls=x: must be off, on or require") == 0);
  CHECK (config_set_tls (&t, "replica", "nbd://a", err, sizeof err) == 1);
  CHECK (config_set_tls (&t, "sched", "auto", err, sizeof err) == 1);
  CHECK (config_set_tls (&t, "tlsx", "on", err, sizeof err) == 1);
}

struct size_case {
  const char *str;
  bool ok;
  uint64_t value;
};

/* What nbdkit 1.32's nbdkit_parse_size does with each string (measured
 * with `nbdkit memory size=STR`); tests/test-parse-grammar.sh checks
 * the rows against nbdkit itself.
 */
static const struct size_case size_cases[] = {
  { "0", true, 0 },
  { "512", true, 512 },
  { "512B", true, 512 },
  { "512b", true, 512 },
  { "0010", true, 10 },
  { "1s", true, 512 },
  { "8S", true, 4096 },
  { "1K", true, 1024 },
  { "1k", true, 1024 },
  { "64K", true, 65536 },
  { "4M", true, 4194304 },
  { "1G", true, UINT64_C (1) << 30 },
  { "3g", true, UINT64_C (3) << 30 },
  { "1T", true, UINT64_C (1) << 40 },
  { "2P", true, UINT64_C (2) << 50 },
  { "1E", true, UINT64_C (1) << 60 },
  { "1e", true, UINT64_C (1) << 60 },
  { "7E", true, UINT64_C (7) << 60 },
  { "9223372036854775807", true, INT64_MAX },
  { "8589934591G", true, UINT64_C (8589934591) << 30 },
  { "+1", true, 1 },
  { " 1", true, 1 },
  { " +1", true, 1 },
  { "\t7", true, 7 },
  { "+0", true, 0 },
  { "8E", false, 0 },
  { "15E", false, 0 },
  { "8589934592G", false, 0 },
  { "9223372036854775808", false, 0 },
  { "18446744073709551615", false, 0 },
  { "99999999999999999999999K", false, 0 },
  { "4MB", false, 0 },
  { "4MiB", false, 0 },
  { "4mib", false, 0 },
  { "1KB", false, 0 },
  { "1kb", false, 0 },
  { "", false, 0 },
  { "K", false, 0 },
  { "B", false, 0 },
  { "-1", false, 0 },
  { "+ 1", false, 0 },
  { "++1", false, 0 },
  { "1 ", false, 0 },
  { "1 K", false, 0 },
  { "1KK", false, 0 },
  { "1sb", false, 0 },
  { "1iB", false, 0 },
  { "1Ki", false, 0 },
  { "4BM", false, 0 },
  { "1X", false, 0 },
  { "1Z", false, 0 },
  { "0x10", false, 0 },
  { "1.5M", false, 0 },
  { "1e3", false, 0 },
};

/* The size table. */
static void
test_sizes (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (size_cases); row++) {
    const struct size_case *t = &size_cases[row];
    uint64_t v = 12345;
    int r = config_parse_size (t->str, &v);

    CHECKF (r == (t->ok ? 0 : -1), "row %zu: '%s' returned %d", row,
            t->str, r);
    if (t->ok)
      CHECKF (v == t->value, "row %zu: '%s' is %" PRIu64 ", expected %"
              PRIu64, row, t->str, v, t->value);
    else
      CHECKF (v == 12345, "row %zu: '%s' changed the result", row, t->str);
  }
}

/* What nbdkit 1.32's nbdkit_parse_bool does with each string (checked
 * against nbdkit by tests/test-parse-grammar.sh): 1, 0 or -1.
 */
static const struct bool_case {
  const char *str;
  int value;
} bool_cases[] = {
  { "1", 1 }, { "0", 0 }, { "true", 1 }, { "false", 0 }, { "t", 1 },
  { "f", 0 }, { "yes", 1 }, { "no", 0 }, { "y", 1 }, { "n", 0 },
  { "on", 1 }, { "off", 0 }, { "TRUE", 1 }, { "Yes", 1 }, { "oFF", 0 },
  { "2", -1 }, { "", -1 }, { "ye", -1 }, { "of", -1 }, { " 1", -1 },
  { "1 ", -1 }, { "+1", -1 }, { "truee", -1 }, { "nope", -1 },
};

/* The boolean table, through a parameter that takes a boolean. */
static void
test_bools (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (bool_cases); row++) {
    const struct bool_case *t = &bool_cases[row];
    struct config c;
    char err[256];
    int r;

    config_init (&c, false);
    r = config_set (&c, "force", t->str, err, sizeof err);
    CHECKF (r == (t->value == -1 ? -1 : 0), "row %zu: force=%s returned %d",
            row, t->str, r);
    if (t->value != -1)
      CHECKF (c.force == (t->value == 1), "row %zu: force=%s is %d", row,
              t->str, c.force);
  }
}

struct seconds_case {
  const char *str;
  bool ok;
  double value;
};

static const struct seconds_case seconds_cases[] = {
  { "0", true, 0 },
  { "10", true, 10 },
  { "0.5", true, 0.5 },
  { "2.25", true, 2.25 },
  { "000.50", true, 0.5 },
  { "86400", true, 86400 },
  { "0.1", true, 0.1 },
  { "0." Z400 "1", true, 0 },           /* underflow: a tiny number */
  { "1" Z400, false, 0 },               /* overflow */
  { "", false, 0 },
  { ".5", false, 0 },
  { "5.", false, 0 },
  { ".", false, 0 },
  { "-1", false, 0 },
  { "+1", false, 0 },
  { " 1", false, 0 },
  { "1 ", false, 0 },
  { "1e3", false, 0 },
  { "1E3", false, 0 },
  { "inf", false, 0 },
  { "nan", false, 0 },
  { "0x10", false, 0 },
  { "1,5", false, 0 },
  { "1.2.3", false, 0 },
  { "10s", false, 0 },
  { "1m", false, 0 },
};

/* The seconds table. */
static void
test_seconds (void)
{
  size_t row;

  for (row = 0; row < ARRAY_SIZE (seconds_cases); row++) {
    const struct seconds_case *t = &seconds_cases[row];
    double v = -7;
    int r = config_parse_seconds (t->str, &v);

    CHECKF (r == (t->ok ? 0 : -1), "row %zu: '%.20s' returned %d", row,
            t->str, r);
    if (t->ok && t->value == 0 && t->str[1] == '.')
      CHECKF (v >= 0 && v < 1e-300, "row %zu: '%.20s...' is %g", row,
              t->str, v);
    else if (t->ok)
      CHECKF (v == t->value, "row %zu: '%s' is %g, expected %g", row,
              t->str, v, t->value);
    else
      CHECKF (v == -7, "row %zu: '%.20s' changed the result", row, t->str);
  }
}

/* The names are the parameter spellings. */
static void
test_names (void)
{
  CHECK (strcmp (read_policy_name (READ_LEAST_BUSY), "least-busy") == 0);
  CHECK (strcmp (read_policy_name (READ_ROUND_ROBIN), "round-robin") == 0);
  CHECK (strcmp (read_policy_name (READ_FIRST), "first") == 0);
  CHECK (strcmp (init_mode_name (INIT_NONE), "none") == 0);
  CHECK (strcmp (init_mode_name (INIT_COPY), "copy") == 0);
  CHECK (strcmp (init_mode_name (INIT_ZERO), "zero") == 0);
  CHECK (strcmp (init_mode_name (INIT_ASSUME_CLEAN), "assume-clean") == 0);
}

int
main (void)
{
  test_set_cases ();
  test_small_buffers ();
  test_uris ();
  test_uri_tls_files ();
  test_unix_sockets ();
  test_same_legs ();
  test_set_tls ();
  test_sizes ();
  test_bools ();
  test_seconds ();
  test_names ();
  return unit_exit ("unit-config");
}
