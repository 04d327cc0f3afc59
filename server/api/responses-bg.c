/* responses-bg.c: background responses (responses-bg.h). */
#include "responses-bg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "job.h"
#include "ms-clock.h"
#include "ms-json.h"
#include "ms-strbuf.h"
#include "request.h"
#include "responses-answer.h"

#define SNAPSHOT_EVERY_S 0.2

struct ms_bg {
	struct ms_bg *next;        /* the list's (its lock) */
	struct ms_api *api;
	struct ms_job *jb;         /* its thread's alone until done */
	char id[64];
	pthread_mutex_t mu;        /* what follows */
	pthread_cond_t cv;         /* more stream, or the end */
	struct ms_strbuf sse;      /* every event written */
	size_t *ev_off;            /* event k starts at ev_off[k] (k: its sequence_number) */
	size_t n_ev, cap_ev;
	cJSON *snapshot;
	bool queued;               /* no event yet */
	bool done;
	bool cancel, cancel_sent;
	int refs;
};

static void bg_free(struct ms_bg *bg)
{
	ms_job_free(bg->jb);
	ms_strbuf_free(&bg->sse);
	free(bg->ev_off);
	cJSON_Delete(bg->snapshot);
	pthread_mutex_destroy(&bg->mu);
	pthread_cond_destroy(&bg->cv);
	free(bg);
}

void ms_bg_unref(struct ms_bg *bg)
{
	if (!bg)
		return;
	pthread_mutex_lock(&bg->mu);
	bool last = --bg->refs == 0;
	pthread_mutex_unlock(&bg->mu);
	if (last)
		bg_free(bg);
}

/* ---- the run's thread ---- */

/* Asked to stop: once, so that the calls' ends are still read. */
static bool bg_gone(void *ctx)
{
	struct ms_bg *bg = ctx;
	pthread_mutex_lock(&bg->mu);
	bool now = bg->cancel && !bg->cancel_sent;
	bg->cancel_sent |= now;
	pthread_mutex_unlock(&bg->mu);
	return now;
}

/* What the job wrote, onto the log, each event's offset kept (events are
 * whole and end with a blank line; their JSON holds no raw newline); with
 * the lock held. */
static void take_events(struct ms_bg *bg, struct ms_job *jb)
{
	const char *p = jb->out.p, *end = p + jb->out.len;
	for (const char *q = p; q < end;) {
		if (bg->n_ev == bg->cap_ev) {
			size_t nc = bg->cap_ev ? bg->cap_ev * 2 : 64;
			size_t *no = realloc(bg->ev_off, nc * sizeof(*no));
			if (!no) {
				jb->failed = true;
				break;
			}
			bg->ev_off = no, bg->cap_ev = nc;
		}
		bg->ev_off[bg->n_ev++] = bg->sse.len + (size_t)(q - p);
		const char *blank = memmem(q, (size_t)(end - q), "\n\n", 2);
		q = blank ? blank + 2 : end;
	}
	ms_strbuf_add(&bg->sse, jb->out.p, jb->out.len);
	jb->failed |= bg->sse.oom;
	ms_strbuf_reset(&jb->out);
	bg->queued &= !bg->n_ev;
}

static void snapshot(struct ms_bg *bg, struct ms_job *jb)
{
	cJSON *s = ms_responses_snapshot(jb);
	if (!s)
		return;
	if (bg->queued)
		ms_json_replace(s, "status", cJSON_CreateString("queued"));
	if (ms_job_failed(jb))
		ms_json_replace(s, "status", cJSON_CreateString("failed"));
	cJSON_Delete(bg->snapshot);
	bg->snapshot = s;
}

static void *bg_main(void *arg)
{
	struct ms_bg *bg = arg;
	struct ms_job *jb = bg->jb;
	double next = 0;
	while (!jb->finished_all && !ms_job_failed(jb)) {
		ms_job_advance(jb, bg_gone, bg, 0, NULL);
		bool now = jb->finished_all || ms_now_s() >= next;
		pthread_mutex_lock(&bg->mu);
		take_events(bg, jb);
		if (now)
			snapshot(bg, jb), next = ms_now_s() + SNAPSHOT_EVERY_S;
		pthread_cond_broadcast(&bg->cv);
		pthread_mutex_unlock(&bg->mu);
	}
	if (!jb->finished_all)
		ms_job_cancel(jb); /* failed: what still runs is not wanted */
	pthread_mutex_lock(&bg->mu);
	snapshot(bg, jb);
	bg->done = true;
	pthread_cond_broadcast(&bg->cv);
	pthread_mutex_unlock(&bg->mu);
	ms_bg_unref(bg);
	return NULL;
}

/* ---- the list ---- */

void ms_bg_list_init(struct ms_bg_list *l)
{
	pthread_mutex_init(&l->mu, NULL);
	l->head = NULL;
}

static void wait_done(struct ms_bg *bg)
{
	pthread_mutex_lock(&bg->mu);
	while (!bg->done)
		pthread_cond_wait(&bg->cv, &bg->mu);
	pthread_mutex_unlock(&bg->mu);
}

