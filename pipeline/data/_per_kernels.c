/* Hot loops of prioritized replay (pipeline/data/buffer_middleware.py, segment_tree.py).
 *
 * Optional: when this extension is missing (no compiler at install time) or RLPIPE_NO_EXT=1, the
 * same work is done with numpy (see pipeline/data/_accel.py).  Plain CPython C API plus the
 * buffer protocol: numpy arrays are read and written through memoryview-style buffers, so the
 * build needs no numpy headers.
 *
 * Rules kept by every function:
 *   - the arguments are validated (type, dtype, length, index bounds) before anything is written;
 *     bad input raises TypeError / ValueError / IndexError naming the argument, never crashes.
 *     Only a meta write can still fail half-way (it runs Python code: a mapping's __setitem__, a
 *     replaced value's finalizer); take_items and update say what is left in that case;
 *   - every buffer acquired is released and every new reference is either returned or dropped
 *     (one exit path per function: `done:`); objects are held while Python code may run;
 *   - the GIL is held throughout (the replay buffer's lock serializes the callers);
 *   - random numbers are raw 64-bit words of the buffer's numpy Generator, passed in by the caller.
 *
 * Functions (see each one's docstring below):
 *   set_item_type(cls)           remember where `meta` / `index` live in BufferedData objects
 *   reject(...)                  rejection sampling of distinct slots (successive sampling)
 *   take_items(...)              gather sampled items, write meta["priority_IS"] (and lazy priorities)
 *   is_weights(...)              importance-sampling weights only (sample_batch)
 *   ids_match(indices, items)    are these the indices of those items?
 *   update(...)                  new priorities: raw, tree leaves, meta["priority"] or a stale flag
 *   tree_refresh(...)            recompute the blocks of one sum-tree level above changed nodes
 *   tree_draw(...)               distinct leaves from a stream of i.i.d. sum-tree draws
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef Py_NewRef /* Python 3.9 */
static inline PyObject *Py_NewRef(PyObject *o) {
    Py_INCREF(o);
    return o;
}
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((const void *)(p))
#else
#define PREFETCH(p) ((void)0)
#endif

#define BLOCK 32 /* the sum tree's block width (segment_tree._B) */

/* ------------------------------------------------------------------ buffers */

/* Up to MAXBUF buffers acquired by one call; bufs_release() frees those acquired so far. */
#define MAXBUF 12
typedef struct {
    Py_buffer v[MAXBUF];
    int n;
} Bufs;

static void bufs_release(Bufs *b) {
    for (int i = 0; i < b->n; i++) PyBuffer_Release(&b->v[i]);
    b->n = 0;
}

static const char *kind_name(char kind) {
    switch (kind) {
    case 'i': return "int64";
    case 'u': return "uint64";
    case 'd': return "float64";
    case 'f': return "float32";
    default: return "bool/uint8";
    }
}

/* Acquire `obj` as a C-contiguous array of `kind` ('i' int64, 'u' uint64, 'd' float64,
 * 'f' float32, 'b' bool/uint8); stores its data and length. Returns 0, or -1 with an exception. */
static int bufs_get(Bufs *b, PyObject *obj, char kind, int writable, const char *name, void **data,
                    Py_ssize_t *len) {
    if (b->n >= MAXBUF) {
        PyErr_SetString(PyExc_RuntimeError, "_per_kernels: too many buffers in one call");
        return -1;
    }
    Py_buffer *v = &b->v[b->n];
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous%s %s numpy array, got %.100s", name,
                     writable ? " writable" : "", kind_name(kind), Py_TYPE(obj)->tp_name);
        return -1;
    }
    b->n++;
    const char *f = v->format ? v->format : "B";
#if PY_LITTLE_ENDIAN
    if (*f == '@' || *f == '=' || *f == '<') f++;
#else
    if (*f == '@' || *f == '=' || *f == '>' || *f == '!') f++;
#endif
    int ok = f[0] != 0 && f[1] == 0;
    switch (kind) {
    case 'i': ok = ok && v->itemsize == 8 && (f[0] == 'q' || f[0] == 'l'); break;
    case 'u': ok = ok && v->itemsize == 8 && (f[0] == 'Q' || f[0] == 'L'); break;
    case 'd': ok = ok && v->itemsize == 8 && f[0] == 'd'; break;
    case 'f': ok = ok && v->itemsize == 4 && f[0] == 'f'; break;
    default: ok = ok && v->itemsize == 1 && (f[0] == '?' || f[0] == 'B' || f[0] == 'b'); break;
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be a %s array, got format '%s' with itemsize %zd", name,
                     kind_name(kind), v->format ? v->format : "B", v->itemsize);
        return -1;
    }
    *data = v->buf;
    *len = v->len / v->itemsize;
    return 0;
}

/* Slots (int64) must lie in [0, limit). */
static int check_slots(const int64_t *s, Py_ssize_t n, Py_ssize_t limit, const char *name) {
    for (Py_ssize_t j = 0; j < n; j++) {
        if (s[j] < 0 || s[j] >= limit) {
            PyErr_Format(PyExc_IndexError, "%s[%zd] = %lld is out of range [0, %zd)", name, j,
                         (long long)s[j], limit);
            return -1;
        }
    }
    return 0;
}

