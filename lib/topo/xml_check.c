/* lib/topo/xml_check.c: a bounded check of a topology XML (SWY_TOPO_XML)
 * before hwloc imports it.
 *
 * hwloc 2.9's XML import trusts its input in ways that crash the process
 * on a damaged file (SIGSEGV in hwloc_bitmap_* inside
 * hwloc_topology_load, found by tests/fuzz/fuzz_topo_xml; the causes were
 * read in hwloc's topology-xml.c, bitmap.c and memattrs.c):
 *   - an object without a complete_cpuset or complete_nodeset: inserting
 *     a PU or NUMA node below the root sets a bit in the root's complete
 *     sets, and the core ORs children's sets into their parents', both
 *     through the NULL bitmap (hwloc only checks the pairs for 1.x files);
 *   - an object without a type attribute keeps the allocation sentinel
 *     HWLOC_OBJ_TYPE_MAX instead of "none", passes the "type first" check
 *     and is inserted as a type hwloc has no tables for;
 *   - a distance matrix of nbobjs objects (nbobjs^2 values) is
 *     allocated before any value is read;
 *   - an info, page_type, userdata (content not of its length) or unknown
 *     child element that fails its import, or text where hwloc's own
 *     parser expects a tag or a '>' in an attribute value (it ends the
 *     tag there), leaks the object being imported;
 *   - bitmap strings are parsed by counting commas (a leading comma
 *     fails an assertion: abort), and a PU's or NUMA node's os_index is a
 *     bit index in the root's sets (os_index 4e9: a 512 MiB bitmap);
 *   - a value for the memory attribute "Capacity" or "Locality", which
 *     hwloc computes and never exports, fails an assertion (abort);
 *   - a DOCTYPE without a system id: the libxml2 import strcmp()s NULL;
 *   - a file without a NUMANode object whose root cpuset is not inside
 *     its allowed or complete cpuset (SIGSEGV in hwloc_topology_load
 *     with either parser, lstopo -i too; not traced inside hwloc; with a
 *     NUMA node the same sets end in hwloc's own error).
 * This file accepts the XML that hwloc exports (lstopo --of xml) and
 * refuses what would reach those paths, with the file, the line and the
 * reason: well-formed nesting, one root object of type Machine, a PU and
 * a NUMA node, every normal or memory object with all four sets, bitmaps,
 * indices and matrix sizes checked for syntax and range, and limits on
 * depth and element count. Only hwloc 2 files (<topology version="2.0">)
 * are accepted. It is stricter than hwloc's parsers (no CDATA, no processing
 * instructions past the declaration, no DTD internal subset, double-quoted
 * attributes only), which hwloc's exports never use. */
#include "topo/topo.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/alloc.h"
#include "util/status.h"

#define SWY_TOPO_SUBSYS "topo"
/* Real topologies nest about 15 deep (caches, groups, PCI bridges). */
#define XML_MAX_DEPTH 64
/* A 64 MiB export of a very large host holds a few 100,000 elements. */
#define XML_MAX_ELEMENTS (1u << 20)
#define XML_MAX_ATTRS 64
/* PU and NUMA os_index are bit indices in the root's sets (Linux allows
 * at most 8192 CPUs); hwloc bitmaps are strings of 32-bit chunks. */
#define XML_MAX_SET_INDEX (1u << 20)
#define XML_MAX_SET_CHUNKS (XML_MAX_SET_INDEX / 32)

typedef enum {
    XML_OBJ_NORMAL, /* has cpusets and nodesets */
    XML_OBJ_MEMORY, /* NUMA node, memory-side cache: the same */
    XML_OBJ_SPECIAL /* I/O and Misc: no sets */
} xml_obj_class_t;

typedef struct {
    const char *name;
    size_t name_len;
    const char *value; /* raw, escapes not expanded */
    size_t value_len;
} xml_attr_t;

typedef struct {
    const char *name;
    size_t name_len;
    const char *type; /* an object's type attribute, else NULL */
    size_t type_len;
} xml_open_t;

/* The elements hwloc's import knows, where, and for the leaves the only
 * attributes it accepts: anything else fails hwloc's import after it
 * allocated an object it then leaks (hwloc 2.9). */
