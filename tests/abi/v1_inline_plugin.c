/*
 * A version-1 plugin in plain C99, built only against the frozen copy of the version-1 header
 * (wt_plugin_v1_frozen.h, as wt 0.1.0 shipped it). It stands for the plugin binaries built before
 * ABI version 2 that must keep loading: the current host serves it through its v1 adapter.
 *
 * Backend "v1inline": the trainer sends each tensor inline, hex-encoded, in its own update:
 *   {"t": "<name>|<dtype code>,<bits>,<lanes>|<ndim>|<d0>,<d1>,...|<hex bytes>"}
 * and the worker decodes it and hands it to the v1 load callback. Slow, tiny, and exact.
 */
#include "wt_plugin_v1_frozen.h"

/* The backend it declares (the file is libwt_<V1_BACKEND>.so). */
#ifndef V1_BACKEND
#define V1_BACKEND "v1inline"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wt_init_info {
  int64_t rank;
};
struct wt_trainer {
  const wt_client* client;
  const wt_weight_source* source;
  int64_t rank;
  char last_error[1024];
};
struct wt_worker {
  int active;
  char last_error[1024];
};

static void put(char* buf, size_t cap, const char* msg) {
  if (buf != NULL && cap > 0) {
    strncpy(buf, msg, cap - 1);
    buf[cap - 1] = '\0';
  }
}

/* ---- init info: a flat JSON object with "rank" (a non-negative integer) and "backend"
 * ("v1inline"); any other key, or a value of another type, is refused naming the field ---- */
static const char* skip_ws(const char* p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  return p;
}
/* WT_V1_PLAIN_MESSAGES: messages as many version-1 plugins wrote them, naming the key without
 * the "field '...'" form the host's adapter recognises (ABI 1 has no field out-parameter, so
 * nothing obliged them to). Such a plugin is still a valid version-1 plugin. */
#ifdef WT_V1_PLAIN_MESSAGES
#define FIELD_OPEN "key "
#define FIELD_CLOSE ""
#else
#define FIELD_OPEN "field '"
#define FIELD_CLOSE "'"
#endif
static wt_status refuse(char* err, size_t err_cap, const char* what, const char* key) {
  char msg[256];
  snprintf(msg, sizeof msg, "invalid init_info for backend '" V1_BACKEND "': %s%s%s", what,
           key != NULL ? key : "", key != NULL ? FIELD_CLOSE : "");
  put(err, err_cap, msg);
  return WT_ERR_INVALID_ARGUMENT;
}
static wt_status parse_json(const wt_host_api* host, const char* json, wt_init_info** out,
                            char* err, size_t err_cap) {
  const char* p = json != NULL ? skip_ws(json) : NULL;
  long long r = 0;
  wt_init_info* info;
  (void)host;
  if (p == NULL || *p != '{') return refuse(err, err_cap, "expected a JSON object", NULL);
  p = skip_ws(p + 1);
  while (*p != '}') {
    char key[64];
    size_t n = 0;
    if (*p != '"') return refuse(err, err_cap, "not a flat JSON object", NULL);
    for (++p; *p != '\0' && *p != '"'; ++p) {
      if (*p == '\\' || n + 1 >= sizeof key)
        return refuse(err, err_cap, "a key is too long or escaped", NULL);
      key[n++] = *p;
    }
    if (*p != '"') return refuse(err, err_cap, "not a flat JSON object", NULL);
    key[n] = '\0';
    p = skip_ws(p + 1);
    if (*p != ':') return refuse(err, err_cap, "not a flat JSON object", NULL);
    p = skip_ws(p + 1);
    if (strcmp(key, "backend") == 0) {
      if (strncmp(p, "\"" V1_BACKEND "\"", strlen(V1_BACKEND) + 2) != 0)
        return refuse(err, err_cap, "expected \"" V1_BACKEND "\" in " FIELD_OPEN, "backend");
      p += strlen(V1_BACKEND) + 2;
    } else if (strcmp(key, "rank") == 0) {
      char* end;
      if (*p < '0' || *p > '9')
        return refuse(err, err_cap, "expected a non-negative integer in " FIELD_OPEN, "rank");
      r = strtoll(p, &end, 10);
      if (r < 0 || r > 1000000 || *end == '.' || *end == 'e' || *end == 'E')
        return refuse(err, err_cap, "expected a non-negative integer in " FIELD_OPEN, "rank");
      p = end;
    } else {
      return refuse(err, err_cap, "unknown " FIELD_OPEN, key);
    }
    p = skip_ws(p);
    if (*p == ',') {
      p = skip_ws(p + 1);
      if (*p == '}') return refuse(err, err_cap, "not a flat JSON object", NULL);
    } else if (*p != '}') {
      return refuse(err, err_cap, "not a flat JSON object", NULL);
    }
  }
  if (*skip_ws(p + 1) != '\0') return refuse(err, err_cap, "text after the object", NULL);
  info = (wt_init_info*)calloc(1, sizeof *info);
  if (info == NULL) return WT_ERR_SYSTEM;
  info->rank = (int64_t)r;
  *out = info;
  return WT_OK;
}
static wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
  char text[64];
  int n = snprintf(text, sizeof text, "{\"rank\":%lld}", (long long)info->rank);
  *needed = (size_t)n + 1;
  if (buf == NULL || cap < (size_t)n + 1) return WT_ERR_INVALID_ARGUMENT; /* v1's rule */
  memcpy(buf, text, (size_t)n + 1);
  return WT_OK;
}
static int64_t rank(const wt_init_info* info) {
  return info->rank;
}
static int32_t is_sender(const wt_init_info* info) {
  return info->rank == 0;
}
static void destroy_info(wt_init_info* info) {
  free(info);
}