static int get_double(PyObject *o, const char *name, double *out) {
    *out = PyFloat_AsDouble(o);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a float, got %.100s", name, Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

static int get_ssize(PyObject *o, const char *name, Py_ssize_t *out) {
    *out = PyNumber_AsSsize_t(o, PyExc_OverflowError);
    if (*out == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an integer, got %.100s", name, Py_TYPE(o)->tp_name);
        }
        return -1;
    }
    return 0;
}

/* PyErr_Format has no float conversions: floats are formatted here and passed as %s. */
typedef struct {
    char s[32];
} Num;

static Num num(double x) {
    Num r;
    PyOS_snprintf(r.s, sizeof r.s, "%.6g", x);
    return r;
}

#define NARGS(want, fname)                                                                       \
    if (nargs != (want)) {                                                                       \
        PyErr_Format(PyExc_TypeError, fname "() takes %d arguments (%zd given)", (want), nargs); \
        return NULL;                                                                             \
    }

/* ------------------------------------------------------------------ BufferedData fields */

/* BufferedData is a dataclass with __slots__: `meta` and `index` are member descriptors at fixed
 * offsets. For objects of exactly that type we read the slot directly (the type check guarantees
 * the layout); anything else goes through getattr. */
static PyTypeObject *item_type = NULL;
static Py_ssize_t meta_off = -1, index_off = -1;
static PyObject *s_meta, *s_index, *s_priority, *s_priority_IS; /* interned strings */

static Py_ssize_t member_offset(PyObject *cls, PyObject *name) {
    PyObject *d = PyObject_GetAttr(cls, name);
    Py_ssize_t off = -1;
    if (d == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) off = m->offset;
    }
    Py_DECREF(d);
    return off;
}

static PyObject *set_item_type(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "set_item_type() needs a class");
        return NULL;
    }
    Py_ssize_t mo = member_offset(cls, s_meta), io = member_offset(cls, s_index);
    Py_INCREF(cls);
    Py_XSETREF(item_type, (PyTypeObject *)cls);
    meta_off = mo;
    index_off = io;
    return PyBool_FromLong(mo >= 0 && io >= 0);
}

/* New reference to item.<field>, or NULL with an exception. */
static PyObject *item_field(PyObject *item, Py_ssize_t off, PyObject *name) {
    if (off >= 0 && Py_TYPE(item) == item_type) {
        PyObject *v = *(PyObject **)((char *)item + off);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(item, name);
}

/* Borrowed list[i], re-checked (Python code run by an earlier write could have changed the list). */
static PyObject *list_item(PyObject *list, Py_ssize_t i) {
    if (i >= PyList_GET_SIZE(list) || PyList_GET_ITEM(list, i) == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "the buffer's items changed during a PER kernel call");
        return NULL;
    }
    return PyList_GET_ITEM(list, i);
}

/* meta[key] = value (a new float of x); dicts directly, other mappings through __setitem__. */
static int set_meta_float(PyObject *meta, PyObject *key, double x) {
    PyObject *v = PyFloat_FromDouble(x);
    if (v == NULL) return -1;
    int r = PyDict_CheckExact(meta) ? PyDict_SetItem(meta, key, v) : PyObject_SetItem(meta, key, v);
    Py_DECREF(v);
    return r;
}

/* ------------------------------------------------------------------ random numbers */

#define U53(r) ((double)((r) >> 11) * (1.0 / 9007199254740992.0)) /* uniform in [0, 1) */

/* ------------------------------------------------------------------ reject */

PyDoc_STRVAR(reject_doc,
"reject(raw, pos, n, dense, leaf, bound, k, out, mark, acc) -> (got, pos, acc, loose)\n\n"
"k distinct slots by rejection sampling (successive sampling when bound >= every leaf). Each\n"
"proposal takes a uniform offset o in [0, n) and a uniform U in [0, 1) from the uint64 words\n"
"raw[pos:] (about one word each), maps o to slot dense[o] (or o when dense is None) and accepts\n"
"it when U * bound < leaf[slot]: accepted slots are i.i.d. with probability leaf / sum(leaf).\n"
"The first k distinct accepted slots go to out[:k] (the stream is cut there). At most four rounds\n"
"of proposals, the r-th of int(want / acc) + 8 with want = k + 8 + k // 4, then k - got + 8, and\n"
"acc (the running acceptance-rate estimate) = 0.75 acc + 0.25 * (accepted / proposed) after each.\n"
"Returns the number of slots drawn (< k when the rounds or the words ran out), the next word,\n"
"the new acc and whether a round's rate fell below half of acc (the bound may be loose).\n"
"mark: a zeroed uint8 scratch array of len(leaf); it is zeroed again on return.");

