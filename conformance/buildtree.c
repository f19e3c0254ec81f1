/* buildtree.c: finding the build tree a qspec runs from (buildtree.h). The tree's paths are
 * compiled in (QSPEC_BUILDDIR, QSPEC_SRCDIR); the executable's real folder, or the folder
 * above its .libs, must be that build folder. */
#define _XOPEN_SOURCE 700
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buildtree.h"

static char tree[PATH_MAX], cases[PATH_MAX + 32], plugins[PATH_MAX + 32];
static int tree_read;

const char *qsk_build_tree(void)
{
#if defined(QSPEC_BUILDDIR) && defined(QSPEC_SRCDIR)
    if (!tree_read) {
        tree_read = 1;
        char exe[PATH_MAX], built[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0 || !realpath(QSPEC_BUILDDIR, built))
            return NULL;
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (!slash || (strcmp(slash + 1, "qspec") != 0 && strcmp(slash + 1, "lt-qspec") != 0))
            return NULL;
        *slash = '\0';
        size_t len = strlen(exe);
        if (len > 6 && strcmp(exe + len - 6, "/.libs") == 0)
            exe[len - 6] = '\0';
        if (strcmp(exe, built) != 0)
            return NULL;
        snprintf(tree, sizeof tree, "%s", built);
        snprintf(cases, sizeof cases, "%s/conformance/cases", QSPEC_SRCDIR);
        snprintf(plugins, sizeof plugins, "%s/cuda", built);
    }
    return tree[0] ? tree : NULL;
#else
    return NULL;
#endif
}

const char *qsk_build_tree_cases(void)
{
    return qsk_build_tree() ? cases : "";
}

const char *qsk_build_tree_plugins(void)
{
    return qsk_build_tree() ? plugins : "";
}

/* Whether dir is one of the colon-separated folders of list. */
static int in_list(const char *list, const char *dir)
{
    size_t n = strlen(dir);
    for (const char *p = list; p && *p; p = strchr(p, ':') ? strchr(p, ':') + 1 : NULL)
        if (strncmp(p, dir, n) == 0 && (p[n] == ':' || p[n] == '\0'))
            return 1;
    return 0;
}

int qsk_build_tree_defaults(void)
{
    if (!qsk_build_tree())
        return 0;
    const char *path = getenv("QSPEC_BACKEND_PATH");
    if (!path || !*path) {
        setenv("QSPEC_BACKEND_PATH", plugins, 1);
    } else if (!in_list(path, plugins)) {
        size_t n = strlen(path) + strlen(plugins) + 2;
        char *joined = malloc(n);
        if (joined) {
            snprintf(joined, n, "%s:%s", path, plugins);
            setenv("QSPEC_BACKEND_PATH", joined, 1);
            free(joined);
        }
    }
    const char *c = getenv("QSPEC_CASES");
    if (c && *c)
        return 0;
    setenv("QSPEC_CASES", cases, 1);
    return 1;
}