/* ---- trainer ---- */
static wt_status trainer_create(const wt_host_api* host, const wt_init_info* info,
                                const wt_client* client, const wt_weight_source* source,
                                const wt_trainer_group* group, wt_trainer** out, char* err,
                                size_t err_cap) {
  wt_trainer* t;
  (void)host;
  (void)group;
  if (source == NULL) {
    put(err, err_cap, "v1inline needs a weight source");
    return WT_ERR_INVALID_ARGUMENT;
  }
  t = (wt_trainer*)calloc(1, sizeof *t);
  if (t == NULL) return WT_ERR_SYSTEM;
  t->client = client;
  t->source = source;
  t->rank = info->rank;
  if (t->rank == 0) {
    wt_status s = client->init_weight_transfer_engine(client->ctx, "{}", err, err_cap);
    if (s != WT_OK) {
      free(t);
      return s;
    }
  }
  *out = t;
  return WT_OK;
}

static size_t nbytes_of(const DLTensor* d) {
  size_t n = (size_t)d->dtype.bits * d->dtype.lanes / 8;
  int32_t i;
  for (i = 0; i < d->ndim; ++i) n *= (size_t)d->shape[i];
  return n;
}

/* One tensor as the update text above; NULL when out of memory. */
static char* encode(const wt_tensor* t) {
  static const char hex[] = "0123456789abcdef";
  const DLTensor* d = &t->tensor;
  size_t n = nbytes_of(d), cap = strlen(t->name) + 128 + 24 * (size_t)d->ndim + 2 * n, len;
  const unsigned char* src = (const unsigned char*)d->data + d->byte_offset;
  char* out = (char*)malloc(cap);
  size_t i;
  if (out == NULL) return NULL;
  len = (size_t)sprintf(out, "{\"t\":\"%s|%u,%u,%u|%d|", t->name, (unsigned)d->dtype.code,
                        (unsigned)d->dtype.bits, (unsigned)d->dtype.lanes, (int)d->ndim);
  for (i = 0; i < (size_t)d->ndim; ++i)
    len += (size_t)sprintf(out + len, "%s%lld", i ? "," : "", (long long)d->shape[i]);
  out[len++] = '|';
  for (i = 0; i < n; ++i) {
    out[len++] = hex[src[i] >> 4];
    out[len++] = hex[src[i] & 15];
  }
  strcpy(out + len, "\"}");
  return out;
}

static wt_status send_weights(wt_trainer* t, const wt_send_args* args) {
  const wt_client* c = t->client;
  const wt_weight_source* s = t->source;
  wt_status st;
  wt_tensor tensor;
  int32_t done = 0;
  if (t->rank != 0) return WT_OK;
  st = c->start_weight_update(c->ctx, t->last_error, sizeof t->last_error);
  if (st != WT_OK) return st;
  st = s->begin(s->ctx, t->last_error, sizeof t->last_error);
  while (st == WT_OK) {
    char* text;
    st = s->next(s->ctx, &tensor, &done, t->last_error, sizeof t->last_error);
    if (st != WT_OK || done) break;
    if (tensor.tensor.strides != NULL || tensor.tensor.device.device_type != kDLCPU) {
      put(t->last_error, sizeof t->last_error, "v1inline sends compact host tensors only");
      st = WT_ERR_UNSUPPORTED;
      break;
    }
    text = encode(&tensor);
    if (text == NULL) {
      st = WT_ERR_SYSTEM;
      break;
    }
    st = c->update_weights(c->ctx, text, t->last_error, sizeof t->last_error);
    free(text);
  }
  s->end(s->ctx);
  if (st != WT_OK) return st;
  return c->finish_weight_update(c->ctx, args != NULL ? args->weight_version : NULL, t->last_error,
                                 sizeof t->last_error);
}
static wt_status trainer_abort(wt_trainer* t) {
  (void)t;
  return WT_OK;
}
static const char* trainer_last_error(const wt_trainer* t) {
  return t->last_error;
}
static void trainer_destroy(wt_trainer* t) {
  free(t);
}