static PyObject *reject(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NARGS(10, "reject");
    Bufs B = {.n = 0};
    PyObject *ret = NULL;
    uint64_t *raw; int64_t *dense = NULL, *out; double *leaf, bound, acc; uint8_t *mark;
    Py_ssize_t nraw, ndense = 0, nleaf, nout, nmark, pos, n, k, got = 0;
    int loose = 0;
    if (bufs_get(&B, args[0], 'u', 0, "raw", (void **)&raw, &nraw) < 0) goto done;
    if (get_ssize(args[1], "pos", &pos) < 0 || get_ssize(args[2], "n", &n) < 0) goto done;
    if (args[3] != Py_None && bufs_get(&B, args[3], 'i', 0, "dense", (void **)&dense, &ndense) < 0) goto done;
    if (bufs_get(&B, args[4], 'd', 0, "leaf", (void **)&leaf, &nleaf) < 0) goto done;
    if (get_double(args[5], "bound", &bound) < 0 || get_ssize(args[6], "k", &k) < 0) goto done;
    if (bufs_get(&B, args[7], 'i', 1, "out", (void **)&out, &nout) < 0) goto done;
    if (bufs_get(&B, args[8], 'b', 1, "mark", (void **)&mark, &nmark) < 0) goto done;
    if (get_double(args[9], "acc", &acc) < 0) goto done;
    if (pos < 0 || pos > nraw) {
        PyErr_Format(PyExc_IndexError, "pos = %zd is out of range [0, %zd]", pos, nraw);
        goto done;
    }
    if (n < 1 || (uint64_t)n > 0x100000000ULL || n > (dense ? ndense : nleaf)) {
        PyErr_Format(PyExc_ValueError, "n = %zd must be in [1, %zd]", n, dense ? ndense : nleaf);
        goto done;
    }
    if (k < 0 || k > nout) {
        PyErr_Format(PyExc_ValueError, "need 0 <= k (%zd) <= len(out) (%zd)", k, nout);
        goto done;
    }
    if (nmark < nleaf) {
        PyErr_Format(PyExc_ValueError, "mark has %zd entries, needs len(leaf) = %zd", nmark, nleaf);
        goto done;
    }
    if (!(bound > 0) || !isfinite(bound) || !(acc > 0)) {
        PyErr_Format(PyExc_ValueError, "need a finite bound > 0 and acc > 0, got %s and %s",
                     num(bound).s, num(acc).s);
        goto done;
    }
    if (acc > 1) acc = 1; /* an estimate a rounding error may push past 1 */
    /* One word per proposal. Its high 32 bits give the offset by Lemire's multiply-shift (exact: a
     * word in the biased low range is skipped); its low 32 bits give the acceptance uniform U to
     * 2**-32: U lies in [u, u + 1) / 2**32, so the test U < leaf / bound is decided unless
     * leaf / bound * 2**32 falls inside that interval (chance 2**-32), when the next word adds 53
     * more bits. A proposal starts only with two words left, so it never runs out half-way. */
    const uint32_t skip = (uint32_t)((0x100000000ULL - (uint64_t)n) % (uint64_t)n);
    const double scale = 4294967296.0 / bound;
    double want = (double)(k + 8 + (k >> 2));
    for (int round = 0; round < 4 && got < k; round++) {
        double mf = want / acc + 8.0;
        Py_ssize_t m = mf < 1e12 ? (Py_ssize_t)mf : (Py_ssize_t)1e12, proposals = 0, accepted = 0;
        while (got < k && proposals < m && nraw - pos >= 2) {
            uint64_t r = raw[pos++];
            uint64_t mm = (r >> 32) * (uint64_t)n;
            if ((uint32_t)mm < skip) continue;
            int64_t o = (int64_t)(mm >> 32);
            proposals++;
            int64_t s = dense ? dense[o] : o;
            if (s < 0 || s >= nleaf) { /* checked here, not up front: dense may be long */
                PyErr_Format(PyExc_IndexError, "dense[%lld] = %lld is out of range [0, %zd)", (long long)o,
                             (long long)s, nleaf);
                goto done;
            }
            /* branch-free: acceptance is a coin flip the branch predictor cannot learn */
            double thr = leaf[s] * scale, u = (double)(uint32_t)r;
            int a = u + 1.0 <= thr;
            if (u < thr && !a) a = U53(raw[pos++]) < thr - u; /* undecided to 32 bits: rare */
            int fresh = a & (mark[s] == 0);
            accepted += a;
            mark[s] |= (uint8_t)a; /* accepted slots are marked: they are in out[:got] already or now */
            out[got] = s;           /* got < k: in bounds; kept only when fresh */
            got += fresh;
        }
        if (proposals) {
            double rate = (double)accepted / (double)proposals;
            if (rate < 0.5 * acc) loose = 1;
            acc = 0.75 * acc + 0.25 * rate;
            if (!(acc > 1e-12)) acc = 1e-12; /* keeps the next round's size finite */
        }
        if (nraw - pos < 2) break; /* out of words: the caller continues the stream */
        want = (double)(k - got + 8);
    }
    ret = Py_BuildValue("nndi", got, pos, acc, loose);
done:
    for (Py_ssize_t j = 0; j < got; j++) mark[out[j]] = 0;
    bufs_release(&B);
    return ret;
}

/* ------------------------------------------------------------------ IS weights */

/* w[j] = (leaf[s[j]] / mn) ** -beta, rounded to float32 (leaf > 0, mn > 0). */
static void weights_loop(const double *leaf, const int64_t *s, Py_ssize_t n, double mn, double beta,
                         float *w) {
    /* float32 results: powf (a few times faster than pow) on the ratio, unless it overflows a float */
    const double inv = 1.0 / mn;
    const float fb = (float)-beta;
    for (Py_ssize_t j = 0; j < n; j++) {
        double r = leaf[s[j]] * inv;
        w[j] = r < 1e38 ? powf((float)r, fb) : (float)pow(r, -beta);
    }
}

