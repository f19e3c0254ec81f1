/* buildtree.h: a qspec run from its own build tree (spec/cases.md [CASE-BUILD-TREE]). When
 * the running executable is the qspec of the tree it was built in (libtool keeps it as
 * .libs/qspec or .libs/lt-qspec behind the ./qspec script), that tree's suite and the
 * plugins it built are the defaults, as `make conformance` uses them; an installed qspec
 * keeps the installed ones. */
#ifndef QSPEC_KIT_BUILDTREE_H
#define QSPEC_KIT_BUILDTREE_H

/* The build tree, when this process runs its qspec; NULL otherwise (read once). */
const char *qsk_build_tree(void);
/* In a build tree: makes its suite the default (QSPEC_CASES, unless set) and adds its
 * plugin folder to QSPEC_BACKEND_PATH, after the folders already there. Returns whether the
 * suite is the build tree's. */
int qsk_build_tree_defaults(void);
/* The build tree's suite folder and plugin folder (static buffers; "" outside one). */
const char *qsk_build_tree_cases(void);
const char *qsk_build_tree_plugins(void);

#endif
