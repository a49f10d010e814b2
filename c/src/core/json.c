/* json.c: a small strict RFC 8259 parser, used for safetensors headers.
 *
 * Strict means: one value with only JSON whitespace around it, strings of
 * valid UTF-8 without raw control characters, escapes and surrogate pairs
 * checked, numbers exactly as the grammar says (no leading zeros, no "+", no
 * bare "."), nesting bounded by the caller. Duplicate object keys are kept, in
 * order, so callers can refuse them with a message of their own. Every syntax
 * error is UFORM_FORMAT with the byte offset of the fault.
 *
 * One deliberate limit: object keys are NUL-terminated C strings without a
 * length, so a key holding U+0000 is refused rather than silently truncated.
 */
#include "core/safetensors.h"

#include <locale.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *text;
    size_t length;
    size_t position;
    size_t max_depth;
    size_t values;   /* values parsed so far, against UFORM_JSON_MAX_VALUES */
} json_parser_t;

/* A value costs about 72 bytes parsed: this cap bounds a hostile header's
 * memory near 100 MiB, far above any checkpoint (12 per block). */
#define UFORM_JSON_MAX_VALUES ((size_t)1 << 20)

static uform_status_t json_value(json_parser_t *parser, uform_json_t *out, size_t depth);
static void json_free_contents(uform_json_t *value);

/* ---- errors --------------------------------------------------------------- */

