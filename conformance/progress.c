/* progress.c: the progress line of a run on a terminal (progress.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <unistd.h>

#include "progress.h"
#include "run.h"

void qsk_progress_init(qsk_progress *p, size_t total, int want)
{
    p->on = want && isatty(STDOUT_FILENO);
    p->done = 0;
    p->total = total;
    p->id = "";
    p->t0 = qsk_now_seconds();
}

static void draw(const qsk_progress *p)
{
    long s = (long)(qsk_now_seconds() - p->t0);
    /* the id is cut so that the line stays within 80 columns */
    printf("\r\033[K[%zu/%zu] %.52s  %ld:%02ld:%02ld", p->done, p->total, p->id, s / 3600,
           s / 60 % 60, s % 60);
    fflush(stdout);
}

void qsk_progress_show(qsk_progress *p, size_t done, const char *id)
{
    p->done = done;
    p->id = id;
    if (p->on)
        draw(p);
}

void qsk_progress_tick(void *arg)
{
    const qsk_progress *p = arg;
    if (p->on)
        draw(p);
}

void qsk_progress_clear(qsk_progress *p)
{
    if (!p->on)
        return;
    fputs("\r\033[K", stdout);
    fflush(stdout);
}
