/**
 * @file swy_common.h
 * @brief What libswitchyard and its plugins share: log levels, memory
 *        types, link classes, and the one rule for structs that cross the
 *        library boundary (struct_size).
 *
 * Every plugin ABI header (swy_*_v1.h) and the library's own code take
 * these definitions from here, so there is one list of each.
 *
 * The struct_size rule. Every struct that crosses the library boundary,
 * the public API's (swy_op_attr_t, swy_moe_config_t, ...) and every
 * plugin ABI table, carries struct_size, set by whoever wrote it to the
 * sizeof it was built with. New fields are only ever appended, and zero
 * in a new field means what the struct meant before that field existed.
 * Whoever reads a struct written by the other side takes the first
 * min(struct_size, sizeof) bytes and zero-fills the rest
 * (swy_struct_import()); whoever fills in a struct the other side
 * provided writes only the first min(struct_size, sizeof) bytes
 * (swy_struct_export()). So a caller or plugin built against an older,
 * smaller struct works with a newer library, and a newer, larger one
 * works with an older library (its extra fields are ignored). A
 * struct_size below the size of the struct's first release (0.1.0) is
 * refused: such a struct was not filled in. A field is appended only
 * past the previous release's sizeof (never into its tail padding, which
 * an older writer's struct_size covers but leaves unset).
 */
#ifndef SWY_COMMON_H
#define SWY_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Memory types (bit numbers for swy_transport_caps_v1_t.mem_types). */
typedef enum {
    SWY_MEM_HOST = 0,
    SWY_MEM_CUDA = 1,
    SWY_MEM_NTYPES
} swy_mem_type_t;

/** Link classes between two ranks, nearest first. */
typedef enum {
    SWY_LINK_SELF = 0,
    SWY_LINK_SAME_NUMA = 1,
    SWY_LINK_SAME_NODE = 2,
    SWY_LINK_CROSS_NODE = 3,
    SWY_LINK_NCLASSES
} swy_link_class_t;

/** Log levels (SWY_LOG_LEVEL, the hosts' log functions). */
typedef enum {
    SWY_LOG_ERROR = 1,
    SWY_LOG_WARN = 2,
    SWY_LOG_INFO = 3,
    SWY_LOG_DEBUG = 4,
    SWY_LOG_TRACE = 5
} swy_log_level_t;

/** Types of a configuration variable (swy_config_var_v1_t.type). */
typedef enum {
    SWY_CONFIG_UNTYPED = 0, /**< an entry that forgot its type (refused) */
    SWY_CONFIG_TEXT,        /**< names, lists, host:port: its reader checks */
    SWY_CONFIG_PATH,        /**< a file or directory name */
    SWY_CONFIG_BOOL,        /**< 1/0, yes/no, true/false, on/off */
    SWY_CONFIG_INT,         /**< a decimal integer within [min, max] */
    SWY_CONFIG_DOUBLE,      /**< a finite number within [min, max] */
    SWY_CONFIG_SIZE,        /**< bytes (K/M/G suffixes) within [min, max] */
    SWY_CONFIG_LIST,        /**< comma-separated items, each a TEXT value */
} swy_config_type_t;

/** One SWY_* configuration variable: an entry of the library's table, or
 *  of a plugin's (swy_transport_v1_t.config), which the host adds to its
 *  own when it loads the plugin. A plugin's names start with
 *  SWY_<PLUGIN>_ (its name in capitals). An array of these is read
 *  element by element under the struct_size rule, with the element size
 *  the plugin gives (swy_transport_v1_t.config_var_size). */
typedef struct {
    const char *name;          /**< "SWY_..." */
    const char *default_value; /**< NULL: unset by default */
    const char *help;          /**< one paragraph, for swy-info -c */
    swy_config_type_t type;
    double min, max; /**< INT, DOUBLE, SIZE: accepted range, both included */
    /** TEXT, LIST: the values accepted, comma-separated (any case), or
     *  NULL for free text that its reader checks. An item "<plugin>"
     *  admits any plugin name; a LIST may start with '^'. */
    const char *values;
} swy_config_var_v1_t;

/** Bytes of type up to and including field: the struct_size that covers
 *  field (e.g. the size of a struct's first release, when field was its
 *  last one then). */
#define SWY_STRUCT_END(type, field)                                           \
    (offsetof(type, field) + sizeof(((type *)0)->field))

/** Does a struct whose struct_size is size hold field of type? A plugin
 *  checks a host table's newer field this way before it uses it. */
#define SWY_STRUCT_HAS(type, size, field)                                     \
    ((size_t)(size) >= SWY_STRUCT_END(type, field))

/**
 * @brief Read a struct the other side wrote: copy the first
 *        min(src_size, dst_size) bytes of src into dst and zero the rest
 *        of dst. dst_size is sizeof the reader's struct, src_size the
 *        writer's struct_size.
 * @return 0; -1 (dst zeroed) when src_size is below min_size, the size
 *         of the struct's first release.
 */
static inline int swy_struct_import(void *dst, size_t dst_size,
                                    const void *src, size_t src_size,
                                    size_t min_size)
{
    if (src_size < min_size) {
        memset(dst, 0, dst_size);
        return -1;
    }
    size_t n = src_size < dst_size ? src_size : dst_size;
    memcpy(dst, src, n);
    memset((char *)dst + n, 0, dst_size - n);
    return 0;
}

/**
 * @brief Fill in a struct the other side provided: copy the first
 *        min(dst_size, src_size) bytes of src (the writer's struct,
 *        src_size = its sizeof) into dst, whose struct_size is dst_size.
 *        The bytes of dst beyond its struct_size are never touched. Set
 *        src's struct_size to dst's first: it is copied too.
 * @return 0; -1 (nothing written) when dst_size is below min_size.
 */
static inline int swy_struct_export(void *dst, size_t dst_size,
                                    const void *src, size_t src_size,
                                    size_t min_size)
{
    if (dst_size < min_size)
        return -1;
    memcpy(dst, src, dst_size < src_size ? dst_size : src_size);
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif /* SWY_COMMON_H */