static uform_status_t json_fail(size_t offset, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static uform_status_t json_fail(size_t offset, const char *format, ...) {
    char what[512];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(what, sizeof(what), format, arguments);
    va_end(arguments);
    return uform_fail(UFORM_FORMAT, "JSON at byte %zu: %s", offset, what);
}

/* Names the byte at `offset` for messages: 'x', byte 0x0a, or end of input. */
static const char *json_describe(const json_parser_t *parser, size_t offset, char buffer[16]) {
    if (offset >= parser->length) return "end of input";
    unsigned char c = (unsigned char)parser->text[offset];
    if (c >= 0x20 && c < 0x7f) snprintf(buffer, 16, "'%c'", c);
    else snprintf(buffer, 16, "byte 0x%02x", c);
    return buffer;
}

static uform_status_t json_expected(const json_parser_t *parser, const char *what) {
    char buffer[16];
    return json_fail(parser->position, "expected %s, found %s", what,
                     json_describe(parser, parser->position, buffer));
}

/* ---- small helpers ---------------------------------------------------------- */

static void json_skip_space(json_parser_t *parser) {
    while (parser->position < parser->length) {
        char c = parser->text[parser->position];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        parser->position++;
    }
}

static bool json_peek(const json_parser_t *parser, char c) {
    return parser->position < parser->length && parser->text[parser->position] == c;
}

static bool json_is_digit(const json_parser_t *parser, size_t offset) {
    return offset < parser->length && parser->text[offset] >= '0' && parser->text[offset] <= '9';
}

/* Doubles *capacity (at least 4) and reallocs *items to it; *items is kept on failure. */
static uform_status_t json_grow(void **items, size_t *capacity, size_t item_size) {
    size_t wanted = *capacity ? *capacity * 2 : 4;
    size_t bytes;
    if (wanted < *capacity || !uform_mul_ok(wanted, item_size, &bytes))
        return uform_fail(UFORM_OUT_OF_MEMORY, "JSON: too many elements");
    void *grown = realloc(*items, bytes);
    if (!grown) return uform_fail(UFORM_OUT_OF_MEMORY, "JSON: cannot allocate %zu bytes", bytes);
    *items = grown;
    *capacity = wanted;
    return UFORM_OK;
}

/* Length of the well-formed UTF-8 sequence (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF) at s, or 0 when there is none. */
size_t uform_utf8_length(const unsigned char *s, size_t available) {
    unsigned char c = s[0];
    size_t length;
    unsigned char low = 0x80, high = 0xbf; /* range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) length = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        length = 3;
        if (c == 0xe0) low = 0xa0;
        if (c == 0xed) high = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        length = 4;
        if (c == 0xf0) low = 0x90;
        if (c == 0xf4) high = 0x8f;
    } else {
        return 0;
    }
    if (available < length) return 0;
    if (s[1] < low || s[1] > high) return 0;
    for (size_t i = 2; i < length; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return length;
}

static size_t json_utf8_encode(uint32_t code, char *out) {
    if (code < 0x80) {
        out[0] = (char)code;
        return 1;
    }
    if (code < 0x800) {
        out[0] = (char)(0xc0 | (code >> 6));
        out[1] = (char)(0x80 | (code & 0x3f));
        return 2;
    }
    if (code < 0x10000) {
        out[0] = (char)(0xe0 | (code >> 12));
        out[1] = (char)(0x80 | ((code >> 6) & 0x3f));
        out[2] = (char)(0x80 | (code & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (code >> 18));
    out[1] = (char)(0x80 | ((code >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((code >> 6) & 0x3f));
    out[3] = (char)(0x80 | (code & 0x3f));
    return 4;
}

/* The four hex digits at offset, or -1. */
static int32_t json_hex4(const json_parser_t *parser, size_t offset) {
    if (offset > parser->length || parser->length - offset < 4) return -1;
    int32_t code = 0;
    for (size_t i = 0; i < 4; i++) {
        char c = parser->text[offset + i];
        int digit;
        if (c >= '0' && c <= '9') digit = c - '0';
        else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
        else return -1;
        code = code * 16 + digit;
    }
    return code;
}

/* ---- strings ---------------------------------------------------------------- */

/* Parses the string starting at the '"' under the cursor into a fresh
 * NUL-terminated buffer. */
static uform_status_t json_string(json_parser_t *parser, char **out, size_t *out_length) {
    size_t start = parser->position;
    const char *text = parser->text;
    /* Find the closing quote first: the decoded string is never longer than
     * the raw one, so one allocation suffices. */
    size_t end = start + 1;
    while (end < parser->length && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
    if (end >= parser->length) return json_fail(start, "unterminated string");

    char *buffer = uform_alloc(end - start, 1, "JSON string");
    if (!buffer) return UFORM_OUT_OF_MEMORY;
    size_t used = 0;
    size_t i = start + 1;
    while (i < end) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20) {
            free(buffer);
            return json_fail(i, "control character 0x%02x in a string must be escaped", c);
        }
        if (c >= 0x80) {
            size_t length = uform_utf8_length((const unsigned char *)text + i, end - i);
            if (!length) {
                free(buffer);
                return json_fail(i, "invalid UTF-8 in a string");
            }
            memcpy(buffer + used, text + i, length);
            used += length;
            i += length;
            continue;
        }
        if (c != '\\') {
            buffer[used++] = (char)c;
            i++;
            continue;
        }
        /* An escape; the scan above guarantees a byte after the backslash. */
        char kind = text[i + 1];
        const char *simple = strchr("\"\\/bfnrt", kind);
        if (kind != 0 && simple) {
            static const char decoded[] = "\"\\/\b\f\n\r\t";
            buffer[used++] = decoded[simple - "\"\\/bfnrt"];
            i += 2;
            continue;
        }
        if (kind != 'u') {
            free(buffer);
            return json_fail(i, "invalid escape '\\%c'", kind >= 0x20 && kind < 0x7f ? kind : '?');
        }
        int32_t code = i + 6 <= end ? json_hex4(parser, i + 2) : -1;
        if (code < 0) {
            free(buffer);
            return json_fail(i, "\\u must be followed by four hex digits");
        }
        size_t escape_length = 6;
        if (code >= 0xdc00 && code <= 0xdfff) {
            free(buffer);
            return json_fail(i, "unpaired low surrogate \\u%04x", (unsigned)code);
        }
        if (code >= 0xd800 && code <= 0xdbff) {
            int32_t low = -1;
            if (i + 12 <= end && text[i + 6] == '\\' && text[i + 7] == 'u')
                low = json_hex4(parser, i + 8);
            if (low < 0xdc00 || low > 0xdfff) {
                free(buffer);
                return json_fail(i, "unpaired high surrogate \\u%04x", (unsigned)code);
            }
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            escape_length = 12;
        }
        used += json_utf8_encode((uint32_t)code, buffer + used);
        i += escape_length;
    }
    buffer[used] = '\0';
    parser->position = end + 1;
    *out = buffer;
    *out_length = used;
    return UFORM_OK;
}

/* ---- numbers ---------------------------------------------------------------- */

/* A "C" numeric locale, made once, so "1.5" parses the same under any
 * setlocale() the host program made. (locale_t)0 when it cannot be made. */
static locale_t json_c_locale(void) {
    static _Atomic(locale_t) cached;
    locale_t locale = atomic_load_explicit(&cached, memory_order_acquire);
    if (locale) return locale;
    locale_t fresh = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!fresh) return (locale_t)0;
    locale_t expected = (locale_t)0;
    if (!atomic_compare_exchange_strong(&cached, &expected, fresh)) {
        freelocale(fresh); /* another thread won the race */
        return expected;
    }
    return fresh;
}

