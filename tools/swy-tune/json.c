/* A parser for the one shape of JSON the benchmarks print: one flat object
 * per line whose values are strings, numbers, true, false or null. Strict
 * about the grammar so that a line cut short or interleaved with another
 * rank's output is rejected rather than half read. */
#include "tune.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *swyt_line_strip_prefix(const char *line)
{
    const char *p = line;

    if (*p != '[')
        return line;
    p++;
    if (!isdigit((unsigned char)*p))
        return line;
    while (isdigit((unsigned char)*p))
        p++;
    if (p[0] != ']' || p[1] != ' ')
        return line;
    return p + 2;
}

typedef struct {
    const char *p;
    char *why;
    size_t why_len;
} json_cursor_t;

static int json_fail(json_cursor_t *cur, const char *what)
{
    if (cur->why != NULL && cur->why_len > 0)
        snprintf(cur->why, cur->why_len, "%s at '%.20s'", what, cur->p);
    return -1;
}

static void json_space_skip(json_cursor_t *cur)
{
    while (*cur->p == ' ' || *cur->p == '\t' || *cur->p == '\r' ||
           *cur->p == '\n')
        cur->p++;
}

static int json_hex4(const char *p, unsigned *value_p)
{
    unsigned value = 0;

    for (int i = 0; i < 4; i++) {
        int c = (unsigned char)p[i];
        value <<= 4;
        if (c >= '0' && c <= '9')
            value |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            value |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            value |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *value_p = value;
    return 0;
}

/* Decodes a string at the opening quote into @p out (UTF-8). */
static int json_string_read(json_cursor_t *cur, char *out, size_t len)
{
    size_t n = 0;

    if (*cur->p != '"')
        return json_fail(cur, "expected a string");
    cur->p++;
    for (;;) {
        unsigned char c = (unsigned char)*cur->p;
        char utf8[4];
        size_t utf8_len = 1;

        if (c == '\0')
            return json_fail(cur, "unterminated string");
        if (c < 0x20)
            return json_fail(cur, "control character in string");
        if (c == '"') {
            cur->p++;
            break;
        }
        if (c != '\\') {
            utf8[0] = (char)c;
            cur->p++;
        } else {
            char e = cur->p[1];
            unsigned code;

            cur->p += 2;
            switch (e) {
            case '"': utf8[0] = '"'; break;
            case '\\': utf8[0] = '\\'; break;
            case '/': utf8[0] = '/'; break;
            case 'b': utf8[0] = '\b'; break;
            case 'f': utf8[0] = '\f'; break;
            case 'n': utf8[0] = '\n'; break;
            case 'r': utf8[0] = '\r'; break;
            case 't': utf8[0] = '\t'; break;
            case 'u':
                if (json_hex4(cur->p, &code) != 0)
                    return json_fail(cur, "bad \\u escape");
                cur->p += 4;
                /* Surrogate pairs never occur in our names; keep a
                 * placeholder rather than rejecting the whole line. */
                if (code >= 0xD800 && code <= 0xDFFF)
                    code = '?';
                if (code < 0x80) {
                    utf8[0] = (char)code;
                } else if (code < 0x800) {
                    utf8[0] = (char)(0xC0 | (code >> 6));
                    utf8[1] = (char)(0x80 | (code & 0x3F));
                    utf8_len = 2;
                } else {
                    utf8[0] = (char)(0xE0 | (code >> 12));
                    utf8[1] = (char)(0x80 | ((code >> 6) & 0x3F));
                    utf8[2] = (char)(0x80 | (code & 0x3F));
                    utf8_len = 3;
                }
                break;
            default:
                cur->p -= 1;
                return json_fail(cur, "bad escape");
            }
        }
        if (n + utf8_len >= len)
            return json_fail(cur, "string too long");
        memcpy(out + n, utf8, utf8_len);
        n += utf8_len;
    }
    out[n] = '\0';
    return 0;
}

/* JSON's number grammar, checked before strtod (which would also take
 * "nan", "0x10" or "1."). */
static int json_number_read(json_cursor_t *cur, double *value_p)
{
    const char *start = cur->p, *p = cur->p;

    if (*p == '-')
        p++;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (isdigit((unsigned char)*p))
            p++;
    } else {
        return json_fail(cur, "expected a value");
    }
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return json_fail(cur, "bad number");
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return json_fail(cur, "bad number");
        while (isdigit((unsigned char)*p))
            p++;
    }
    *value_p = strtod(start, NULL);
    cur->p = p;
    return 0;
}

static int json_value_read(json_cursor_t *cur, swyt_json_field_t *field)
{
    const char *p = cur->p;

    if (*p == '"') {
        field->type = SWYT_JSON_STRING;
        return json_string_read(cur, field->text, sizeof(field->text));
    }
    if (*p == '{' || *p == '[')
        return json_fail(cur, "nested value (not supported)");
    if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
        field->type = SWYT_JSON_BOOL;
        field->number = *p == 't';
        cur->p += *p == 't' ? 4 : 5;
        return 0;
    }
    if (strncmp(p, "null", 4) == 0) {
        field->type = SWYT_JSON_NULL;
        cur->p += 4;
        return 0;
    }
    field->type = SWYT_JSON_NUMBER;
    return json_number_read(cur, &field->number);
}

int swyt_json_parse(const char *line, swyt_json_object_t *object_p,
                    char *why, size_t why_len)
{
    json_cursor_t cur = {line, why, why_len};
    swyt_json_object_t *object = calloc(1, sizeof(*object));
    int rc = -1;

    if (object == NULL) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    json_space_skip(&cur);
    if (*cur.p != '{') {
        json_fail(&cur, "expected '{'");
        goto out;
    }
    cur.p++;
    json_space_skip(&cur);
    if (*cur.p == '}') {
        cur.p++;
    } else {
        for (;;) {
            swyt_json_field_t *field;

            if (object->nfields == SWYT_JSON_MAX_FIELDS) {
                json_fail(&cur, "too many fields");
                goto out;
            }
            field = &object->fields[object->nfields];
            json_space_skip(&cur);
            if (json_string_read(&cur, field->key, sizeof(field->key)) != 0)
                goto out;
            if (swyt_json_find(object, field->key) != NULL) {
                json_fail(&cur, "duplicate key");
                goto out;
            }
            json_space_skip(&cur);
            if (*cur.p != ':') {
                json_fail(&cur, "expected ':'");
                goto out;
            }
            cur.p++;
            json_space_skip(&cur);
            if (json_value_read(&cur, field) != 0)
                goto out;
            object->nfields++;
            json_space_skip(&cur);
            if (*cur.p == ',') {
                cur.p++;
                continue;
            }
            if (*cur.p == '}') {
                cur.p++;
                break;
            }
            json_fail(&cur, "expected ',' or '}'");
            goto out;
        }
    }
    json_space_skip(&cur);
    if (*cur.p != '\0') {
        json_fail(&cur, "text after the object");
        goto out;
    }
    memcpy(object_p, object, sizeof(*object));
    rc = 0;
out:
    free(object);
    return rc;
}

const swyt_json_field_t *swyt_json_find(const swyt_json_object_t *object,
                                        const char *key)
{
    for (int i = 0; i < object->nfields; i++) {
        if (strcmp(object->fields[i].key, key) == 0)
            return &object->fields[i];
    }
    return NULL;
}
