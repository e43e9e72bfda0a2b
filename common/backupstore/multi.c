/* SPDX-License-Identifier: BSD-3-Clause */
/* Many requests in flight on one curl multi handle (bs_multi).
 *
 * Requests wait in a FIFO queue until a connection slot is free and
 * their retry time (not_before) has come; then they run on an easy
 * handle from the store's pool.  Each attempt ends as in run_sync
 * (store.c: req_detach): done, not found, failed, retried later
 * (back into the queue) or, on WebDAV, retried after the missing
 * collections are made.  A request's done function is called once,
 * when it is finished, and the request is freed after it.
 *
 * Threads: a bs_multi belongs to the one thread that runs it; only
 * bs_multi_wakeup may be called from others.  If libcurl's multi
 * interface itself fails, bs_multi_run says so and the owner frees the
 * multi: requests not finished are abandoned without their done
 * functions, so whatever they point to stays the caller's to free.
 */

#include <config.h>

#include <stdlib.h>

#include <curl/curl.h>

#include "internal.h"

struct bs_multi {
  struct bs_store *s;
  CURLM *cm;
  struct bs_request *queue, *queue_tail;  /* waiting to start, FIFO */
  struct bs_request **active;   /* in flight: connections slots */
  size_t running, queued;
};

/* Free a multi and what it has not finished. */
void
bs_multi_free (struct bs_multi *m)
{
  struct bs_request *r;
  size_t i;

  if (m == NULL)
    return;
  for (i = 0; m->active && i < m->s->cfg->connections; ++i)
    if ((r = m->active[i]) != NULL) {
      curl_multi_remove_handle (m->cm, r->easy);
      curl_easy_cleanup (r->easy);
      req_free (r);
    }
  while ((r = m->queue) != NULL) {
    m->queue = r->next;
    req_free (r);
  }
  if (m->cm)
    curl_multi_cleanup (m->cm);
  free (m->active);
  free (m);
}

/* A new multi. */
struct bs_multi *
bs_multi_new (struct bs_store *s)
{
  struct bs_multi *m = calloc (1, sizeof *m);
  CURLMcode mc;

  if (m == NULL || (m->cm = curl_multi_init ()) == NULL ||
      (m->active = calloc (s->cfg->connections, sizeof *m->active)) == NULL) {
    nbdkit_error ("out of memory");
    if (m)
      curl_multi_cleanup (m->cm);
    free (m);
    return NULL;
  }
  m->s = s;
  mc = curl_multi_setopt (m->cm, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                          (long) s->cfg->connections);
  if (mc != CURLM_OK) {
    nbdkit_error ("%s: libcurl: %s", s->cfg->target,
                  curl_multi_strerror (mc));
    bs_multi_free (m);
    return NULL;
  }
  return m;
}

/* Wake bs_multi_run (a failure only delays it to its timeout). */
void
bs_multi_wakeup (struct bs_multi *m)
{
  CURLMcode mc = curl_multi_wakeup (m->cm);

  if (mc != CURLM_OK)
    nbdkit_debug ("%s: libcurl: wakeup: %s", m->s->cfg->target,
                  curl_multi_strerror (mc));
}

/* Append a request to the waiting queue. */
static void
enqueue (struct bs_multi *m, struct bs_request *r)
{
  r->next = NULL;
  if (m->queue_tail)
    m->queue_tail->next = r;
  else
    m->queue = r;
  m->queue_tail = r;
  m->queued++;
}

/* Queue a request. */
int
bs_multi_add (struct bs_multi *m, enum bs_method method, const char *key,
              const void *data, size_t len, bs_done_fn done, void *opaque)
{
  static const char *const verbs[] = { "GET", "PUT", "HEAD", "DELETE" };
  struct bs_request *r = req_new (m->s, verbs[method], key, data, len);

  if (r == NULL)
    return -1;
  r->done = done;
  r->opaque = opaque;
  enqueue (m, r);
  return 0;
}

/* Requests not finished. */
size_t
bs_multi_pending (const struct bs_multi *m)
{
  return m->running + m->queued;
}

/* Finish a request: call its done function and free it. */
static void
finish (struct bs_request *r, enum bs_result res)
{
  r->done (r->opaque, res, &r->resp);
  req_free (r);
}

/* Fail r, whose easy handle the multi refused (the handle is not
 * pooled again: it may still be half in the multi).
 */
