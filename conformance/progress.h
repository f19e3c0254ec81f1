/* progress.h: the progress line of a long run on a terminal (spec/cases.md [CASE-PROGRESS]):
 * cases done of the total, the case running and the time since the run began, redrawn in
 * place on one line and erased before anything else is printed. Off when stdout is not a
 * terminal, so that piped output holds nothing extra. */
#ifndef QSPEC_KIT_PROGRESS_H
#define QSPEC_KIT_PROGRESS_H

#include <stddef.h>

typedef struct qsk_progress {
    int on;
    size_t done, total;
    const char *id; /* the case running */
    double t0;      /* when the run began */
} qsk_progress;

/* Starts the line for total cases; on only when want is set and stdout is a terminal. */
void qsk_progress_init(qsk_progress *p, size_t total, int want);
/* Shows that done cases are finished and case id runs. */
void qsk_progress_show(qsk_progress *p, size_t done, const char *id);
/* Redraws the line (the elapsed time moves on); arg is a qsk_progress. */
void qsk_progress_tick(void *arg);
/* Erases the line, so that a case's failure lines start at the left margin. */
void qsk_progress_clear(qsk_progress *p);

#endif