static const struct {
    const char *name;
    const char *parent;
    const char *attrs; /* "|a|b|", NULL: not checked here */
} xml_elements[] = {
    {"object", "object", NULL},
    {"object", "topology", NULL},
    {"info", "object", "|name|value|"},
    {"info", "cpukind", "|name|value|"},
    {"page_type", "object", "|size|count|"},
    {"userdata", "object", "|length|encoding|name|"},
    {"distances", "object", "|nbobjs|relative_depth|latency_base|"},
    {"latency", "distances", "|value|"},
    {"distances2", "topology", NULL},
    {"distances2hetero", "topology", NULL},
    {"indexes", "distances2", "|length|"},
    {"indexes", "distances2hetero", "|length|"},
    {"u64values", "distances2", "|length|"},
    {"u64values", "distances2hetero", "|length|"},
    {"support", "topology", NULL},
    {"memattr", "topology", NULL},
    {"memattr_value", "memattr", NULL},
    {"cpukind", "topology", NULL},
};

typedef struct {
    const char *path;
    const char *text;
    size_t len;
    const char *p; /* the cursor */
    int depth;
    xml_open_t open[XML_MAX_DEPTH];
    unsigned elements;
    int root_objects; /* object elements directly under <topology> */
    unsigned pus, numa_nodes;
} xml_scan_t;

static const struct {
    const char *name;
    xml_obj_class_t obj_class;
} xml_types[] = {
    {"Machine", XML_OBJ_NORMAL},   {"System", XML_OBJ_NORMAL},
    {"Package", XML_OBJ_NORMAL},   {"Socket", XML_OBJ_NORMAL},
    {"Die", XML_OBJ_NORMAL},       {"Core", XML_OBJ_NORMAL},
    {"PU", XML_OBJ_NORMAL},        {"Group", XML_OBJ_NORMAL},
    {"Tile", XML_OBJ_NORMAL},      {"Module", XML_OBJ_NORMAL},
    {"Cache", XML_OBJ_NORMAL},     {"L1Cache", XML_OBJ_NORMAL},
    {"L2Cache", XML_OBJ_NORMAL},   {"L3Cache", XML_OBJ_NORMAL},
    {"L4Cache", XML_OBJ_NORMAL},   {"L5Cache", XML_OBJ_NORMAL},
    {"L1iCache", XML_OBJ_NORMAL},  {"L2iCache", XML_OBJ_NORMAL},
    {"L3iCache", XML_OBJ_NORMAL},  {"NUMANode", XML_OBJ_MEMORY},
    {"MemCache", XML_OBJ_MEMORY},  {"Bridge", XML_OBJ_SPECIAL},
    {"PCIDev", XML_OBJ_SPECIAL},   {"OSDev", XML_OBJ_SPECIAL},
    {"Misc", XML_OBJ_SPECIAL},
};

static const char *const xml_set_names[] = {
    "cpuset", "complete_cpuset", "nodeset", "complete_nodeset",
};

/* Error at pos: the message names the file and the line. */
static swy_status_t xml_fail(const xml_scan_t *scan, const char *pos,
                             const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static swy_status_t xml_fail(const xml_scan_t *scan, const char *pos,
                             const char *fmt, ...)
{
    char reason[256];
    unsigned line = 1;
    va_list ap;

    for (const char *c = scan->text; c < pos && *c != '\0'; c++)
        line += *c == '\n';
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                       "topology XML '%s' line %u: %s", scan->path, line,
                       reason);
}

/* Not '\r': hwloc's own parser skips only these, and fails (leaking the
 * object) on a carriage return where libxml2 skips it. */
static int xml_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n';
}

static int xml_is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

static int xml_is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

static int xml_eq(const char *s, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

static int xml_ends_with(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);

    return len >= n && memcmp(s + len - n, lit, n) == 0;
}

static void xml_skip_space(xml_scan_t *scan)
{
    while (xml_is_space(*scan->p))
        scan->p++;
}

/* The escapes both of hwloc's parsers (libxml2 and its own) expand. */
static size_t xml_escape_len(const char *s)
{
    static const char *const escapes[] = {
        "&amp;", "&lt;", "&gt;", "&quot;", "&#10;", "&#13;", "&#9;",
    };

    for (size_t i = 0; i < SWY_ARRAY_SIZE(escapes); i++) {
        if (strncmp(s, escapes[i], strlen(escapes[i])) == 0)
            return strlen(escapes[i]);
    }
    return 0;
}

