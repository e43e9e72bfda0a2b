#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The XML of store replies as an XML parser reads it (issue 18: xml.c
# was a hand scanner beside libxml2).  A fake store in Python answers
# `nbdrep backups` with listings no real server sends but XML allows,
# one kind per target (the first path segment, or the bucket, names
# it), and logs the requests:
#   - WebDAV and S3 listings of volumes/ where a volume is inside a
#     comment (it must not be listed: no request for its backups) or
#     its name is in a CDATA section (it must be listed);
#   - a listing cut in the middle: nbdrep fails and says the reply is
#     not well-formed XML, naming the request;
#   - an S3 error whose Code follows a commented-out one and whose
#     Message holds an entity and CDATA;
#   - an HTML error page with an upper-case TITLE (HTML's names have no
#     case), summarised by its title.
# The hand scanner listed the commented volume, missed the CDATA one,
# took a truncated listing for a short one, and lost the S3 error's
# code and the page's title.

source ./functions.sh
set -euo pipefail

requires python3 -c 'import http.server'

cat >"$tmpdir/fakestore.py" <<'EOF'
import http.server, os, sys, urllib.parse
log, portfile = sys.argv[1], sys.argv[2]
DAV = ('<?xml version="1.0" encoding="utf-8"?>\n'
       '<D:multistatus xmlns:D="DAV:">%s</D:multistatus>\n')
S3 = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
      'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
      '<IsTruncated>false</IsTruncated>%s</ListBucketResult>')

def dav_entry(href):
    return ('<D:response><D:href>%s</D:href><D:propstat><D:prop>'
            '<D:resourcetype><D:collection/></D:resourcetype></D:prop>'
            '<D:status>HTTP/1.1 200 OK</D:status></D:propstat>'
            '</D:response>' % href)

def s3_prefix(p):
    return '<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>' % p

def volumes(kind, entry, top):
    """The listing of volumes/ for kind; entry(name) makes one."""
    if kind == 'comment':
        return entry(top) + '<!-- %s -->' % entry(top + 'ghost/')
    if kind == 'cdata':
        return entry('<![CDATA[%scdata/]]>' % top)
    if kind == 'truncated':
        return entry(top) + entry(top + 'cut/') * 40
    return ''

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PROPFIND(self):
        self.rfile.read(int(self.headers.get('Content-Length') or 0))
        kind = self.path.split('/')[1]
        with open(log, 'a') as f:
            f.write('PROPFIND %s\n' % self.path)
        if kind == 'title':
            return self.reply(403, '<HTML><HEAD><TITLE>Refused by the '
                              'proxy</TITLE></HEAD><BODY><HR></BODY></HTML>')
        top = '/%s/volumes/' % kind
        if self.path == '/%s/' % kind:
            return self.reply(207, DAV % (dav_entry('/%s/' % kind) +
                                          dav_entry(top)))
        if self.path != top:
            return self.reply(404, '')
        body = DAV % volumes(kind, dav_entry, top)
        if kind == 'truncated':
            body = body[:len(body) // 2]
        self.reply(207, body)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        kind = url.path.strip('/')
        prefix = urllib.parse.parse_qs(url.query).get('prefix', [''])[0]
        with open(log, 'a') as f:
            f.write('GET %s %s\n' % (url.path, prefix))
        if kind == 'error':
            return self.reply(403, '<?xml version="1.0"?><Error><!-- '
                              '<Code>Old</Code> --><Code>AccessDenied</Code>'
                              '<Message>no &amp; <![CDATA[<never>]]>'
                              '</Message></Error>')
        if prefix != 'v/volumes/':
            return self.reply(200, S3 % '')
        body = S3 % volumes(kind, s3_prefix, prefix)
        if kind == 'truncated':
            body = body[:len(body) // 2]
        self.reply(200, body)

server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
with open(portfile + '.tmp', 'w') as f:
    f.write(str(server.server_port))
os.rename(portfile + '.tmp', portfile)
server.serve_forever()
EOF

log=$tmpdir/requests
python3 "$tmpdir/fakestore.py" "$log" "$tmpdir/port" &
fake_pid=$!
# stop_fake: stop the fake store.
stop_fake ()
{
  kill "$fake_pid" 2>/dev/null || :
  wait "$fake_pid" 2>/dev/null || :
}
cleanup_fn stop_fake
wait_until 30 test -f "$tmpdir/port"
base=http://127.0.0.1:$(cat "$tmpdir/port")

# backups KIND TARGET [KEY=VALUE...]: run nbdrep backups on TARGET with
# no retries, S3 anonymous against the fake; its exit status in $rc,
# stderr in $tmpdir/err.
backups ()
{
  rc=0
  env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
    HOME="$tmpdir" "$NBDREP" backups "$@" retries=0 \
    >"$tmpdir/out" 2>"$tmpdir/err" || rc=$?
  cat "$tmpdir/err" >&2
}

# backups_s3 KIND: backups on the fake's bucket KIND, prefix v.
backups_s3 ()
{
  backups "s3://$1/v" endpoint="$base" addressing=path
}

# refused WHAT PATTERN: did the last backups exit 1 with a line
# matching the grep PATTERN?
refused ()
{
  [ "$rc" = 1 ] && grep -q -- "$2" "$tmpdir/err" ||
    fail "$1: exit $rc, $(cat "$tmpdir/err")"
}

failures=0
# fail MESSAGE: count a failure.
fail ()
{
  echo "FAIL: $*" >&2
  failures=$(( failures + 1 ))
}

# A commented volume is not one; a volume named in CDATA is.
backups "$base/comment"
[ "$rc" = 0 ] || fail "WebDAV comment: exit $rc"
! grep -q ghost "$log" || fail "WebDAV: the commented volume was listed"
backups "$base/cdata"
[ "$rc" = 0 ] || fail "WebDAV CDATA: exit $rc"
grep -qx 'PROPFIND /cdata/volumes/cdata/backups/' "$log" ||
  fail "WebDAV: the CDATA volume was not listed"
backups_s3 comment
[ "$rc" = 0 ] || fail "S3 comment: exit $rc"
! grep -q ghost "$log" || fail "S3: the commented volume was listed"
backups_s3 cdata
[ "$rc" = 0 ] || fail "S3 CDATA: exit $rc"
grep -qx 'GET /cdata v/volumes/cdata/backups/' "$log" ||
  fail "S3: the CDATA volume was not listed"

# A listing cut in the middle is an error that says so.
xml='the reply is not well-formed XML (line [0-9]*: .*)$'
backups "$base/truncated"
refused "WebDAV truncated" "^nbdrep: $base/truncated/volumes/: PROPFIND: $xml"
backups_s3 truncated
refused "S3 truncated" "^nbdrep: s3://truncated/v/volumes/: GET: $xml"

# Errors: the S3 code and message as XML has them, an HTML title.
backups_s3 error
refused "S3 error" 'HTTP 403 AccessDenied: no & <never>$'
backups "$base/title"
refused "HTML title" 'HTTP 403 (Refused by the proxy)$'

cat "$log"
[ "$failures" -eq 0 ]
