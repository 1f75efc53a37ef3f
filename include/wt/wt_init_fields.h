/* Strict init-info parsing for plugins in C: one JSON object of scalar fields, read the way wt's
 * own parsers read theirs, with the error a host can show at the right line of a config file.
 * Header-only C99 (also valid C++), no allocation, no global state; include it where you
 * implement wt_init_info_vtable.parse_json and (for a worker) your create slot's init info.
 *
 * What "strict" means, exactly:
 *   - the text is one JSON object (RFC 8259), optionally surrounded by whitespace, at most
 *     WT_FIELDS_MAX_TEXT bytes; anything after it is refused;
 *   - every string is valid UTF-8 (no overlong forms, no surrogates) without raw control
 *     characters; escapes are JSON's, a \u0000 escape is refused (it would cut a C string short);
 *   - a key appears once; "backend" is accepted and ignored (the host puts it there);
 *   - every other key must be read by a getter before wt_fields_finish, which refuses the first
 *     that was not ("unknown field 'x'"): a typo is an error, never a silent default;
 *   - a value must have the getter's type: an integer field takes an integer literal (no fraction,
 *     no exponent, no quotes) within [lo, hi]; a boolean field takes true or false; a string
 *     field a string that fits its buffer; null is a wrong type like any other;
 *   - values of other fields may be arrays or objects (read them yourself from wt_fields_raw);
 *     nesting deeper than WT_FIELDS_MAX_DEPTH is refused.
 * Every error is WT_ERR_INVALID_ARGUMENT with a message that names the field ("invalid init_info
 * for backend 'mine': field 'rank' must be an integer in 0..65535, got -1"), and the field's name
 * is written into parse_json's `field` out-parameter. The first error is kept; later calls do
 * nothing and return 0.
 *
 *   wt_fields f;
 *   int64_t rank = 0;
 *   char dir[256] = "/tmp";
 *   if (wt_fields_parse(&f, json, "init_info for backend 'mine'", err, err_cap, field, field_cap)
 *       == WT_OK) {
 *     wt_fields_int(&f, "rank", WT_FIELD_OPTIONAL, 0, 65535, &rank);
 *     wt_fields_string(&f, "directory", WT_FIELD_REQUIRED, dir, sizeof dir);
 *   }
 *   if (wt_fields_finish(&f) != WT_OK) return f.status;   (err and field are filled in)
 */
#ifndef WT_INIT_FIELDS_H
#define WT_INIT_FIELDS_H

#include <wt/wt_plugin.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define WT_FIELDS_MAX_MEMBERS 128
#define WT_FIELDS_MAX_TEXT (1u << 20)
#define WT_FIELDS_MAX_DEPTH 64
#define WT_FIELDS_MAX_KEY 128
#define WT_FIELD_OPTIONAL 0
#define WT_FIELD_REQUIRED 1

typedef enum {
  WT_JSON_STRING,
  WT_JSON_NUMBER,
  WT_JSON_BOOL,
  WT_JSON_NULL,
  WT_JSON_ARRAY,
  WT_JSON_OBJECT
} wt_json_kind;

typedef struct {
  char key[WT_FIELDS_MAX_KEY]; /* unescaped, NUL-terminated */
  wt_json_kind kind;
  const char* value; /* the value's text in the JSON (for a string: with its quotes) */
  size_t value_len;
  int read; /* a getter (or wt_fields_raw) took it */
} wt_fields_member;

typedef struct {
  wt_status status;
  const char* what;
  char* err;
  size_t err_cap;
  char* field;
  size_t field_cap;
  size_t count;
  wt_fields_member members[WT_FIELDS_MAX_MEMBERS];
} wt_fields;

/* ---- internals ------------------------------------------------------------------------------ */