/* ---- worker ---- */
static wt_status worker_create(const wt_host_api* host, const char* init_info_json,
                               const wt_worker_options* options, wt_worker** out, char* err,
                               size_t err_cap) {
  const char* p = init_info_json != NULL ? skip_ws(init_info_json) : NULL;
  (void)host;
  /* The trainer ships "{}": this worker takes no fields. */
  if (p == NULL || *p != '{' || *(p = skip_ws(p + 1)) != '}' || *skip_ws(p + 1) != '\0') {
    put(err, err_cap, "invalid init_info for backend 'v1inline' (worker): expected {}");
    return WT_ERR_INVALID_ARGUMENT;
  }
  if (options != NULL && options->device.device_type != kDLCPU) {
    put(err, err_cap, "v1inline keeps weights in host memory only");
    return WT_ERR_UNSUPPORTED;
  }
  *out = (wt_worker*)calloc(1, sizeof **out);
  return *out != NULL ? WT_OK : WT_ERR_SYSTEM;
}
static wt_status worker_start(wt_worker* w) {
  w->active = 1;
  return WT_OK;
}
static int unhex(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}
static wt_status fail(wt_worker* w, const char* why) {
  put(w->last_error, sizeof w->last_error, why);
  return WT_ERR_INVALID_ARGUMENT;
}
static wt_status worker_receive(wt_worker* w, const char* json, wt_load_fn load, void* load_ctx) {
  const char *p = json != NULL ? strstr(json, "\"t\":\"") : NULL, *bar;
  char name[512];
  unsigned code, bits, lanes;
  int ndim, i;
  int64_t shape[8];
  size_t n, k;
  unsigned char* data;
  wt_tensor t;
  wt_status st;
  if (!w->active) return fail(w, "receive before start");
  if (p == NULL) return fail(w, "update_info for backend 'v1inline' carries no tensor");
  p += 5;
  bar = strchr(p, '|');
  if (bar == NULL || (size_t)(bar - p) >= sizeof name) return fail(w, "bad tensor name");
  memcpy(name, p, (size_t)(bar - p));
  name[bar - p] = '\0';
  if (sscanf(bar + 1, "%u,%u,%u|%d|", &code, &bits, &lanes, &ndim) != 4 || ndim < 0 || ndim > 8)
    return fail(w, "bad dtype or ndim");
  p = strchr(strchr(bar + 1, '|') + 1, '|') + 1;
  for (i = 0; i < ndim; ++i) {
    char* end;
    shape[i] = strtoll(p, &end, 10);
    p = end + 1;
  }
  if (ndim == 0) ++p;
  n = (size_t)bits * lanes / 8;
  for (i = 0; i < ndim; ++i) n *= (size_t)shape[i];
  data = (unsigned char*)malloc(n ? n : 1);
  if (data == NULL) return WT_ERR_SYSTEM;
  for (k = 0; k < n; ++k) {
    int hi = unhex(p[2 * k]), lo = hi < 0 ? -1 : unhex(p[2 * k + 1]);
    if (lo < 0) {
      free(data);
      return fail(w, "bad hex data");
    }
    data[k] = (unsigned char)(hi << 4 | lo);
  }
  t.name = name;
  t.tensor.data = data;
  t.tensor.device.device_type = kDLCPU;
  t.tensor.device.device_id = 0;
  t.tensor.ndim = ndim;
  t.tensor.dtype.code = (uint8_t)code;
  t.tensor.dtype.bits = (uint8_t)bits;
  t.tensor.dtype.lanes = (uint16_t)lanes;
  t.tensor.shape = shape;
  t.tensor.strides = NULL;
  t.tensor.byte_offset = 0;
  st = load(load_ctx, &t, 1, w->last_error, sizeof w->last_error);
  free(data);
  return st;
}
static wt_status worker_finish(wt_worker* w) {
  w->active = 0;
  return WT_OK;
}
static wt_status worker_abort(wt_worker* w) {
  return worker_finish(w);
}
static const char* worker_last_error(const wt_worker* w) {
  return w->last_error;
}
static void worker_destroy(wt_worker* w) {
  free(w);
}

static const wt_init_info_vtable kInitInfo = {
    sizeof(wt_init_info_vtable), 1, parse_json, to_json, rank, is_sender, destroy_info};
static const wt_trainer_vtable kTrainer = {sizeof(wt_trainer_vtable),
                                           1,
                                           trainer_create,
                                           send_weights,
                                           trainer_abort,
                                           trainer_last_error,
                                           trainer_destroy};
static const wt_worker_vtable kWorker = {sizeof(wt_worker_vtable),
                                         1,
                                         worker_create,
                                         worker_start,
                                         worker_receive,
                                         worker_finish,
                                         worker_abort,
                                         worker_last_error,
                                         worker_destroy};
static const wt_plugin_api kApi = {sizeof(wt_plugin_api),
                                   1,
                                   V1_BACKEND,
                                   "1.0.0",
                                   WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY,
                                   &kInitInfo,
                                   &kTrainer,
                                   &kWorker};

WT_PLUGIN_EXPORT wt_status wt_plugin_get(uint32_t host_abi, uint32_t* plugin_abi,
                                         const wt_plugin_api** api) {
  *plugin_abi = 1;
  if (host_abi < 1) return WT_ERR_INCOMPATIBLE;
  *api = &kApi;
  return WT_OK;
}