static int check_weight_args(double mn, double beta) {
    if (!(mn > 0) || !isfinite(mn) || !(beta >= 0) || !isfinite(beta)) {
        PyErr_Format(PyExc_ValueError, "need a finite min leaf > 0 and beta >= 0, got %s and %s", num(mn).s,
                     num(beta).s);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(is_weights_doc,
"is_weights(leaf, slots, mn, beta, out) -> None\n\n"
"out[j] = (leaf[slots[j]] / mn) ** -beta as float32 (out: float32 array of len(slots)).");

static PyObject *is_weights(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NARGS(5, "is_weights");
    Bufs B = {.n = 0};
    PyObject *ret = NULL;
    double *leaf, mn, beta; int64_t *slots; float *w;
    Py_ssize_t nleaf, n, nw;
    if (bufs_get(&B, args[0], 'd', 0, "leaf", (void **)&leaf, &nleaf) < 0) goto done;
    if (bufs_get(&B, args[1], 'i', 0, "slots", (void **)&slots, &n) < 0) goto done;
    if (get_double(args[2], "mn", &mn) < 0 || get_double(args[3], "beta", &beta) < 0) goto done;
    if (bufs_get(&B, args[4], 'f', 1, "out", (void **)&w, &nw) < 0) goto done;
    if (nw != n) {
        PyErr_Format(PyExc_ValueError, "out has %zd entries for %zd slots", nw, n);
        goto done;
    }
    if (check_weight_args(mn, beta) < 0 || check_slots(slots, n, nleaf, "slots") < 0) goto done;
    weights_loop(leaf, slots, n, mn, beta, w);
    ret = Py_NewRef(Py_None);
done:
    bufs_release(&B);
    return ret;
}

/* ------------------------------------------------------------------ take_items */

PyDoc_STRVAR(take_items_doc,
"take_items(items, slots, res, ids, leaf, mn, beta, weights, stale, raw) -> None\n\n"
"Append items[slots[j]] to the list `res` and their .index to the list `ids` (None: skip).\n"
"With items=None, `res` already holds the items of these slots (in order): only meta is written.\n"
"weights (float32 array of len(slots), or None for no IS weights): weights[j] =\n"
"(leaf[slot] / mn) ** -beta, also written as the item's meta['priority_IS'].\n"
"Where stale[slot] (uint8/bool), meta['priority'] = raw[slot] and stale[slot] is cleared.\n"
"Every slot must hold an item (not None). If a meta write raises, the items before it are taken\n"
"and written, the rest are not.");

#define CHUNK 64

static PyObject *take_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NARGS(10, "take_items");
    Bufs B = {.n = 0};
    PyObject *ret = NULL;
    PyObject *items = args[0], *res = args[2], *ids = args[3];
    int64_t *slots; double *leaf, *raw, mn = 1.0, beta = 0.0; float *w = NULL; uint8_t *stale;
    Py_ssize_t n, nleaf, nw, nstale, nraw;
    int append = items != Py_None; /* else res already holds the items */
    if ((append && !PyList_Check(items)) || !PyList_Check(res) || (ids != Py_None && !PyList_Check(ids))) {
        PyErr_SetString(PyExc_TypeError, "take_items(): items must be a list or None, res a list, ids a list or None");
        return NULL;
    }
    if (bufs_get(&B, args[1], 'i', 0, "slots", (void **)&slots, &n) < 0) goto done;
    if (bufs_get(&B, args[4], 'd', 0, "leaf", (void **)&leaf, &nleaf) < 0) goto done;
    if (args[7] != Py_None) {
        if (get_double(args[5], "mn", &mn) < 0 || get_double(args[6], "beta", &beta) < 0) goto done;
        if (check_weight_args(mn, beta) < 0) goto done;
        if (bufs_get(&B, args[7], 'f', 1, "weights", (void **)&w, &nw) < 0) goto done;
        if (nw != n) {
            PyErr_Format(PyExc_ValueError, "weights has %zd entries for %zd slots", nw, n);
            goto done;
        }
    }
    if (bufs_get(&B, args[8], 'b', 1, "stale", (void **)&stale, &nstale) < 0) goto done;
    if (bufs_get(&B, args[9], 'd', 0, "raw", (void **)&raw, &nraw) < 0) goto done;
    Py_ssize_t lim = nleaf < nstale ? nleaf : nstale;
    if (nraw < lim) lim = nraw;
    if (append && PyList_GET_SIZE(items) < lim) lim = PyList_GET_SIZE(items);
    if (!append && PyList_GET_SIZE(res) != n) {
        PyErr_Format(PyExc_ValueError, "res holds %zd items for %zd slots", PyList_GET_SIZE(res), n);
        goto done;
    }
    if (check_slots(slots, n, lim, "slots") < 0) goto done;
    PyObject *src = append ? items : res; /* the item of position j is src[AT(j)] */
#define AT(j) (append ? (Py_ssize_t)slots[j] : (j))
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *it = PyList_GET_ITEM(src, AT(j));
        if (it == Py_None) {
            PyErr_Format(PyExc_ValueError, "slot %lld (slots[%zd]) holds no item", (long long)slots[j], j);
            goto done;
        }
    }
    if (w) weights_loop(leaf, slots, n, mn, beta, w);
    /* Sampled items are cache-cold and writing meta touches several objects per item, each found
     * through the previous one: the item, its meta dict (and the dict's GC header just before it),
     * the dict's key table; the index object is read by the caller next. So a chunk's objects are
     * prefetched level by level in passes (the misses of a level overlap) before the writes. The
     * passes only read pointers (no Python code runs); the writes re-read everything they use. */
    for (Py_ssize_t c0 = 0; c0 < n; c0 += CHUNK) {
        Py_ssize_t c1 = n - c0 < CHUNK ? n : c0 + CHUNK, size = PyList_GET_SIZE(src);
        for (Py_ssize_t j = c0; j < c1; j++)
            if (AT(j) < size) PREFETCH(PyList_GET_ITEM(src, AT(j)));
        for (Py_ssize_t j = c0; j < c1; j++) {
            if (AT(j) >= size) continue; /* (the writes below report a changed list) */
            PyObject *it = PyList_GET_ITEM(src, AT(j));
            if (Py_TYPE(it) == item_type && meta_off >= 0 && index_off >= 0) {
                const char *m = *(const char **)((char *)it + meta_off);
                if (m) {
                    PREFETCH(m);
                    PREFETCH(m - 16); /* the GC header: read by every dict insert */
                }
                PREFETCH(*(const char **)((char *)it + index_off));
            }
        }
        for (Py_ssize_t j = c0; j < c1; j++) {
            if (AT(j) >= size) continue;
            PyObject *it = PyList_GET_ITEM(src, AT(j));
            if (Py_TYPE(it) == item_type && meta_off >= 0) {
                PyObject *m = *(PyObject **)((char *)it + meta_off);
                if (m && PyDict_CheckExact(m)) {
                    const char *keys = (const char *)((PyDictObject *)m)->ma_keys;
                    PREFETCH(keys);
                    PREFETCH(keys + 64);
                }
            }
        }
        for (Py_ssize_t j = c0; j < c1; j++) {
            int64_t s = slots[j];
            PyObject *it = list_item(src, AT(j));
            if (it == NULL) goto done;
            Py_INCREF(it); /* held: the meta writes below free objects (and so may run Python code) */
            PyObject *m = item_field(it, meta_off, s_meta);
            int err = m == NULL || (append && PyList_Append(res, it) < 0);
            if (!err && ids != Py_None) {
                PyObject *idx = item_field(it, index_off, s_index);
                err = idx == NULL || PyList_Append(ids, idx) < 0;
                Py_XDECREF(idx);
            }
            if (!err && w) err = set_meta_float(m, s_priority_IS, (double)w[j]) < 0;
            if (!err && stale[s]) {
                err = set_meta_float(m, s_priority, raw[s]) < 0;
                if (!err) stale[s] = 0;
            }
            Py_XDECREF(m);
            Py_DECREF(it);
            if (err) goto done;
        }
    }
#undef AT
    ret = Py_NewRef(Py_None);
done:
    bufs_release(&B);
    return ret;
}