/* Skip a comment, the XML declaration or a DOCTYPE (only before the root
 * element); 1 if one was skipped, 0 if none is here, -1 on error. */
static int xml_skip_misc(xml_scan_t *scan, int in_prolog,
                         swy_status_t *status)
{
    const char *start = scan->p;
    const char *end;

    if (strncmp(scan->p, "<!--", 4) == 0) {
        end = strstr(scan->p + 4, "-->");
        if (end == NULL) {
            *status = xml_fail(scan, start, "comment without an end");
            return -1;
        }
        scan->p = end + 3;
        return 1;
    }
    if (in_prolog && strncmp(scan->p, "<?xml", 5) == 0 &&
        xml_is_space(scan->p[5])) {
        const char *encoding;
        end = strstr(scan->p, "?>");
        if (end == NULL) {
            *status = xml_fail(scan, start, "XML declaration without '?>'");
            return -1;
        }
        /* libxml2 would decode another encoding; this check reads bytes. */
        encoding = strstr(scan->p, "encoding=");
        if (encoding != NULL && encoding < end &&
            strncasecmp(encoding, "encoding=\"UTF-8\"", 16) != 0) {
            *status = xml_fail(scan, encoding, "an encoding other than "
                                               "UTF-8");
            return -1;
        }
        scan->p = end + 2;
        return 1;
    }
    if (in_prolog && strncmp(scan->p, "<!DOCTYPE", 9) == 0) {
        /* hwloc writes <!DOCTYPE topology SYSTEM "hwloc2.dtd">; its
         * libxml2 import compares the system id without checking that
         * there is one (SIGSEGV in strcmp). */
        static const char prefix[] = "<!DOCTYPE topology SYSTEM \"";
        size_t n = strcspn(scan->p, "[>");
        const char *quote;
        if (scan->p[n] != '>') {
            *status = xml_fail(scan, start,
                               scan->p[n] == '['
                                   ? "DOCTYPE with an internal subset "
                                     "(entity declarations are not "
                                     "accepted)"
                                   : "DOCTYPE without '>'");
            return -1;
        }
        quote = scan->p + sizeof(prefix) - 1;
        if (n < sizeof(prefix) + 1 ||
            strncmp(scan->p, prefix, sizeof(prefix) - 1) != 0 ||
            *quote == '"' || scan->p[n - 1] != '"' ||
            memchr(quote, '"', (size_t)(scan->p + n - 1 - quote)) != NULL) {
            *status = xml_fail(scan, start,
                               "DOCTYPE is not <!DOCTYPE topology SYSTEM "
                               "\"FILE\">");
            return -1;
        }
        scan->p += n + 1;
        return 1;
    }
    return 0;
}

static swy_status_t xml_skip_all_misc(xml_scan_t *scan, int in_prolog)
{
    swy_status_t status = SWY_OK;
    int ret;

    do {
        xml_skip_space(scan);
        ret = xml_skip_misc(scan, in_prolog, &status);
    } while (ret == 1);
    return ret < 0 ? status : SWY_OK;
}

/* Character data up to the next '<' (userdata, indexes, u64values). */
static swy_status_t xml_scan_text(xml_scan_t *scan)
{
    const xml_open_t *open = &scan->open[scan->depth - 1];
    /* Elsewhere hwloc's own parser expects the next tag after spaces and
     * fails (leaking the object) where libxml2 skips the text. */
    int has_content = xml_eq(open->name, open->name_len, "userdata") ||
                      xml_eq(open->name, open->name_len, "indexes") ||
                      xml_eq(open->name, open->name_len, "u64values");

    while (*scan->p != '<') {
        if (*scan->p == '\0')
            return xml_fail(scan, scan->p, "end of file inside <%.*s>",
                            (int)open->name_len, open->name);
        if (!has_content && !xml_is_space(*scan->p))
            return xml_fail(scan, scan->p, "%s inside <%.*s>",
                            *scan->p == '\r' ? "a carriage return" : "text",
                            (int)open->name_len, open->name);
        if (*scan->p == '&') {
            size_t n = xml_escape_len(scan->p);
            if (n == 0)
                return xml_fail(scan, scan->p, "unknown entity reference");
            scan->p += n;
        } else {
            scan->p++;
        }
    }
    return SWY_OK;
}

