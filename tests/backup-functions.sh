# SPDX-License-Identifier: BSD-3-Clause
# Object stores for the backup tests, started on 127.0.0.1 on ports the
# kernel picks, and stopped (by the PIDs started here) when the test
# exits.  Source after functions.sh.
#
#   start_swift     OpenStack Swift with s3api (a strict S3: it checks
#                   SigV4 signatures and payload hashes); sets S3_ENDPOINT
#   wait_swift      wait until it serves, make the bucket "backups", and
#                   export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
#                   (tempauth's test:tester, whose colon libcurl must
#                   pass through intact)
#   s3_request VERB BUCKET/KEY [FILE]   a signed request with curl(1)
#   start_nginx [RATE]  nginx with WebDAV (PUT, DELETE, MKCOL, PROPFIND);
#                   sets DAV_URL and DAV_ROOT (its files)
#   backup NAME / restores NAME...   a backup saved beside its image,
#                   and the check that it restores (backup-delete tests)
#   stop_service NAME / kill_service NAME   stop (SIGTERM) or kill -9
#                   one service started here and wait for it
#
#   backup_nbdkit ARGS... --run CMD   serve a backup with nbdkit (ARGS:
#                   the plugin's parameters) and run CMD with $uri set
#   backups_get EXPR TARGET [KEY=VALUE...]   print the Python expression
#                   EXPR with b = {name: entry} of `nbdrep backups --json`
#
# Swift takes about 30 s to start on 2 cores: a test starts one and
# does several things in it.

# The restore plugin we build.
BACKUP_PLUGIN="$abs_top_builddir/plugins/backup/.libs/nbdkit-backup-plugin.so"