/* ------------------------------------------------------------------ ids_match */

PyDoc_STRVAR(ids_match_doc,
"ids_match(indices, items) -> bool\n\n"
"True when the lists `indices` and `items` have the same length and indices[j] == items[j].index\n"
"for every j (identical int objects compare without a call).");

static PyObject *ids_match(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NARGS(2, "ids_match");
    PyObject *ind = args[0], *items = args[1];
    if (!PyList_Check(ind) || !PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "ids_match(): indices and items must be lists");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(ind);
    if (PyList_GET_SIZE(items) != n) Py_RETURN_FALSE;
    for (Py_ssize_t j = 0; j < n; j++) {
        /* held while compared: a getattr / __eq__ in Python could change the lists */
        PyObject *it = Py_NewRef(PyList_GET_ITEM(items, j));
        PyObject *a = Py_NewRef(PyList_GET_ITEM(ind, j));
        PyObject *idx = item_field(it, index_off, s_index);
        int eq = idx == NULL ? -1 : idx == a ? 1 : PyObject_RichCompareBool(a, idx, Py_EQ);
        Py_DECREF(it);
        Py_DECREF(a);
        Py_XDECREF(idx);
        if (eq < 0) return NULL;
        if (!eq) Py_RETURN_FALSE;
        if (PyList_GET_SIZE(ind) != n || PyList_GET_SIZE(items) != n) { /* changed by an __eq__ */
            PyErr_SetString(PyExc_RuntimeError, "ids_match(): a list changed size during the comparison");
            return NULL;
        }
    }
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------ update */

PyDoc_STRVAR(update_doc,
"update(slots, prio, raw, leaf, alpha, floor, items, stale) -> (lo, hi, old_lo, old_hi, new_lo, new_hi)\n\n"
"New priorities: raw[slot] = p and leaf[slot] = max(p, floor) ** alpha for each (slot, p) of\n"
"zip(slots, prio) (a repeated slot: the last write wins). items: None, or the list of the items\n"
"at these slots (same order), whose meta['priority'] = p is written now; with None, stale[slot]\n"
"is set instead (written lazily). Every p must be finite and >= 0 (checked before any write).\n"
"Returns the smallest / largest p, the smallest / largest leaf before the writes (at these\n"
"slots) and the smallest positive (inf if none) / largest leaf after them. The meta writes come\n"
"first: if one raises, nothing else was written and the metas already changed are marked stale\n"
"(they get the stored priority back when next read).");

static PyObject *update(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NARGS(8, "update");
    Bufs B = {.n = 0};
    PyObject *ret = NULL, *items = args[6];
    int64_t *slots; double *prio, *raw, *leaf, alpha, floor_; uint8_t *stale;
    Py_ssize_t n, np_, nraw, nleaf, nstale;
    if (bufs_get(&B, args[0], 'i', 0, "slots", (void **)&slots, &n) < 0) goto done;
    if (bufs_get(&B, args[1], 'd', 0, "prio", (void **)&prio, &np_) < 0) goto done;
    if (bufs_get(&B, args[2], 'd', 1, "raw", (void **)&raw, &nraw) < 0) goto done;
    if (bufs_get(&B, args[3], 'd', 1, "leaf", (void **)&leaf, &nleaf) < 0) goto done;
    if (get_double(args[4], "alpha", &alpha) < 0 || get_double(args[5], "floor", &floor_) < 0) goto done;
    if (bufs_get(&B, args[7], 'b', 1, "stale", (void **)&stale, &nstale) < 0) goto done;
    if (np_ != n) {
        PyErr_Format(PyExc_ValueError, "update_many: %zd priorities for %zd indices", np_, n);
        goto done;
    }
    if (items != Py_None && (!PyList_Check(items) || PyList_GET_SIZE(items) != n)) {
        PyErr_Format(PyExc_TypeError, "items must be None or a list of %zd items", n);
        goto done;
    }
    if (!(alpha >= 0) || !isfinite(alpha) || !(floor_ > 0) || !isfinite(floor_)) {
        PyErr_Format(PyExc_ValueError, "need alpha >= 0 and floor > 0, got %s and %s", num(alpha).s,
                     num(floor_).s);
        goto done;
    }
    Py_ssize_t lim = nraw < nleaf ? nraw : nleaf;
    if (nstale < lim) lim = nstale;
    if (check_slots(slots, n, lim, "slots") < 0) goto done;
    Py_ssize_t failed_at = 0;
    double lo = INFINITY, hi = -INFINITY, olo = INFINITY, ohi = -INFINITY, nlo = INFINITY, nhi = -INFINITY;
    for (Py_ssize_t j = 0; j < n; j++) {
        double p = prio[j];
        if (!(p >= 0) || !isfinite(p)) {
            PyErr_Format(PyExc_ValueError, "priorities must be finite and >= 0 (got %s at position %zd)",
                         num(p).s, j);
            goto done;
        }
        if (p < lo) lo = p;
        if (p > hi) hi = p;
    }
    if (items != Py_None) {
        /* meta first: the only step that can fail */
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *it = list_item(items, j);
            if (it == NULL) {
                failed_at = j;
                goto meta_failed;
            }
            Py_INCREF(it);
            PyObject *m = item_field(it, meta_off, s_meta);
            int r = m == NULL ? -1 : set_meta_float(m, s_priority, prio[j]);
            Py_XDECREF(m);
            Py_DECREF(it);
            if (r < 0) {
                failed_at = j;
                goto meta_failed;
            }
        }
    }
    for (Py_ssize_t j = 0; j < n; j++) { /* all before any write (a slot may repeat) */
        double old = leaf[slots[j]];
        if (old < olo) olo = old;
        if (old > ohi) ohi = old;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t s = slots[j];
        double p = prio[j], x = p < floor_ ? floor_ : p;
        raw[s] = p;
        leaf[s] = alpha == 1.0 ? x : pow(x, alpha);
        if (items == Py_None) stale[s] = 1;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        double v = leaf[slots[j]];
        if (v > 0 && v < nlo) nlo = v;
        if (v > nhi) nhi = v;
    }
    ret = Py_BuildValue("dddddd", lo, hi, olo, ohi, nlo, nhi);
    goto done;
meta_failed:
    /* nothing else was written: the metas already changed get the stored priority back lazily */
    for (Py_ssize_t q = 0; q < failed_at; q++) stale[slots[q]] = 1;
done:
    bufs_release(&B);
    return ret;
}