/* An unsigned decimal of at most max; -1 if not one. */
static int xml_parse_decimal(const char *s, size_t len, uint64_t max,
                             uint64_t *value_p)
{
    uint64_t value = 0;

    if (len == 0 || len > 20)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned digit = (unsigned)(s[i] - '0');
        if (digit > 9 || value > (UINT64_MAX - digit) / 10)
            return -1;
        value = value * 10 + digit;
    }
    if (value > max)
        return -1;
    *value_p = value;
    return 0;
}

/* hwloc's bitmap syntax: "0xf...f" (full), or 32-bit chunks "0x1234abcd"
 * separated by commas, optionally after "0xf...f," (infinite above). hwloc
 * writes a zero chunk between two others as nothing ("0xff,,0x1"); the
 * string must not start with a comma (hwloc_bitmap_sscanf miscounts and
 * fails an assertion) nor end with one. */
static int xml_check_bitmap(const char *s, size_t len)
{
    size_t i = 0;
    size_t chunks = 0;

    if (xml_eq(s, len, "0xf...f"))
        return 0;
    if (len > 8 && memcmp(s, "0xf...f,", 8) == 0)
        i = 8;
    for (;;) {
        size_t digits = 0;
        if (++chunks > XML_MAX_SET_CHUNKS)
            return -1;
        if (i > 0 && i < len && s[i] == ',') {
            i++; /* an empty (zero) chunk */
            continue;
        }
        if (i + 2 > len || s[i] != '0' || (s[i + 1] != 'x'))
            return -1;
        i += 2;
        while (i < len && xml_is_hex(s[i])) {
            i++;
            digits++;
        }
        if (digits < 1 || digits > 8)
            return -1;
        if (i == len)
            return 0;
        if (s[i] != ',')
            return -1;
        i++;
    }
}

static const xml_attr_t *xml_find_attr(const xml_attr_t *attrs, int nattrs,
                                       const char *name)
{
    for (int i = 0; i < nattrs; i++) {
        if (xml_eq(attrs[i].name, attrs[i].name_len, name))
            return &attrs[i];
    }
    return NULL;
}