/* strtod of text[0, length), which already matches the JSON grammar. Out of
 * range magnitudes become +-inf or underflow towards 0, as strtod does. */
static uform_status_t json_number_value(const char *text, size_t length, double *out) {
    char small[128];
    char *copy = small;
    locale_t locale = json_c_locale();
    /* Without a C locale, swap '.' for the current locale's decimal point. */
    const char *point = locale ? "." : localeconv()->decimal_point;
    size_t point_length = strlen(point);
    size_t bytes = length + 1;
    if (point_length > 1 && !uform_add_ok(bytes, point_length, &bytes))
        return uform_fail(UFORM_OUT_OF_MEMORY, "JSON: number too long");
    if (bytes > sizeof(small)) {
        copy = uform_alloc(bytes, 1, "JSON number");
        if (!copy) return UFORM_OUT_OF_MEMORY;
    }
    size_t used = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] == '.') {
            memcpy(copy + used, point, point_length);
            used += point_length;
        } else {
            copy[used++] = text[i];
        }
    }
    copy[used] = '\0';
    *out = locale ? strtod_l(copy, NULL, locale) : strtod(copy, NULL);
    if (copy != small) free(copy);
    return UFORM_OK;
}

static uform_status_t json_number(json_parser_t *parser, uform_json_t *out) {
    size_t start = parser->position;
    size_t i = start;
    if (parser->text[i] == '-') i++;
    if (!json_is_digit(parser, i)) {
        parser->position = i;
        return json_expected(parser, "a digit");
    }
    if (parser->text[i] == '0') {
        i++;
        if (json_is_digit(parser, i)) return json_fail(i - 1, "leading zeros are not allowed");
    } else {
        while (json_is_digit(parser, i)) i++;
    }
    if (i < parser->length && parser->text[i] == '.') {
        i++;
        if (!json_is_digit(parser, i)) {
            parser->position = i;
            return json_expected(parser, "a digit after '.'");
        }
        while (json_is_digit(parser, i)) i++;
    }
    if (i < parser->length && (parser->text[i] == 'e' || parser->text[i] == 'E')) {
        i++;
        if (i < parser->length && (parser->text[i] == '+' || parser->text[i] == '-')) i++;
        if (!json_is_digit(parser, i)) {
            parser->position = i;
            return json_expected(parser, "a digit in the exponent");
        }
        while (json_is_digit(parser, i)) i++;
    }
    out->kind = UFORM_JSON_NUMBER;
    out->number_text = parser->text + start;
    out->number_text_length = i - start;
    parser->position = i;
    return json_number_value(out->number_text, out->number_text_length, &out->number);
}