static inline void wt_fields__fail(wt_fields* f, const char* key, const char* fmt, const char* a,
                                   const char* b) {
  if (f->status != WT_OK) return;
  f->status = WT_ERR_INVALID_ARGUMENT;
  if (f->err != NULL && f->err_cap > 0) {
    char what[512];
    snprintf(what, sizeof what, fmt, a != NULL ? a : "", b != NULL ? b : "");
    snprintf(f->err, f->err_cap, "invalid %s: %s", f->what != NULL ? f->what : "init_info", what);
  }
  if (f->field != NULL && f->field_cap > 0) snprintf(f->field, f->field_cap, "%s", key);
}

typedef struct {
  const char* p;
  const char* end;
} wt_fields__cursor;

static inline void wt_fields__space(wt_fields__cursor* c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) ++c->p;
}

/* The length of the UTF-8 sequence at p (1..4), or 0 when it is not valid UTF-8. */
static inline size_t wt_fields__utf8(const unsigned char* p, const unsigned char* end) {
  size_t n, i;
  uint32_t cp;
  if (p[0] < 0x80) return 1;
  if ((p[0] & 0xE0) == 0xC0)
    n = 2, cp = p[0] & 0x1Fu;
  else if ((p[0] & 0xF0) == 0xE0)
    n = 3, cp = p[0] & 0x0Fu;
  else if ((p[0] & 0xF8) == 0xF0)
    n = 4, cp = p[0] & 0x07u;
  else
    return 0;
  if ((size_t)(end - p) < n) return 0;
  for (i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3Fu);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0; /* overlong, out of range, or a surrogate */
  return n;
}

static inline int wt_fields__hex4(const char* p, uint32_t* out) {
  int i;
  *out = 0;
  for (i = 0; i < 4; ++i) {
    char h = p[i];
    uint32_t v;
    if (h >= '0' && h <= '9')
      v = (uint32_t)(h - '0');
    else if (h >= 'a' && h <= 'f')
      v = (uint32_t)(h - 'a' + 10);
    else if (h >= 'A' && h <= 'F')
      v = (uint32_t)(h - 'A' + 10);
    else
      return 0;
    *out = (*out << 4) | v;
  }
  return 1;
}