/* What hwloc's import would trust in this element's attributes. */
static swy_status_t xml_check_element(xml_scan_t *scan, const char *tag,
                                      const char *name, size_t name_len,
                                      const xml_attr_t *attrs, int nattrs,
                                      int empty)
{
    const xml_open_t *parent = &scan->open[scan->depth - 1];
    uint64_t value;
    int known = 0;

    for (size_t i = 0; i < SWY_ARRAY_SIZE(xml_elements) && !known; i++) {
        const char *allowed = xml_elements[i].attrs;
        if (!xml_eq(name, name_len, xml_elements[i].name) ||
            !xml_eq(parent->name, parent->name_len, xml_elements[i].parent))
            continue;
        known = 1;
        for (int j = 0; allowed != NULL && j < nattrs; j++) {
            const char *at = strstr(allowed, "|");
            int found = 0;
            while (at != NULL && at[1] != '\0') {
                size_t n = strcspn(at + 1, "|");
                found |= n == attrs[j].name_len &&
                         memcmp(at + 1, attrs[j].name, n) == 0;
                at = strchr(at + 1, '|');
            }
            if (!found)
                return xml_fail(scan, attrs[j].name,
                                "unknown attribute %.*s of <%.*s>",
                                (int)attrs[j].name_len, attrs[j].name,
                                (int)name_len, name);
        }
    }
    if (!known)
        return xml_fail(scan, tag, "unknown element <%.*s> inside <%.*s>",
                        (int)SWY_MIN(name_len, 64), name,
                        (int)parent->name_len, parent->name);
    /* hwloc keeps page types of NUMA nodes and of the root only. */
    if (xml_eq(name, name_len, "page_type") && scan->depth >= 2 &&
        !xml_eq(parent->type, parent->type_len, "NUMANode") &&
        !xml_eq(scan->open[scan->depth - 2].name,
                scan->open[scan->depth - 2].name_len, "topology"))
        return xml_fail(scan, tag, "<page_type> inside a %.*s object",
                        (int)parent->type_len, parent->type);

    for (int i = 0; i < nattrs; i++) {
        const xml_attr_t *a = &attrs[i];
        if ((xml_ends_with(a->name, a->name_len, "cpuset") ||
             xml_ends_with(a->name, a->name_len, "nodeset")) &&
            xml_check_bitmap(a->value, a->value_len) != 0) {
            return xml_fail(scan, a->value,
                            "%.*s=\"%.*s\" is not an hwloc bitmap "
                            "(\"0x\" and 1-8 hex digits, comma-separated, "
                            "at most %u bits)",
                            (int)a->name_len, a->name,
                            (int)SWY_MIN(a->value_len, 64), a->value,
                            XML_MAX_SET_INDEX);
        }
    }

    if (xml_eq(name, name_len, "object")) {
        const xml_attr_t *type = nattrs > 0 ? &attrs[0] : NULL;
        const xml_attr_t *a;
        xml_obj_class_t obj_class = XML_OBJ_SPECIAL;
        int known_type = 0;
        int is_root = xml_eq(parent->name, parent->name_len, "topology");

        if (type == NULL || !xml_eq(type->name, type->name_len, "type"))
            return xml_fail(scan, tag, "<object> without a type as its "
                                       "first attribute");
        for (size_t i = 0; i < SWY_ARRAY_SIZE(xml_types); i++) {
            if (xml_eq(type->value, type->value_len, xml_types[i].name)) {
                obj_class = xml_types[i].obj_class;
                known_type = 1;
            }
        }
        if (!known_type)
            return xml_fail(scan, type->value, "unknown object type \"%.*s\"",
                            (int)SWY_MIN(type->value_len, 64), type->value);
        scan->pus += xml_eq(type->value, type->value_len, "PU");
        scan->numa_nodes += xml_eq(type->value, type->value_len, "NUMANode");
        if (is_root) {
            if (++scan->root_objects > 1)
                return xml_fail(scan, tag, "more than one root object");
            if (!xml_eq(type->value, type->value_len, "Machine") &&
                !xml_eq(type->value, type->value_len, "System"))
                return xml_fail(scan, tag,
                                "the root object is a %.*s, not a Machine",
                                (int)type->value_len, type->value);
        }
        if (obj_class != XML_OBJ_SPECIAL) {
            for (size_t i = 0; i < SWY_ARRAY_SIZE(xml_set_names); i++) {
                if (xml_find_attr(attrs, nattrs, xml_set_names[i]) == NULL)
                    return xml_fail(scan, tag, "%.*s object without %s",
                                    (int)type->value_len, type->value,
                                    xml_set_names[i]);
            }
        }
        a = xml_find_attr(attrs, nattrs, "os_index");
        if (a != NULL) {
            int is_bit = xml_eq(type->value, type->value_len, "PU") ||
                         xml_eq(type->value, type->value_len, "NUMANode");
            uint64_t max = is_bit ? XML_MAX_SET_INDEX - 1 : UINT32_MAX;
            if (xml_parse_decimal(a->value, a->value_len, max, &value) != 0)
                return xml_fail(scan, a->value,
                                "os_index=\"%.*s\" is not a decimal of at "
                                "most %llu",
                                (int)SWY_MIN(a->value_len, 64), a->value,
                                (unsigned long long)max);
        }
        a = xml_find_attr(attrs, nattrs, "gp_index");
        if (a != NULL &&
            xml_parse_decimal(a->value, a->value_len, UINT64_MAX, &value) != 0)
            return xml_fail(scan, a->value,
                            "gp_index=\"%.*s\" is not a decimal",
                            (int)SWY_MIN(a->value_len, 64), a->value);
    } else if (xml_eq(name, name_len, "userdata")) {
        /* hwloc wants exactly `length` bytes of content (base64: their
         * encoded length); the cursor is past the start tag. */
        const xml_attr_t *a = xml_find_attr(attrs, nattrs, "length");
        const xml_attr_t *enc = xml_find_attr(attrs, nattrs, "encoding");
        size_t content = empty ? 0 : strcspn(scan->p, "<&");
        if (a == NULL ||
            xml_parse_decimal(a->value, a->value_len, scan->len, &value) != 0)
            return xml_fail(scan, tag, "<userdata> without a decimal length");
        if (enc != NULL && xml_eq(enc->value, enc->value_len, "base64"))
            value = (value + 2) / 3 * 4;
        if ((!empty && scan->p[content] != '<') || content != value)
            return xml_fail(scan, tag,
                            "<userdata> content is not %llu plain bytes",
                            (unsigned long long)value);
    } else if (xml_eq(name, name_len, "memattr")) {
        const xml_attr_t *a = xml_find_attr(attrs, nattrs, "name");
        if (a != NULL && (xml_eq(a->value, a->value_len, "Capacity") ||
                          xml_eq(a->value, a->value_len, "Locality")))
            return xml_fail(scan, a->value,
                            "memory attribute %.*s is computed by hwloc, "
                            "not read from XML",
                            (int)a->value_len, a->value);
    } else if (xml_eq(name, name_len, "distances2") ||
               xml_eq(name, name_len, "distances2hetero") ||
               xml_eq(name, name_len, "distances")) {
        /* hwloc allocates nbobjs^2 values first (in wrapping arithmetic
         * for distances2); each takes at least 2 bytes of the file. */
        const xml_attr_t *a = xml_find_attr(attrs, nattrs, "nbobjs");
        if (a != NULL &&
            (xml_parse_decimal(a->value, a->value_len, UINT32_MAX, &value) !=
                 0 ||
             value * value > scan->len / 2))
            return xml_fail(scan, a->value,
                            "nbobjs=\"%.*s\" is not a decimal whose "
                            "matrix fits in the file",
                            (int)SWY_MIN(a->value_len, 64), a->value);
    }
    return SWY_OK;
}