/* ---- containers ------------------------------------------------------------- */

static uform_status_t json_array(json_parser_t *parser, uform_json_t *out, size_t depth) {
    uform_json_t *items = NULL;
    size_t count = 0, capacity = 0;
    uform_status_t status = UFORM_OK;
    parser->position++; /* '[' */
    json_skip_space(parser);
    if (json_peek(parser, ']')) {
        parser->position++;
    } else {
        for (;;) {
            if (count == capacity) {
                status = json_grow((void **)&items, &capacity, sizeof(*items));
                if (status != UFORM_OK) break;
            }
            status = json_value(parser, &items[count], depth + 1);
            if (status != UFORM_OK) break;
            count++;
            json_skip_space(parser);
            if (json_peek(parser, ',')) {
                parser->position++;
                continue;
            }
            if (json_peek(parser, ']')) {
                parser->position++;
                break;
            }
            status = json_expected(parser, "',' or ']'");
            break;
        }
    }
    if (status != UFORM_OK) {
        for (size_t i = 0; i < count; i++) json_free_contents(&items[i]);
        free(items);
        return status;
    }
    out->kind = UFORM_JSON_ARRAY;
    out->children = items;
    out->length = count;
    return UFORM_OK;
}

static uform_status_t json_object(json_parser_t *parser, uform_json_t *out, size_t depth) {
    uform_json_t *items = NULL;
    char **keys = NULL;
    size_t count = 0, capacity = 0;
    uform_status_t status = UFORM_OK;
    char *key = NULL; /* parsed, not yet stored */
    parser->position++; /* '{' */
    json_skip_space(parser);
    if (json_peek(parser, '}')) {
        parser->position++;
    } else {
        for (;;) {
            if (!json_peek(parser, '"')) {
                status = json_expected(parser, "a string key");
                break;
            }
            size_t key_offset = parser->position, key_length;
            status = json_string(parser, &key, &key_length);
            if (status != UFORM_OK) break;
            if (memchr(key, '\0', key_length)) {
                status = json_fail(key_offset, "object key holds NUL (\\u0000), not supported");
                break;
            }
            json_skip_space(parser);
            if (!json_peek(parser, ':')) {
                status = json_expected(parser, "':'");
                break;
            }
            parser->position++;
            if (count == capacity) {
                /* Grow both arrays; capacity moves only when both succeed. */
                size_t key_capacity = capacity;
                status = json_grow((void **)&keys, &key_capacity, sizeof(*keys));
                if (status != UFORM_OK) break;
                status = json_grow((void **)&items, &capacity, sizeof(*items));
                if (status != UFORM_OK) break;
            }
            status = json_value(parser, &items[count], depth + 1);
            if (status != UFORM_OK) break;
            keys[count++] = key;
            key = NULL;
            json_skip_space(parser);
            if (json_peek(parser, ',')) {
                parser->position++;
                json_skip_space(parser);
                continue;
            }
            if (json_peek(parser, '}')) {
                parser->position++;
                break;
            }
            status = json_expected(parser, "',' or '}'");
            break;
        }
    }
    if (status != UFORM_OK) {
        free(key);
        for (size_t i = 0; i < count; i++) {
            free(keys[i]);
            json_free_contents(&items[i]);
        }
        free(keys);
        free(items);
        return status;
    }
    out->kind = UFORM_JSON_OBJECT;
    out->keys = keys;
    out->children = items;
    out->length = count;
    return UFORM_OK;
}

/* ---- values ----------------------------------------------------------------- */

static uform_status_t json_literal(json_parser_t *parser, const char *word,
                                   uform_json_kind_t kind, uform_json_t *out) {
    size_t length = strlen(word);
    for (size_t i = 0; i < length; i++) {
        size_t offset = parser->position + i;
        if (offset >= parser->length || parser->text[offset] != word[i])
            return json_fail(parser->position, "invalid literal (expected '%s')", word);
    }
    parser->position += length;
    out->kind = kind;
    return UFORM_OK;
}