static void
fail_in_multi (struct bs_request *r, CURLMcode mc)
{
  nbdkit_error ("%s/%s: %s: libcurl: %s", r->s->cfg->target, r->key,
                r->verb, curl_multi_strerror (mc));
  curl_easy_cleanup (r->easy);
  r->easy = NULL;
  finish (r, BS_ERROR);
}

/* The active slot of an easy handle, or of a free slot (easy NULL). */
static struct bs_request **
active_slot (struct bs_multi *m, CURL *easy)
{
  size_t i;

  for (i = 0; i < m->s->cfg->connections; ++i)
    if (easy ? m->active[i] && m->active[i]->easy == easy
        : m->active[i] == NULL)
      return &m->active[i];
  return NULL;
}

/* Put r on its own easy handle into the multi (or finish it as failed
 * if it cannot start).
 */
static void
start (struct bs_multi *m, struct bs_request *r)
{
  CURL *easy = req_attach (r);
  CURLMcode mc;

  if (easy == NULL) {
    finish (r, BS_ERROR);
    return;
  }
  mc = curl_multi_add_handle (m->cm, easy);
  if (mc != CURLM_OK) {
    fail_in_multi (r, mc);
    return;
  }
  *active_slot (m, NULL) = r;
  m->running++;
}

/* Start the queued requests that are due, up to the connection limit;
 * returns the milliseconds until the next one is due (or -1).
 */
static int
start_due (struct bs_multi *m)
{
  struct bs_request **pp = &m->queue, *r, *prev = NULL;
  double now = bs_now (), next = -1;

  while ((r = *pp) != NULL && m->running < m->s->cfg->connections) {
    if (r->not_before > now) {
      if (next < 0 || r->not_before < next)
        next = r->not_before;
      prev = r;
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    if (m->queue_tail == r)
      m->queue_tail = prev;
    m->queued--;
    start (m, r);
  }
  return next < 0 ? -1 : (int) ((next - now) * 1000) + 1;
}

/* Deal with a transfer that completed with libcurl's result c. */
static void
completed (struct bs_multi *m, CURL *easy, CURLcode c)
{
  struct bs_request **slot = active_slot (m, easy), *r = *slot;
  CURLMcode mc = curl_multi_remove_handle (m->cm, easy);

  *slot = NULL;
  m->running--;
  if (mc != CURLM_OK) {
    fail_in_multi (r, mc);
    return;
  }
  switch (req_detach (r, c)) {
  case OUT_OK:
    finish (r, BS_OK);
    break;
  case OUT_NOT_FOUND:
    finish (r, BS_NOT_FOUND);
    break;
  case OUT_FAIL:
    finish (r, BS_ERROR);
    break;
  case OUT_MKCOL:
    if (dav_make_parents (m->s, r->key) == -1) {
      finish (r, BS_ERROR);
      break;
    }
    /* fall through */
  case OUT_RETRY:
    enqueue (m, r);
    break;
  }
}

/* Run for a while. */
int
bs_multi_run (struct bs_multi *m, int timeout_ms)
{
  int still, next, msgs;
  CURLMcode mc;
  CURLMsg *msg;

  next = start_due (m);
  if (next >= 0 && next < timeout_ms)
    timeout_ms = next;
  mc = curl_multi_perform (m->cm, &still);
  /* Wait only if that perform finished nothing: a transfer it completed
   * leaves no descriptor to wake the poll, which would sleep out its
   * whole timeout before we read the result.
   */
  if (mc == CURLM_OK && (size_t) still >= m->running)
    mc = curl_multi_poll (m->cm, NULL, 0, timeout_ms, NULL);
  if (mc == CURLM_OK)
    mc = curl_multi_perform (m->cm, &still);
  if (mc != CURLM_OK) {
    nbdkit_error ("%s: libcurl: %s", m->s->cfg->target,
                  curl_multi_strerror (mc));
    return -1;
  }
  while ((msg = curl_multi_info_read (m->cm, &msgs)) != NULL)
    if (msg->msg == CURLMSG_DONE)
      completed (m, msg->easy_handle, msg->data.result);
  start_due (m);
  return 0;
}

/* Run until few enough requests are pending. */
int
bs_multi_wait (struct bs_multi *m, size_t max_pending)
{
  while (bs_multi_pending (m) > max_pending)
    if (bs_multi_run (m, 1000) == -1)
      return -1;
  return 0;
}