/* One start tag, cursor on its '<'; pushes it unless it is empty. */
static swy_status_t xml_scan_start_tag(xml_scan_t *scan)
{
    const char *tag = scan->p;
    const char *name = ++scan->p;
    size_t name_len;
    xml_attr_t attrs[XML_MAX_ATTRS];
    int nattrs = 0;
    int empty;

    while (xml_is_name_char(*scan->p))
        scan->p++;
    name_len = (size_t)(scan->p - name);
    if (name_len == 0)
        return xml_fail(scan, tag, "'<' not followed by an element name");
    if (++scan->elements > XML_MAX_ELEMENTS)
        return xml_fail(scan, tag, "more than %u elements", XML_MAX_ELEMENTS);

    for (;;) {
        const char *before = scan->p;
        xml_skip_space(scan);
        if (*scan->p == '>' || strncmp(scan->p, "/>", 2) == 0)
            break;
        if (scan->p == before || !xml_is_name_char(*scan->p))
            return xml_fail(scan, scan->p, "malformed <%.*s> tag",
                            (int)name_len, name);
        if (nattrs == XML_MAX_ATTRS)
            return xml_fail(scan, scan->p, "<%.*s> with more than %d "
                                           "attributes",
                            (int)name_len, name, XML_MAX_ATTRS);
        xml_attr_t *a = &attrs[nattrs];
        a->name = scan->p;
        while (xml_is_name_char(*scan->p))
            scan->p++;
        a->name_len = (size_t)(scan->p - a->name);
        if (scan->p[0] != '=' || scan->p[1] != '"')
            return xml_fail(scan, scan->p, "attribute %.*s without =\"value\"",
                            (int)a->name_len, a->name);
        scan->p += 2;
        a->value = scan->p;
        while (*scan->p != '"') {
            if (*scan->p == '\0' || *scan->p == '<')
                return xml_fail(scan, a->value,
                                "value of attribute %.*s without its "
                                "closing quote",
                                (int)a->name_len, a->name);
            /* hwloc's own parser ends the tag at the first '>' (and
             * leaks the object); hwloc writes it as &gt;. */
            if (*scan->p == '>')
                return xml_fail(scan, scan->p,
                                "'>' in the value of attribute %.*s "
                                "(write &gt;)",
                                (int)a->name_len, a->name);
            if (*scan->p == '&') {
                size_t n = xml_escape_len(scan->p);
                if (n == 0)
                    return xml_fail(scan, scan->p,
                                    "unknown entity reference in "
                                    "attribute %.*s",
                                    (int)a->name_len, a->name);
                scan->p += n;
            } else {
                scan->p++;
            }
        }
        a->value_len = (size_t)(scan->p - a->value);
        scan->p++;
        for (int i = 0; i < nattrs; i++) {
            if (attrs[i].name_len == a->name_len &&
                memcmp(attrs[i].name, a->name, a->name_len) == 0)
                return xml_fail(scan, a->name, "attribute %.*s given twice",
                                (int)a->name_len, a->name);
        }
        nattrs++;
    }
    empty = *scan->p == '/';
    scan->p += empty ? 2 : 1;

    if (scan->depth == 0) {
        const xml_attr_t *version = xml_find_attr(attrs, nattrs, "version");
        if (!xml_eq(name, name_len, "topology"))
            return xml_fail(scan, tag, "the root element is <%.*s>, not "
                                       "<topology>",
                            (int)name_len, name);
        /* hwloc 1.x wrote no version; 2.x writes "2.0". hwloc 2.9 imports
         * 1.x files through other paths (NUMA nodes as parents, a root
         * NUMA node, v1 distances); hwloc 3 dropped them: so do we. */
        if (version == NULL || !xml_eq(version->value, version->value_len,
                                       "2.0"))
            return xml_fail(scan, tag,
                            "not a hwloc 2 topology (<topology "
                            "version=\"2.0\">); export it again with "
                            "hwloc 2: lstopo -i FILE --of xml NEWFILE");
    } else {
        SWY_CHECK(xml_check_element(scan, tag, name, name_len, attrs,
                                    nattrs, empty));
    }
    if (!empty) {
        if (scan->depth == XML_MAX_DEPTH)
            return xml_fail(scan, tag, "elements nested more than %d deep",
                            XML_MAX_DEPTH);
        scan->open[scan->depth].name = name;
        scan->open[scan->depth].name_len = name_len;
        scan->open[scan->depth].type = NULL;
        scan->open[scan->depth].type_len = 0;
        if (xml_eq(name, name_len, "object") && nattrs > 0) {
            /* checked above: the first attribute is the type */
            scan->open[scan->depth].type = attrs[0].value;
            scan->open[scan->depth].type_len = attrs[0].value_len;
        }
        scan->depth++;
    }
    return SWY_OK;
}