/* ------------------------------------------------------------------ sum tree */

PyDoc_STRVAR(tree_refresh_doc,
"tree_refresh(vals, C, up, nodes, blocks, bmax, cum) -> count\n\n"
"One block level of segment_tree.SumMinTree: for every block b = node // 32 of the changed nodes\n"
"(int64 array), recompute C[b, :] = the inclusive prefix sums of vals[32 b : 32 b + 32],\n"
"up[b] = C[b, 31] and, unless bmax is None, bmax[b] = the largest of those values. The blocks\n"
"(repeats of the previous one dropped) are written to blocks[:count] (int64, at least len(nodes)\n"
"entries; may be `nodes` itself): the changed nodes of the next level. cum (the top level: None\n"
"or float64, at most len(up) entries) = the inclusive prefix sums of up, redone from the first\n"
"changed block on.");

static PyObject *tree_refresh(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NARGS(7, "tree_refresh");
    Bufs B = {.n = 0};
    PyObject *ret = NULL;
    double *vals, *C, *up, *bmax = NULL, *cum = NULL; int64_t *nodes, *blocks;
    Py_ssize_t nv, nc, nup, n, nbl, nbmax = 0, ncum = 0, cnt = 0;
    if (bufs_get(&B, args[0], 'd', 0, "vals", (void **)&vals, &nv) < 0) goto done;
    if (bufs_get(&B, args[1], 'd', 1, "C", (void **)&C, &nc) < 0) goto done;
    if (bufs_get(&B, args[2], 'd', 1, "up", (void **)&up, &nup) < 0) goto done;
    if (bufs_get(&B, args[3], 'i', 0, "nodes", (void **)&nodes, &n) < 0) goto done;
    if (bufs_get(&B, args[4], 'i', 1, "blocks", (void **)&blocks, &nbl) < 0) goto done;
    if (args[5] != Py_None && bufs_get(&B, args[5], 'd', 1, "bmax", (void **)&bmax, &nbmax) < 0) goto done;
    if (args[6] != Py_None && bufs_get(&B, args[6], 'd', 1, "cum", (void **)&cum, &ncum) < 0) goto done;
    Py_ssize_t nb = nv / BLOCK;
    if (cum && ncum > nup) {
        PyErr_Format(PyExc_ValueError, "tree_refresh: cum has %zd entries, up only %zd", ncum, nup);
        goto done;
    }
    if (bmax && nbmax < nb) {
        PyErr_Format(PyExc_ValueError, "tree_refresh: bmax has %zd entries for %zd blocks", nbmax, nb);
        goto done;
    }
    if (nv % BLOCK || nc != nv || nup < nb || nbl < n) {
        PyErr_Format(PyExc_ValueError, "tree_refresh: vals (%zd) must be whole blocks of %d, C the same "
                     "size (%zd), up one entry per block (%zd for %zd) and blocks (%zd) as long as nodes (%zd)",
                     nv, BLOCK, nc, nup, nb, nbl, n);
        goto done;
    }
    if (check_slots(nodes, n, nv, "nodes") < 0) goto done;
    int64_t last = -1, first = nb;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t b = nodes[j] / BLOCK; /* read before blocks[cnt] (cnt <= j) is written */
        first = b < first ? b : first;
        if (b == last) continue;
        last = b;
        const double *v = vals + b * BLOCK;
        double *c = C + b * BLOCK, acc = 0.0, mx = v[0];
        for (int i = 0; i < BLOCK; i++) {
            c[i] = (acc += v[i]);
            mx = v[i] > mx ? v[i] : mx;
        }
        up[b] = acc;
        if (bmax) bmax[b] = mx;
        blocks[cnt++] = b;
    }
    if (cum) { /* sequential, like numpy's add.accumulate: the same sums */
        double acc = first > 0 && first <= ncum ? cum[first - 1] : 0.0;
        for (Py_ssize_t i = first; i < ncum; i++) cum[i] = (acc += up[i]);
    }
    ret = PyLong_FromSsize_t(cnt);