/* Parses one value at the cursor (after whitespace) into *out, which must be
 * zeroed; depth counts the arrays and objects this value sits in. On failure
 * *out owns nothing. */
static uform_status_t json_value(json_parser_t *parser, uform_json_t *out, size_t depth) {
    memset(out, 0, sizeof(*out));
    json_skip_space(parser);
    out->source_offset = parser->position;
    if (parser->position >= parser->length) return json_expected(parser, "a value");
    char c = parser->text[parser->position];
    if ((c == '[' || c == '{') && depth >= parser->max_depth)
        return json_fail(parser->position, "nesting deeper than %zu levels", parser->max_depth);
    if (++parser->values > UFORM_JSON_MAX_VALUES)
        return json_fail(parser->position, "more than %zu values", UFORM_JSON_MAX_VALUES);
    switch (c) {
    case '{': return json_object(parser, out, depth);
    case '[': return json_array(parser, out, depth);
    case '"': {
        uform_status_t status = json_string(parser, &out->string, &out->length);
        if (status == UFORM_OK) out->kind = UFORM_JSON_STRING;
        return status;
    }
    case 't': return json_literal(parser, "true", UFORM_JSON_TRUE, out);
    case 'f': return json_literal(parser, "false", UFORM_JSON_FALSE, out);
    case 'n': return json_literal(parser, "null", UFORM_JSON_NULL, out);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return json_number(parser, out);
        return json_expected(parser, "a value");
    }
}

/* ---- public (internal) API --------------------------------------------------- */

uform_status_t uform_json_parse(const char *text, size_t length, size_t max_depth,
                                uform_json_t *root) {
    if (!root) return uform_fail(UFORM_INVALID_ARGUMENT, "JSON: root is NULL");
    memset(root, 0, sizeof(*root));
    if (!text && length) return uform_fail(UFORM_INVALID_ARGUMENT, "JSON: text is NULL");
    json_parser_t parser = {text ? text : "", length, 0, max_depth, 0};
    uform_status_t status = json_value(&parser, root, 0);
    if (status != UFORM_OK) return status;
    json_skip_space(&parser);
    if (parser.position != parser.length) {
        char buffer[16];
        status = json_fail(parser.position, "unexpected %s after the value",
                           json_describe(&parser, parser.position, buffer));
        uform_json_free(root);
    }
    return status;
}

static void json_free_contents(uform_json_t *value) {
    free(value->string);
    if (value->keys)
        for (size_t i = 0; i < value->length; i++) free(value->keys[i]);
    if (value->children)
        for (size_t i = 0; i < value->length; i++) json_free_contents(&value->children[i]);
    free(value->keys);
    free(value->children);
    memset(value, 0, sizeof(*value));
}

void uform_json_free(uform_json_t *root) {
    if (root) json_free_contents(root);
}

bool uform_json_u64(const uform_json_t *value, uint64_t *out) {
    if (!value || value->kind != UFORM_JSON_NUMBER || !value->number_text ||
        value->number_text_length == 0)
        return false;
    uint64_t result = 0;
    for (size_t i = 0; i < value->number_text_length; i++) {
        char c = value->number_text[i];
        if (c < '0' || c > '9') return false;
        uint64_t digit = (uint64_t)(c - '0');
        if (result > (UINT64_MAX - digit) / 10) return false;
        result = result * 10 + digit;
    }
    if (out) *out = result;
    return true;
}

const uform_json_t *uform_json_get(const uform_json_t *object, const char *key) {
    if (!object || object->kind != UFORM_JSON_OBJECT || !key) return NULL;
    for (size_t i = 0; i < object->length; i++)
        if (object->keys[i] && strcmp(object->keys[i], key) == 0) return &object->children[i];
    return NULL;
}