/* One end tag, cursor on its "</". */
static swy_status_t xml_scan_end_tag(xml_scan_t *scan)
{
    const char *tag = scan->p;
    const xml_open_t *open = &scan->open[scan->depth - 1];
    const char *name = scan->p + 2;
    size_t name_len = 0;

    while (xml_is_name_char(name[name_len]))
        name_len++;
    if (name_len != open->name_len ||
        memcmp(name, open->name, name_len) != 0)
        return xml_fail(scan, tag, "</%.*s> closes <%.*s>",
                        (int)SWY_MIN(name_len, 64), name,
                        (int)open->name_len, open->name);
    scan->p = name + name_len;
    xml_skip_space(scan);
    if (*scan->p != '>')
        return xml_fail(scan, tag, "malformed </%.*s> tag", (int)name_len,
                        name);
    scan->p++;
    scan->depth--;
    return SWY_OK;
}

swy_status_t swy_topo_xml_check(const char *path, const char *text,
                                size_t len)
{
    xml_scan_t scan;
    swy_status_t status = SWY_OK;

    memset(&scan, 0, sizeof(scan));
    scan.path = path;
    scan.text = text;
    scan.len = len;
    scan.p = text;

    SWY_CHECK(xml_skip_all_misc(&scan, 1));
    if (*scan.p != '<')
        return xml_fail(&scan, scan.p, "no <topology> element");
    SWY_CHECK(xml_scan_start_tag(&scan));
    while (scan.depth > 0) {
        int ret = xml_skip_misc(&scan, 0, &status);
        if (ret < 0)
            return status;
        if (ret > 0)
            continue;
        if (*scan.p != '<')
            SWY_CHECK(xml_scan_text(&scan));
        else if (scan.p[1] == '/')
            SWY_CHECK(xml_scan_end_tag(&scan));
        else if (scan.p[1] == '!' || scan.p[1] == '?')
            return xml_fail(&scan, scan.p,
                            "CDATA, DOCTYPE or processing instruction "
                            "inside <topology>");
        else
            SWY_CHECK(xml_scan_start_tag(&scan));
    }
    if (scan.root_objects == 0)
        return xml_fail(&scan, scan.p, "<topology> without a root object");
    /* hwloc 2 exports every PU and at least one NUMA node. */
    if (scan.pus == 0 || scan.numa_nodes == 0)
        return xml_fail(&scan, scan.p, "<topology> without a %s object",
                        scan.pus == 0 ? "PU" : "NUMANode");
    SWY_CHECK(xml_skip_all_misc(&scan, 0));
    if (scan.p != text + len)
        return xml_fail(&scan, scan.p, "content after </topology>");
    return SWY_OK;
}