# backup_nbdkit ARGS... --run CMD: serve a backup with the restore plugin
# and ARGS as the harness serves a controller (start_controller: server
# "restore", sanitizer runtime preloaded in a sanitizer build, exit
# status and sanitizer reports checked when it stops), run CMD with
# $uri set to the export, and print nbdkit's messages but the debug
# ones on stderr.  Returns CMD's status (1 if nbdkit fails).  Not
# nbdkit's own --run: CMD must not inherit the preloaded sanitizer
# runtime (/bin/sh crashes with TSan's).
backup_nbdkit ()
{
  local -a args=()
  local cmd= rc=0
  while [ $# -gt 0 ]; do
    if [ "$1" = --run ]; then
      cmd=$2
      shift
    else
      args+=("$1")
    fi
    shift
  done
  rm -f "$tmpdir/restore.log"
  start_controller restore "$BACKUP_PLUGIN" "${args[@]}" || return 1
  uri=$restore_uri sh -c "$cmd" || rc=$?
  stop_controller restore || rc=1
  grep -v ': debug: ' "$tmpdir/restore.log" >&2 || true
  return "$rc"
}

# backups_get EXPR TARGET [KEY=VALUE...]: evaluate EXPR over the listing.
backups_get ()
{
  local expr=$1 json
  shift
  json=$("$NBDREP" backups --json "$@") || return 1
  python3 -c '
import json, sys
b = {e["name"]: e for e in json.loads(sys.argv[1])}
print(eval(sys.argv[2]))
' "$json" "$expr"
}

declare -A _service_pid=()   # service name -> pid of the process we started

# _start_service NAME CMD...: run CMD in the background (log
# $tmpdir/NAME.log) and remember its pid.
_start_service ()
{
  local name=$1
  shift
  "$@" </dev/null >>"$tmpdir/$name.log" 2>&1 &
  _service_pid[$name]=$!
}

# stop_service NAME: SIGTERM the service and wait up to 20 s (then -9).
stop_service ()
{
  local pid=${_service_pid[$1]-} i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for (( i = 0; i < 200; i++ )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  unset "_service_pid[$1]"
}

# kill_service NAME: kill -9 the service and wait for it.
kill_service ()
{
  local pid=${_service_pid[$1]-}
  [ -n "$pid" ] || return 0
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  unset "_service_pid[$1]"
}

# Stop every service still running (a cleanup hook).
_stop_services ()
{
  local name
  for name in "${!_service_pid[@]}"; do
    stop_service "$name"
  done
}
cleanup_fn _stop_services

# _swift_server_conf TYPE PORT: the configuration of one storage server.
_swift_server_conf ()
{
  cat <<CONF
[DEFAULT]
devices = $SWIFT_DIR/node
mount_check = false
bind_ip = 127.0.0.1
bind_port = $2
workers = 0
user = root
swift_dir = $SWIFT_DIR/etc
log_level = WARNING

[pipeline:main]
pipeline = $1-server

[app:$1-server]
use = egg:swift#$1

[$1-replicator]
[$1-updater]
[$1-auditor]
CONF
}

# _swift_proxy_conf PORT MEMCACHED-PORT: the proxy's configuration.
_swift_proxy_conf ()
{
  cat <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $1
workers = 0
user = root
swift_dir = $SWIFT_DIR/etc
log_level = WARNING

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true

[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$2
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
CONF
}

# start_swift: start memcached and Swift (object, container, account and
# proxy servers); sets S3_ENDPOINT.
start_swift ()
{
  local port_mc port_proxy type port
  local -A ports=()
  SWIFT_DIR=$tmpdir/swift
  mkdir -p "$SWIFT_DIR/etc" "$SWIFT_DIR/node/d1"
  port_mc=$(free_port)
  port_proxy=$(free_port)
  printf '[swift-hash]\nswift_hash_path_suffix = test\nswift_hash_path_prefix = test\n[storage-policy:0]\nname = Policy-0\ndefault = yes\n' \
    >"$SWIFT_DIR/etc/swift.conf"
  for type in object container account; do
    ports[$type]=$(free_port)
    _swift_server_conf "$type" "${ports[$type]}" \
      >"$SWIFT_DIR/etc/$type-server.conf"
    swift-ring-builder "$SWIFT_DIR/etc/$type.builder" create 6 1 1 >/dev/null
    swift-ring-builder "$SWIFT_DIR/etc/$type.builder" add \
      "r1z1-127.0.0.1:${ports[$type]}/d1" 100 >/dev/null
    swift-ring-builder "$SWIFT_DIR/etc/$type.builder" rebalance >/dev/null
  done
  _swift_proxy_conf "$port_proxy" "$port_mc" >"$SWIFT_DIR/etc/proxy-server.conf"
  _start_service memcached memcached -l 127.0.0.1 -p "$port_mc" -U 0 -u nobody
  for type in object container account; do
    _start_service "swift-$type" \
      "swift-$type-server" "$SWIFT_DIR/etc/$type-server.conf"
  done
  _start_service swift-proxy \
    swift-proxy-server "$SWIFT_DIR/etc/proxy-server.conf"
  S3_ENDPOINT=http://127.0.0.1:$port_proxy
}

# wait_swift: wait until Swift serves, and make the bucket "backups"
# (start_swift returns at once: the test can set up meanwhile).
wait_swift ()
{
  wait_until 120 curl -sf "$S3_ENDPOINT/healthcheck"
  export AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing
  unset AWS_SESSION_TOKEN AWS_PROFILE AWS_REGION AWS_DEFAULT_REGION
  unset AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE
  # The proxy answers before the account and container servers do: the
  # first bucket is made once they all serve.
  wait_until 120 s3_request PUT backups
}

# s3_request VERB BUCKET[/KEY] [FILE]: a request signed by curl(1) with
# the test credentials (the colon of the key %-encoded in the URL, which
# reaches curl on its standard input, not on its command line); FILE
# is the body of a PUT.  Prints the response body, fails on an HTTP
# error.
s3_request ()
{
  local verb=$1 path=$2 file=${3-} hash
  local -a body=()
  if [ -n "$file" ]; then
    hash=$(sha256sum "$file" | cut -d' ' -f1)
    body=(--data-binary "@$file")
  else
    hash=$(printf '' | sha256sum | cut -d' ' -f1)
  fi
  printf 'url = "http://%s:%s@%s/%s"\n' test%3Atester testing \
         "${S3_ENDPOINT#http://}" "$path" |
    curl -sSf -K - -X "$verb" --aws-sigv4 "aws:amz:us-east-1:s3" \
      -H "x-amz-content-sha256: $hash" "${body[@]}"
}

# For the tests of backup-delete, which set c_uri (the controller), ctl
# (its control socket), T (the store) and bs (nbdrep backup's options):
# backup NAME ARGS...: a backup of the volume as it is now (its image
# saved as $tmpdir/NAME.img), then leg 1 back from its hold.
backup ()
{
  local name=$1
  shift
  "$NBDCOPY" "$c_uri" "$tmpdir/$name.img" || return 1
  "$NBDREP" backup "$ctl" "$T" "${bs[@]}" --name "$name" "$@" || return 1
  wait_leg_state 30 "$ctl" 1 uptodate
}

# restores NAME...: each backup restores byte for byte and verifies.
restores ()
{
  local name
  for name in "$@"; do
    backup_nbdkit "$T" name="$name" \
      --run "'$NBDCOPY' \"\$uri\" '$tmpdir/restored.img'" || return 1
    cmp "$tmpdir/$name.img" "$tmpdir/restored.img" || return 1
    "$NBDREP" backup-verify "$T" "$name" || return 1
  done
}

# requires_webdav: skip unless nginx with WebDAV, curl and the restore
# plugin are there (start_nginx and backup_nbdkit need them).
requires_webdav ()
{
  requires command -v nginx
  requires test -f /usr/lib/nginx/modules/ngx_http_dav_ext_module.so
  requires command -v curl
  requires test -f "$BACKUP_PLUGIN"
}

# start_nginx [RATE]: start nginx serving WebDAV from $tmpdir/dav/data.
# With RATE (bytes per second), a manifest (backups/NAME.json) is sent
# at that rate while the file $tmpdir/slow-manifests exists.
start_nginx ()
{
  local port dir=$tmpdir/dav slow=
  port=$(free_port)
  if [ -n "${1-}" ]; then
    slow="location ~ /backups/[^/]+\\.json\$ {
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS;
      create_full_put_path off;
      set \$rate 0;
      if (-f $tmpdir/slow-manifests) { set \$rate $1; }
      limit_rate \$rate;
    }"
  fi
  mkdir -p "$dir/data" "$dir/tmp"
  # One process (no master and workers), so that kill_service kills the
  # whole server.
  cat >"$dir/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ngx_http_dav_ext_module.so;
pid $dir/nginx.pid;
daemon off;
master_process off;
error_log $tmpdir/nginx-error.log alert;
events { }
http {
  access_log $dir/access.log;
  client_body_temp_path $dir/tmp;
  server {
    listen 127.0.0.1:$port;
    root $dir/data;
    client_max_body_size 0;
    location / {
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS;
      create_full_put_path off;
    }
    $slow
  }
}
CONF
  _start_service nginx nginx -c "$dir/nginx.conf" -p "$dir"
  DAV_URL=http://127.0.0.1:$port
  DAV_ROOT=$dir/data
  wait_until 30 curl -s -o /dev/null "$DAV_URL/"
}
