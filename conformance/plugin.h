/* plugin.h: finding and loading backend plugins (include/qspec/backend.h).
 * A backend is named "ref" (built in), by a path containing '/', or by a short name NAME
 * looked up as libqspec-NAME.so in each directory of QSPEC_BACKEND_PATH (colon-separated),
 * then in the installed plugin directory. */
#ifndef QSPEC_KIT_PLUGIN_H
#define QSPEC_KIT_PLUGIN_H

#include <pthread.h>

#include "qspec/backend.h"

typedef struct qsk_plugin {
    char *path;              /* the file loaded; NULL for the built-in reference */
    void *handle;            /* dlopen handle */
    const qs_backend *table; /* the plugin's table, copied: a slot the plugin's struct_size
                                does not cover is NULL (QS_BACKEND_HAS_SLOT) */
    void *table_mem;         /* the allocation holding that copy */
    void *state;             /* from table->open, NULL if not open */
    int usable;              /* opened successfully */
    char why[256];           /* when not usable: the reason */
} qsk_plugin;

/* The kernel slots a wrapper of a plugin passes through, as X(slot, argument type): the
 * slots the engine and the ops call for a case. */
#define QSK_KERNEL_SLOTS(X)                                                                        \
    X(cast, const qs_cast_args *)                                                                  \
    X(cast16, const qs_cast16_args *)                                                              \
    X(quantize, const qs_quantize_args *)                                                          \
    X(dequantize, const qs_dequantize_args *)                                                      \
    X(gemm, qs_gemm_args *)                                                                        \
    X(sdpa_fwd, qs_sdpa_args *)                                                                    \
    X(sdpa_bwd, qs_sdpa_args *)                                                                    \
    X(gdn_fwd, qs_gdn_args *)                                                                      \
    X(gdn_bwd, qs_gdn_args *)

enum {
#define QSK_SLOT_ENUM(slot, type) QSK_SLOT_##slot,
    QSK_KERNEL_SLOTS(QSK_SLOT_ENUM)
#undef QSK_SLOT_ENUM
        QSK_NSLOTS
};
/* The slots' names, in that order ("cast", ..., "gdn_bwd"). */
extern const char *const qsk_slot_names[QSK_NSLOTS];

/* A loaded plugin as the threads of simulated ranks share it [CASE-PROG-RANKS]: the same
 * table, with each kernel slot run under one mutex, so a plugin need not be thread-safe.
 * Its other slots are NULL. plugin is the serialized plugin to hand to the engine; it
 * borrows from s. */
typedef struct qsk_plugin_serial {
    qs_backend table;
    const qsk_plugin *of;
    qsk_plugin plugin;
    pthread_mutex_t mutex;
    int locked; /* the mutex was made */
} qsk_plugin_serial;

/* Fills s from pl; QS_ERR_NOMEM when the mutex cannot be made. */
qs_status qsk_plugin_serial_init(qsk_plugin_serial *s, const qsk_plugin *pl);
void qsk_plugin_serial_free(qsk_plugin_serial *s);

/* The calls of one kernel slot and the wall time spent in them [CASE-TIMING]. */
typedef struct qsk_slot_time {
    uint32_t calls;
    double seconds;
} qsk_slot_time;

/* A loaded plugin with its kernel slots metered [CASE-TIMING]: each call is counted and
 * timed (wall time, from the call to its return: for a GPU backend whose slots return
 * their results, the device's work and the copies). plugin is the metered plugin to hand
 * to the ops and the engine; it borrows from m. Not thread-safe: simulated ranks reach it
 * through a qsk_plugin_serial, whose mutex covers it. */
typedef struct qsk_plugin_meter {
    qs_backend table;
    const qsk_plugin *of;
    qsk_plugin plugin;
    qsk_slot_time t[QSK_NSLOTS];
} qsk_plugin_meter;

void qsk_plugin_meter_init(qsk_plugin_meter *m, const qsk_plugin *pl);
/* Sets every count and time to zero. */
void qsk_plugin_meter_reset(qsk_plugin_meter *m);

/* Resolves a backend name to the path of its shared object (malloc'd); QS_ERR_IO if no
 * file is found, with the places searched in the message. */
qs_status qsk_plugin_resolve(qs_ctx *ctx, const char *name, char **path);
/* Loads the plugin at path, checks its entry point, ABI version and table size (at least
 * QS_BACKEND_V1_MIN_SIZE: a table built before a slot was appended still loads, without
 * that slot), then opens it. A
 * plugin that loads but cannot open (no GPU) returns QS_OK with usable = 0 and why set;
 * a missing file, a missing entry point or a wrong ABI returns QS_ERR_IO / QS_ERR_ABI. */
qs_status qsk_plugin_load(qs_ctx *ctx, const char *path, qsk_plugin *p);
/* Closes and unloads. */
void qsk_plugin_unload(qsk_plugin *p);
/* Lists the plugin files found on the search path (malloc'd array of malloc'd paths). */
qs_status qsk_plugin_discover(qs_ctx *ctx, char ***paths, size_t *count);
/* The search directories, in order, as one colon-separated string (static buffer). */
const char *qsk_plugin_search_path(void);

#endif
