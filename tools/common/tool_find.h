/* Finding the programs a tool runs (swy-tune runs swy-bench, swy-bench
 * coll runs swy-bench-mpi, mpirun and ucx_perftest). */
#ifndef SWY_TOOLS_TOOL_FIND_H
#define SWY_TOOLS_TOOL_FIND_H

#include <stddef.h>

/**
 * The absolute path of program @p name, looked for in this order: the
 * build tree (tools/@p build_dir/@p name beside this program's own
 * folder; skipped when @p build_dir is NULL), beside this program (both
 * installed in one bindir), then each folder of PATH. Absolute, because
 * a launcher may start it elsewhere (another working directory, another
 * network namespace).
 * @return 1 with the path in @p buf; 0 when none is an executable that
 *         fits in @p len (then @p buf holds nothing useful).
 */
int swy_tool_find(const char *name, const char *build_dir, char *buf,
                  size_t len);

#endif /* SWY_TOOLS_TOOL_FIND_H */