done:
    bufs_release(&B);
    return ret;
}

PyDoc_STRVAR(tree_draw_doc,
"tree_draw(top, top_cum, Cs, raw, pos, leaf, k, out, got, mark, limit) -> (got, pos, draws)\n\n"
"Distinct leaves of a stream of i.i.d. draws from a SumMinTree (leaf i with probability\n"
"leaf[i] / total): top / top_cum are the top level's block sums and their cumulative sums, Cs the\n"
"block levels' prefix-sum rows (C arrays, leaves first). One draw: a top node j with probability\n"
"top[j] / total, then at every level below the child whose prefix sum first exceeds a uniform\n"
"share of its block's sum. A draw landing on an empty leaf (rounding at a block's edge) is made\n"
"again. New distinct leaves are appended to out[got:] until k, `limit` draws or the words raw[pos:]\n"
"run out. out[:got] is a prefix already drawn; mark as in reject().");

#define MAXLEVELS 8

static PyObject *tree_draw(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    NARGS(11, "tree_draw");
    Bufs B = {.n = 0};
    PyObject *ret = NULL, *Cs = args[2];
    double *top, *tcum, *leaf, *C[MAXLEVELS]; Py_ssize_t nC[MAXLEVELS];
    uint64_t *raw; int64_t *out; uint8_t *mark;
    Py_ssize_t ntop, ntc, nraw, pos, nleaf, k, nout, got, nmark, limit, marked = 0, draws = 0;
    if (bufs_get(&B, args[0], 'd', 0, "top", (void **)&top, &ntop) < 0) goto done;
    if (bufs_get(&B, args[1], 'd', 0, "top_cum", (void **)&tcum, &ntc) < 0) goto done;
    if (!PyList_Check(Cs) || PyList_GET_SIZE(Cs) < 1 || PyList_GET_SIZE(Cs) > MAXLEVELS) {
        PyErr_Format(PyExc_TypeError, "Cs must be a list of 1 to %d arrays", MAXLEVELS);
        goto done;
    }
    Py_ssize_t L = PyList_GET_SIZE(Cs);
    for (Py_ssize_t l = 0; l < L; l++)
        if (bufs_get(&B, PyList_GET_ITEM(Cs, l), 'd', 0, "Cs[l]", (void **)&C[l], &nC[l]) < 0) goto done;
    if (bufs_get(&B, args[3], 'u', 0, "raw", (void **)&raw, &nraw) < 0) goto done;
    if (get_ssize(args[4], "pos", &pos) < 0) goto done;
    if (bufs_get(&B, args[5], 'd', 0, "leaf", (void **)&leaf, &nleaf) < 0) goto done;
    if (get_ssize(args[6], "k", &k) < 0) goto done;
    if (bufs_get(&B, args[7], 'i', 1, "out", (void **)&out, &nout) < 0) goto done;
    if (get_ssize(args[8], "got", &got) < 0) goto done;
    if (bufs_get(&B, args[9], 'b', 1, "mark", (void **)&mark, &nmark) < 0) goto done;
    if (get_ssize(args[10], "limit", &limit) < 0) goto done;
    /* shape checks: level l has nC[l] / 32 blocks, each a node of level l + 1 (or of the top) */
    int shapes_ok = ntop >= 1 && ntc == ntop && nC[0] == nleaf;
    for (Py_ssize_t l = 0; l < L && shapes_ok; l++) {
        Py_ssize_t nodes_above = l + 1 < L ? nC[l + 1] : ntop;
        shapes_ok = nC[l] % BLOCK == 0 && nC[l] / BLOCK == nodes_above;
    }
    if (!shapes_ok) {
        PyErr_SetString(PyExc_ValueError, "tree_draw: the level arrays do not form a tree "
                        "(len(Cs[0]) == len(leaf), len(Cs[l]) == 32 * len(Cs[l + 1]), len(Cs[-1]) == 32 * len(top))");
        goto done;
    }
    if (pos < 0 || pos > nraw) {
        PyErr_Format(PyExc_IndexError, "pos = %zd is out of range [0, %zd]", pos, nraw);
        goto done;
    }
    if (k < 0 || k > nout || got < 0 || got > k) {
        PyErr_Format(PyExc_ValueError, "need 0 <= got (%zd) <= k (%zd) <= len(out) (%zd)", got, k, nout);
        goto done;
    }
    if (nmark < nleaf) {
        PyErr_Format(PyExc_ValueError, "mark has %zd entries, needs len(leaf) = %zd", nmark, nleaf);
        goto done;
    }
    double total = tcum[ntop - 1];
    if (!(total > 0) || !isfinite(total)) {
        PyErr_SetString(PyExc_ValueError, "cannot sample from an empty priority tree");
        goto done;
    }
    if (check_slots(out, got, nleaf, "out") < 0) goto done;
    for (Py_ssize_t j = 0; j < got; j++) {
        if (mark[out[j]]) {
            PyErr_Format(PyExc_ValueError, "out[:%zd] repeats slot %lld", got, (long long)out[j]);
            goto done;
        }
        mark[out[j]] = 1;
        marked = j + 1;
    }
    while (got < k && draws < limit && nraw - pos >= L + 1) {
        /* Both searches are branch-free (the comparisons are coin flips a branch predictor cannot
         * learn). Top node: the first j with top_cum[j] > u, never past the last node; the answer
         * stays in [lo, lo + len) while len halves. */
        double u = U53(raw[pos++]) * total;
        Py_ssize_t lo = 0, len = ntop;
        while (len > 1) {
            Py_ssize_t half = len >> 1;
            lo += (tcum[lo + half - 1] <= u) * half;
            len -= half;
        }
        int64_t j = lo;
        for (Py_ssize_t l = L - 1; l >= 0; l--) {
            const double *row = C[l] + j * BLOCK;
            double q = U53(raw[pos++]) * row[BLOCK - 1]; /* uniform in [0, block sum) */
            int i = 0;
            for (int step = BLOCK / 2; step; step >>= 1) /* first i with row[i] > q (31 at most) */
                i += (row[i + step - 1] <= q) * step;
            j = j * BLOCK + i;
        }
        draws++;
        if (!(leaf[j] > 0)) continue; /* rounding put q on an empty leaf's edge: draw again */
        if (!mark[j]) {
            mark[j] = 1;
            out[got++] = j;
        }
    }
    marked = got;
    ret = Py_BuildValue("nnn", got, pos, draws);
done:
    for (Py_ssize_t j = 0; j < marked; j++) mark[out[j]] = 0;
    bufs_release(&B);
    return ret;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"set_item_type", (PyCFunction)set_item_type, METH_O,
     "set_item_type(cls) -> bool: read `meta` / `index` of objects of exactly this class from their slots."},
    {"reject", (PyCFunction)(void (*)(void))reject, METH_FASTCALL, reject_doc},
    {"is_weights", (PyCFunction)(void (*)(void))is_weights, METH_FASTCALL, is_weights_doc},
    {"take_items", (PyCFunction)(void (*)(void))take_items, METH_FASTCALL, take_items_doc},
    {"ids_match", (PyCFunction)(void (*)(void))ids_match, METH_FASTCALL, ids_match_doc},
    {"update", (PyCFunction)(void (*)(void))update, METH_FASTCALL, update_doc},
    {"tree_refresh", (PyCFunction)(void (*)(void))tree_refresh, METH_FASTCALL, tree_refresh_doc},
    {"tree_draw", (PyCFunction)(void (*)(void))tree_draw, METH_FASTCALL, tree_draw_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_per_kernels",
    "Compiled hot loops of prioritized replay (optional; numpy does the same work without them).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__per_kernels(void) {
    s_meta = PyUnicode_InternFromString("meta");
    s_index = PyUnicode_InternFromString("index");
    s_priority = PyUnicode_InternFromString("priority");
    s_priority_IS = PyUnicode_InternFromString("priority_IS");
    if (!s_meta || !s_index || !s_priority || !s_priority_IS) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (m && PyModule_AddIntConstant(m, "BLOCK", BLOCK) < 0) Py_CLEAR(m);
    return m;
}