/* Writes code point cp as UTF-8 into buf; returns its length. */
static inline size_t wt_fields__utf8_encode(uint32_t cp, char* buf) {
  if (cp < 0x80) {
    buf[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    buf[0] = (char)(0xC0 | (cp >> 6)), buf[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    buf[0] = (char)(0xE0 | (cp >> 12)), buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  buf[0] = (char)(0xF0 | (cp >> 18)), buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), buf[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Reads a \uXXXX escape at c->p (a surrogate pair as one), writing its UTF-8 into buf and its
 * length to *len. Returns 1, or 0 when malformed (a lone surrogate, or U+0000, which would cut
 * the C string short). */
static inline int wt_fields__unicode_escape(wt_fields__cursor* c, char* buf, size_t* len) {
  uint32_t cp;
  if (c->end - c->p < 6 || !wt_fields__hex4(c->p + 2, &cp)) return 0;
  c->p += 6;
  if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
    uint32_t lo;
    if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || !wt_fields__hex4(c->p + 2, &lo) ||
        lo < 0xDC00 || lo > 0xDFFF)
      return 0;
    c->p += 6;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return 0;
  }
  if (cp == 0) return 0;
  *len = wt_fields__utf8_encode(cp, buf);
  return 1;
}

/* Reads one escape at c->p (its backslash), writing what it stands for into buf and its length
 * to *len. Returns 1, or 0 when malformed. */
static inline int wt_fields__escape(wt_fields__cursor* c, char* buf, size_t* len) {
  char ch;
  if (c->end - c->p < 2) return 0;
  switch (c->p[1]) {
    case '"':
    case '\\':
    case '/':
      ch = c->p[1];
      break;
    case 'b':
      ch = '\b';
      break;
    case 'f':
      ch = '\f';
      break;
    case 'n':
      ch = '\n';
      break;
    case 'r':
      ch = '\r';
      break;
    case 't':
      ch = '\t';
      break;
    case 'u':
      return wt_fields__unicode_escape(c, buf, len);
    default:
      return 0;
  }
  buf[0] = ch;
  *len = 1;
  c->p += 2;
  return 1;
}

/* Reads a string at c->p (its opening quote); when out != NULL, writes it unescaped (NUL-ended)
 * if it fits in cap; its unescaped length goes to *length when given. Returns 1, 0 when the JSON
 * is malformed, -1 when it does not fit. */
static inline int wt_fields__string(wt_fields__cursor* c, char* out, size_t cap, size_t* length) {
  size_t n = 0;
  int fits = 1;
  if (c->p >= c->end || *c->p != '"') return 0;
  ++c->p;
  while (c->p < c->end && *c->p != '"') {
    char buf[4];
    size_t len = 0;
    unsigned char ch = (unsigned char)*c->p;
    if (ch < 0x20) return 0;
    if (ch == '\\') {
      if (!wt_fields__escape(c, buf, &len)) return 0;
    } else {
      len = wt_fields__utf8((const unsigned char*)c->p, (const unsigned char*)c->end);
      if (len == 0) return 0;
      memcpy(buf, c->p, len);
      c->p += len;
    }
    if (out != NULL) {
      if (n + len + 1 > cap)
        fits = 0;
      else
        memcpy(out + n, buf, len);
    }
    n += len;
  }
  if (c->p >= c->end) return 0;
  ++c->p; /* the closing quote */
  if (length != NULL) *length = n;
  if (out != NULL && (!fits || n + 1 > cap)) return -1;
  if (out != NULL) out[n] = '\0';
  return 1;
}

static inline int wt_fields__literal(wt_fields__cursor* c, const char* word) {
  size_t n = strlen(word);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
  c->p += n;
  return 1;
}

static inline int wt_fields__number(wt_fields__cursor* c) {
  const char* s = c->p;
  if (c->p < c->end && *c->p == '-') ++c->p;
  if (c->p >= c->end) return 0;
  if (*c->p == '0')
    ++c->p;
  else if (*c->p >= '1' && *c->p <= '9')
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') ++c->p;
  else
    return 0;
  if (c->p < c->end && *c->p == '.') {
    ++c->p;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') ++c->p;
  }
  if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
    ++c->p;
    if (c->p < c->end && (*c->p == '+' || *c->p == '-')) ++c->p;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') ++c->p;
  }
  return c->p > s;
}

/* Skips one scalar (string, true, false, null, number) at c->p, validating it; sets *kind.
 * Returns 1, or 0 when malformed. */
static inline int wt_fields__scalar(wt_fields__cursor* c, wt_json_kind* kind) {
  switch (*c->p) {
    case '"':
      *kind = WT_JSON_STRING;
      return wt_fields__string(c, NULL, 0, NULL) == 1;
    case 't':
      *kind = WT_JSON_BOOL;
      return wt_fields__literal(c, "true");
    case 'f':
      *kind = WT_JSON_BOOL;
      return wt_fields__literal(c, "false");
    case 'n':
      *kind = WT_JSON_NULL;
      return wt_fields__literal(c, "null");
    default:
      *kind = WT_JSON_NUMBER;
      return wt_fields__number(c);
  }
}

/* Skips one value (validating it), iteratively for arrays and objects: no recursion, so no depth
 * can overflow the stack; depth is bounded by WT_FIELDS_MAX_DEPTH. Sets *kind. */
static inline int wt_fields__value(wt_fields__cursor* c, wt_json_kind* kind) {
  char stack[WT_FIELDS_MAX_DEPTH];
  int depth = 0;
  wt_json_kind inner;
  wt_fields__space(c);
  if (c->p >= c->end) return 0;
  if (*c->p != '[' && *c->p != '{') return wt_fields__scalar(c, kind);
  *kind = *c->p == '[' ? WT_JSON_ARRAY : WT_JSON_OBJECT;
  for (;;) { /* inside arrays and objects: at an opening bracket, or after a value */
    wt_fields__space(c);
    if (c->p >= c->end) return 0;
    if (*c->p == '[' || *c->p == '{') {
      if (depth == WT_FIELDS_MAX_DEPTH) return 0;
      stack[depth++] = *c->p == '[' ? ']' : '}';
      ++c->p;
      wt_fields__space(c);
      if (c->p < c->end && *c->p == stack[depth - 1]) { /* empty */
        ++c->p;
        --depth;
        goto after_value;
      }
    } else {
      goto after_value;
    }
    for (;;) { /* a member or element */
      wt_fields__space(c);
      if (stack[depth - 1] == '}') {
        if (wt_fields__string(c, NULL, 0, NULL) != 1) return 0;
        wt_fields__space(c);
        if (c->p >= c->end || *c->p != ':') return 0;
        ++c->p;
        wt_fields__space(c);
      }
      if (c->p < c->end && (*c->p == '[' || *c->p == '{')) break; /* nested: the outer loop */
      if (c->p >= c->end || !wt_fields__scalar(c, &inner)) return 0;
    after_value:
      if (depth == 0) return 1;
      wt_fields__space(c);
      if (c->p >= c->end) return 0;
      if (*c->p == ',') {
        ++c->p;
        continue;
      }
      if (*c->p != stack[depth - 1]) return 0;
      ++c->p;
      --depth;
      goto after_value;
    }
  }
}

/* ---- the API -------------------------------------------------------------------------------- */

/* Parses `json` (NUL-terminated) into f. `what` names the input in messages ("init_info for
 * backend 'mine'"); err/field are parse_json's out-parameters (either may be NULL). Returns
 * WT_OK or WT_ERR_INVALID_ARGUMENT (with err and field written). */
static inline wt_status wt_fields_parse(wt_fields* f, const char* json, const char* what, char* err,
                                        size_t err_cap, char* field, size_t field_cap) {
  wt_fields__cursor c;
  size_t len;
  memset(f, 0, sizeof *f);
  f->status = WT_OK;
  f->what = what;
  f->err = err;
  f->err_cap = err_cap;
  f->field = field;
  f->field_cap = field_cap;
  if (field != NULL && field_cap > 0) field[0] = '\0';
  if (err != NULL && err_cap > 0) err[0] = '\0';
  if (json == NULL) {
    wt_fields__fail(f, "", "no JSON was given%s%s", NULL, NULL);
    return f->status;
  }
  len = strlen(json);
  if (len > WT_FIELDS_MAX_TEXT) {
    wt_fields__fail(f, "", "the JSON is longer than 1 MiB%s%s", NULL, NULL);
    return f->status;
  }
  c.p = json;
  c.end = json + len;
  wt_fields__space(&c);
  if (c.p >= c.end || *c.p != '{') {
    wt_fields__fail(f, "", "expected a JSON object%s%s", NULL, NULL);
    return f->status;
  }
  ++c.p;
  wt_fields__space(&c);
  if (c.p < c.end && *c.p == '}') {
    ++c.p;
  } else {
    for (;;) {
      wt_fields_member* m;
      const char* start;
      size_t i;
      int r;
      if (f->count == WT_FIELDS_MAX_MEMBERS) {
        wt_fields__fail(f, "", "more than 128 fields%s%s", NULL, NULL);
        return f->status;
      }
      m = &f->members[f->count];
      wt_fields__space(&c);
      r = wt_fields__string(&c, m->key, sizeof m->key, NULL);
      if (r == -1) {
        wt_fields__fail(f, "", "a key is longer than 127 bytes%s%s", NULL, NULL);
        return f->status;
      }
      if (r != 1) break; /* malformed: reported below */
      for (i = 0; i < f->count; ++i)
        if (strcmp(f->members[i].key, m->key) == 0) {
          wt_fields__fail(f, m->key, "field '%s' is given twice%s", m->key, NULL);
          return f->status;
        }
      wt_fields__space(&c);
      if (c.p >= c.end || *c.p != ':') break;
      ++c.p;
      wt_fields__space(&c);
      start = c.p;
      if (!wt_fields__value(&c, &m->kind)) {
        wt_fields__fail(f, m->key,
                        "field '%s' holds malformed JSON, or JSON nested deeper than "
                        "64 levels%s",
                        m->key, NULL);
        return f->status;
      }
      m->value = start;
      m->value_len = (size_t)(c.p - start);
      m->read = strcmp(m->key, "backend") == 0; /* the host's, not yours */
      ++f->count;
      wt_fields__space(&c);
      if (c.p < c.end && *c.p == ',') {
        ++c.p;
        continue;
      }
      if (c.p < c.end && *c.p == '}') {
        ++c.p;
        wt_fields__space(&c);
        if (c.p != c.end) break;
        return WT_OK;
      }
      break;
    }
    wt_fields__fail(f, "", "malformed JSON at byte %s%s", NULL, NULL);
    if (f->err != NULL && f->err_cap > 0)
      snprintf(f->err, f->err_cap, "invalid %s: malformed JSON at byte %zu",
               f->what != NULL ? f->what : "init_info", (size_t)(c.p - json));
    return f->status;
  }
  wt_fields__space(&c);
  if (c.p != c.end) {
    wt_fields__fail(f, "", "text after the JSON object%s%s", NULL, NULL);
    return f->status;
  }
  return WT_OK;
}

static inline wt_fields_member* wt_fields__find(wt_fields* f, const char* key, int required) {
  size_t i;
  if (f->status != WT_OK) return NULL;
  for (i = 0; i < f->count; ++i)
    if (strcmp(f->members[i].key, key) == 0) {
      f->members[i].read = 1;
      return &f->members[i];
    }
  if (required) wt_fields__fail(f, key, "missing field '%s'%s", key, NULL);
  return NULL;
}

/* An integer field in [lo, hi]. Returns 1 and writes *out when present and valid; 0 when absent
 * (an error if required) or wrong. */
static inline int wt_fields_int(wt_fields* f, const char* key, int required, int64_t lo, int64_t hi,
                                int64_t* out) {
  wt_fields_member* m = wt_fields__find(f, key, required);
  const char* p;
  const char* end;
  int negative = 0;
  uint64_t v = 0, limit;
  char range[96];
  if (m == NULL) return 0;
  snprintf(range, sizeof range, "%lld..%lld", (long long)lo, (long long)hi);
  p = m->value;
  end = m->value + m->value_len;
  if (m->kind != WT_JSON_NUMBER || memchr(p, '.', m->value_len) != NULL ||
      memchr(p, 'e', m->value_len) != NULL || memchr(p, 'E', m->value_len) != NULL) {
    wt_fields__fail(f, key, "field '%s' must be an integer in %s", key, range);
    return 0;
  }
  if (*p == '-') negative = 1, ++p;
  limit = negative ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  for (; p < end; ++p) {
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (limit - d) / 10) {
      wt_fields__fail(f, key, "field '%s' must be an integer in %s", key, range);
      return 0;
    }
    v = v * 10 + d;
  }
  {
    int64_t x = negative ? (v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    if (x < lo || x > hi) {
      wt_fields__fail(f, key, "field '%s' must be an integer in %s", key, range);
      return 0;
    }
    *out = x;
  }
  return 1;
}

/* A boolean field (true or false). */
static inline int wt_fields_bool(wt_fields* f, const char* key, int required, int* out) {
  wt_fields_member* m = wt_fields__find(f, key, required);
  if (m == NULL) return 0;
  if (m->kind != WT_JSON_BOOL) {
    wt_fields__fail(f, key, "field '%s' must be true or false%s", key, NULL);
    return 0;
  }
  *out = m->value[0] == 't';
  return 1;
}

/* A string field, unescaped into out (NUL-terminated), which must have room for it. */
static inline int wt_fields_string(wt_fields* f, const char* key, int required, char* out,
                                   size_t cap) {
  wt_fields_member* m = wt_fields__find(f, key, required);
  wt_fields__cursor c;
  char n[32];
  if (m == NULL) return 0;
  if (m->kind != WT_JSON_STRING) {
    wt_fields__fail(f, key, "field '%s' must be a string%s", key, NULL);
    return 0;
  }
  c.p = m->value;
  c.end = m->value + m->value_len;
  /* Measured first, written only once it is known to fit: a refused value leaves the caller's
   * buffer as it was. */
  {
    wt_fields__cursor probe = c;
    size_t need = 0;
    if (wt_fields__string(&probe, NULL, 0, &need) != 1 || out == NULL || need + 1 > cap) {
      snprintf(n, sizeof n, "%zu", cap > 0 ? cap - 1 : 0);
      wt_fields__fail(f, key, "field '%s' is longer than %s bytes", key, n);
      return 0;
    }
  }
  if (wt_fields__string(&c, out, cap, NULL) != 1) {
    snprintf(n, sizeof n, "%zu", cap > 0 ? cap - 1 : 0);
    wt_fields__fail(f, key, "field '%s' is longer than %s bytes", key, n);
    return 0;
  }
  return 1;
}

/* A field of any type, as its JSON text (for arrays and objects you read yourself). */
static inline int wt_fields_raw(wt_fields* f, const char* key, int required, const char** text,
                                size_t* len, wt_json_kind* kind) {
  wt_fields_member* m = wt_fields__find(f, key, required);
  if (m == NULL) return 0;
  *text = m->value;
  *len = m->value_len;
  if (kind != NULL) *kind = m->kind;
  return 1;
}

/* Ends the reading: refuses the first field no getter took ("unknown field"). Returns the
 * status of the whole parse: WT_OK, or the first error (err and field written). */
static inline wt_status wt_fields_finish(wt_fields* f) {
  size_t i;
  if (f->status != WT_OK) return f->status;
  for (i = 0; i < f->count; ++i)
    if (!f->members[i].read) {
      wt_fields__fail(f, f->members[i].key, "unknown field '%s'%s", f->members[i].key, NULL);
      break;
    }
  return f->status;
}

/* Writes `s` (NUL-terminated UTF-8) as a JSON string literal, quotes included, into out (cap
 * bytes, NUL-terminated, truncated when short: give 6 * strlen(s) + 3 to be sure). Returns the
 * length the whole literal needs, without the NUL. For a to_json slot. */
static inline size_t wt_fields_quote(const char* s, char* out, size_t cap) {
  size_t n = 0;
  const unsigned char* p;
#define WT_FIELDS__PUT(ch)                \
  do {                                    \
    if (n + 1 < cap) out[n] = (char)(ch); \
    ++n;                                  \
  } while (0)
  WT_FIELDS__PUT('"');
  for (p = (const unsigned char*)s; *p != '\0'; ++p) {
    if (*p == '"' || *p == '\\') {
      WT_FIELDS__PUT('\\');
      WT_FIELDS__PUT(*p);
    } else if (*p < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      WT_FIELDS__PUT('\\');
      WT_FIELDS__PUT('u');
      WT_FIELDS__PUT('0');
      WT_FIELDS__PUT('0');
      WT_FIELDS__PUT(kHex[*p >> 4]);
      WT_FIELDS__PUT(kHex[*p & 15]);
    } else {
      WT_FIELDS__PUT(*p);
    }
  }
  WT_FIELDS__PUT('"');
#undef WT_FIELDS__PUT
  if (cap > 0) out[n < cap ? n : cap - 1] = '\0';
  return n;
}

#endif /* WT_INIT_FIELDS_H */