void ms_bg_list_free(struct ms_bg_list *l)
{
	struct ms_bg *bg = l->head;
	while (bg) {
		struct ms_bg *next = bg->next;
		ms_bg_cancel(bg, 0);
		wait_done(bg);
		ms_bg_unref(bg);
		bg = next;
	}
	l->head = NULL;
	pthread_mutex_destroy(&l->mu);
}

/* Ended runs past the newest MS_BG_KEEP leave the list (its lock held). */
static void trim(struct ms_bg_list *l)
{
	int ended = 0;
	for (struct ms_bg **p = &l->head; *p;) {
		struct ms_bg *bg = *p;
		pthread_mutex_lock(&bg->mu);
		bool done = bg->done;
		pthread_mutex_unlock(&bg->mu);
		if (done && ++ended > MS_BG_KEEP) {
			*p = bg->next;
			ms_bg_unref(bg);
			continue;
		}
		p = &bg->next;
	}
}

int ms_bg_start(struct ms_api *api, struct ms_job *jb, struct ms_bg **out, struct ms_err *err)
{
	*out = NULL;
	struct ms_bg *bg = calloc(1, sizeof(*bg));
	if (!bg) {
		ms_job_cancel(jb);
		ms_job_free(jb);
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	bg->api = api;
	bg->jb = jb;
	bg->queued = true;
	bg->refs = 3; /* the list, the thread, the caller */
	snprintf(bg->id, sizeof(bg->id), "%s", jb->id);
	pthread_mutex_init(&bg->mu, NULL);
	pthread_cond_init(&bg->cv, NULL);
	snapshot(bg, jb);
	pthread_attr_t at;
	pthread_t th;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int rc = bg->snapshot ? pthread_create(&th, &at, bg_main, bg) : ENOMEM;
	pthread_attr_destroy(&at);
	if (rc) {
		ms_job_cancel(jb);
		bg_free(bg);
		return ms_err_set(err, rc == ENOMEM ? -ENOMEM : -EAGAIN, "cannot start a background run");
	}
	pthread_mutex_lock(&api->bgs.mu);
	bg->next = api->bgs.head;
	api->bgs.head = bg;
	trim(&api->bgs);
	pthread_mutex_unlock(&api->bgs.mu);
	*out = bg;
	return 0;
}

struct ms_bg *ms_bg_find(struct ms_bg_list *l, const char *id)
{
	pthread_mutex_lock(&l->mu);
	struct ms_bg *bg = l->head;
	while (bg && strcmp(bg->id, id))
		bg = bg->next;
	if (bg) {
		pthread_mutex_lock(&bg->mu);
		bg->refs++;
		pthread_mutex_unlock(&bg->mu);
	}
	pthread_mutex_unlock(&l->mu);
	return bg;
}

/* ---- readers ---- */

cJSON *ms_bg_snapshot(struct ms_bg *bg)
{
	pthread_mutex_lock(&bg->mu);
	cJSON *s = cJSON_Duplicate(bg->snapshot, true);
	pthread_mutex_unlock(&bg->mu);
	return s;
}

cJSON *ms_bg_input_items(struct ms_bg *bg)
{
	return cJSON_Duplicate(bg->jb->rq->items, true); /* fixed once parsed */
}

/* Wait on the run's condition until deadline (CLOCK_REALTIME seconds). */
static void wait_until(struct ms_bg *bg, double wait_s)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	long ns = ts.tv_nsec + (long)((wait_s - (double)(long)wait_s) * 1e9);
	ts.tv_sec += (time_t)wait_s + ns / 1000000000L;
	ts.tv_nsec = ns % 1000000000L;
	pthread_cond_timedwait(&bg->cv, &bg->mu, &ts);
}

bool ms_bg_cancel(struct ms_bg *bg, double wait_s)
{
	pthread_mutex_lock(&bg->mu);
	bool running = !bg->done;
	bg->cancel = true;
	for (double end = ms_now_s() + wait_s; !bg->done && ms_now_s() < end;)
		wait_until(bg, end - ms_now_s());
	pthread_mutex_unlock(&bg->mu);
	return running;
}

long ms_bg_stream_start(struct ms_bg *bg, long after)
{
	pthread_mutex_lock(&bg->mu);
	long pos = after < 0 ? 0 : (size_t)after + 1 < bg->n_ev ? (long)bg->ev_off[after + 1]
		   : (size_t)after + 1 == bg->n_ev ? (long)bg->sse.len : -ERANGE;
	pthread_mutex_unlock(&bg->mu);
	return pos;
}

long ms_bg_read(struct ms_bg *bg, size_t *pos, char *buf, size_t max, double wait_s)
{
	pthread_mutex_lock(&bg->mu);
	if (*pos >= bg->sse.len && !bg->done)
		wait_until(bg, wait_s);
	long n = 0;
	if (*pos < bg->sse.len) {
		size_t m = bg->sse.len - *pos < max ? bg->sse.len - *pos : max;
		memcpy(buf, bg->sse.p + *pos, m);
		*pos += m;
		n = (long)m;
	} else if (bg->done) {
		n = -1;
	}
	pthread_mutex_unlock(&bg->mu);
	return n;
}
