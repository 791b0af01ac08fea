/* image_list.c — list a data set's picture files once: a folder of class folders (sorted
 * classes, each class's pictures sorted, subfolders walked), or a `PATH LABEL` list file;
 * names kept in one arena with 32-bit offsets, labels beside them.
 * Not here: decoding, order, shards (image_*.c, loader.c, stream.c). Proved by tests/data/test_image_list.c. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "data/image.h"
#include "data/image_list.h"

#define PATH_NBYTES 4096
/* Files named one by one in warnings while listing; the rest are counted. */
#define LIST_WARN_MAX 20
/* The name arena is addressed by 32-bit offsets. */
#define NAMES_MAX_NBYTES ((size_t)UINT32_MAX)

static shoal_result grow(void **p, size_t *cap, size_t want, size_t each, const char *what)
{
    if (want <= *cap) return SHOAL_OK;
    size_t n = *cap ? *cap : 1024;
    while (n < want) n *= 2;
    void *q = realloc(*p, n * each);
    if (!q) return SH_FAIL(SHOAL_ERR_NOMEM, "no memory for the list of %s (%zu entries)", what, n);
    *p = q;
    *cap = n;
    return SHOAL_OK;
}

/* Entries are appended: a name into the arena, its offset and label beside it. */
typedef struct {
    sh_image_list *l;
    size_t entries_cap;
    int64_t warned;
} builder;

static shoal_result add_entry(builder *b, const char *name, int32_t label)
{
    sh_image_list *l = b->l;
    size_t len = strlen(name) + 1;
    if (l->names_nbytes + len > NAMES_MAX_NBYTES)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: more than 4 GiB of file names; split the data set",
                       l->root);
    SH_TRY(grow((void **)&l->names, &l->names_cap, l->names_nbytes + len, 1, "file names"));
    size_t cap = b->entries_cap;
    SH_TRY(grow((void **)&l->name_off, &cap, (size_t)l->count + 1, sizeof *l->name_off, "files"));
    cap = b->entries_cap;
    SH_TRY(grow((void **)&l->labels, &cap, (size_t)l->count + 1, sizeof *l->labels, "labels"));
    b->entries_cap = cap;
    memcpy(l->names + l->names_nbytes, name, len);
    l->name_off[l->count] = (uint32_t)l->names_nbytes;
    l->labels[l->count] = label;
    l->names_nbytes += len;
    l->count++;
    return SHOAL_OK;
}

static void warn_skip(builder *b, const char *path, const char *why)
{
    b->l->skipped++;
    if (b->warned++ < LIST_WARN_MAX) SH_LOG_W("data", "%s: %s; left out", path, why);
    else if (b->warned == LIST_WARN_MAX + 1)
        SH_LOG_W("data", "further files that are not pictures are counted, not named");
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in dir (no "." or hidden ones), sorted; *n of them, each malloc'ed one byte
 * after the entry's d_type (entry_is_dir reads it: no stat per file of a large folder). */
static shoal_result read_names(const char *dir, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot list it (%s)", dir, strerror(errno));
    char **v = NULL;
    size_t cap = 0, k = 0;
    shoal_result rc = SHOAL_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        SH_TRY_GOTO(grow((void **)&v, &cap, k + 1, sizeof *v, "folder entries"), rc, fail);
        size_t len = strlen(e->d_name);
        char *q = malloc(len + 2);
        if (!q) {
            rc = SH_FAIL(SHOAL_ERR_NOMEM, "no memory for the names in %s", dir);
            goto fail;
        }
        q[0] = (char)e->d_type;
        memcpy(q + 1, e->d_name, len + 1);
        v[k++] = q + 1;
    }
    closedir(d);
    if (k) qsort(v, k, sizeof *v, cmp_str);
    *out = v;
    *n = k;
    return SHOAL_OK;
fail:
    closedir(d);
    for (size_t i = 0; i < k; i++) free(v[i] - 1);
    free(v);
    return rc;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++) free(v[i] - 1);
    free(v);
}

/* name (from read_names) in dir is a folder: its d_type says, or (unknown, a link) stat. */
static int entry_is_dir(const char *dir, const char *name)
{
    unsigned char t = (unsigned char)name[-1];
    if (t == DT_DIR) return 1;
    if (t == DT_REG) return 0;
    char path[PATH_NBYTES];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return 0;
    return is_dir(path);
}

/* Every picture under dir (rel: its path below the class folder, "" at the top), depth
 * first in sorted order, so each class's files come out sorted by path component. */
static shoal_result walk_class(builder *b, const char *dir, const char *rel, int32_t label, int depth)
{
    char **names = NULL;
    size_t n = 0;
    SH_TRY(read_names(dir, &names, &n));
    shoal_result rc = SHOAL_OK;
    for (size_t i = 0; i < n && rc == SHOAL_OK; i++) {
        char path[PATH_NBYTES], sub[PATH_NBYTES];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path ||
            snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", names[i]) >= (int)sizeof sub) {
            rc = SH_FAIL(SHOAL_ERR_INVALID, "%s/%s: path longer than %d bytes", dir, names[i], PATH_NBYTES);
            break;
        }
        if (entry_is_dir(dir, names[i])) {
            if (depth < 16) rc = walk_class(b, path, sub, label, depth + 1);
            continue;
        }
        if (sh_image_name_ok(names[i])) rc = add_entry(b, sub, label);
        else warn_skip(b, path, "not a .jpg, .jpeg or .png");
    }
    free_names(names, n);
    return rc;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001B3ull;
    return h;
}

static void finish(sh_image_list *l)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (int64_t i = 0; i < l->count; i++) {
        const char *name = l->names + l->name_off[i];
        h = fnv1a(h, name, strlen(name) + 1);
        h = fnv1a(h, &l->labels[i], sizeof l->labels[i]);
    }
    l->fingerprint = h;
}

static shoal_result new_list(const char *root, sh_image_list **out)
{
    SH_TRY(sh_calloc(1, sizeof **out, (void **)out));
    (*out)->root = strdup(root);
    if (!(*out)->root) {
        free(*out);
        *out = NULL;
        return SH_FAIL(SHOAL_ERR_NOMEM, "no memory for a folder name");
    }
    return SHOAL_OK;
}

static int find_class(char **names, int n, const char *name)
{
    char **hit = bsearch(&name, names, (size_t)n, sizeof *names, cmp_str);
    return hit ? (int)(hit - names) : -1;
}

/* The classes: classes_of's, or dir's subfolders but "val". */
static shoal_result pick_classes(sh_image_list *l, const char *dir, const sh_image_list *classes_of, char **sub,
                                 size_t nsub)
{
    int n = classes_of ? classes_of->nclasses : 0;
    if (!classes_of)
        for (size_t i = 0; i < nsub; i++) n += strcmp(sub[i], "val") != 0;
    SH_TRY(sh_calloc((size_t)(n ? n : 1), sizeof *l->class_names, (void **)&l->class_names));
    l->nclasses = n;
    for (size_t i = 0, k = 0; k < (size_t)n; i++) {
        const char *name = classes_of ? classes_of->class_names[i] : sub[i];
        if (!classes_of && !strcmp(name, "val")) continue;
        if (!(l->class_names[k++] = strdup(name))) return SH_FAIL(SHOAL_ERR_NOMEM, "no memory for class names");
    }
    for (size_t i = 0; classes_of && i < nsub; i++)
        if (find_class(l->class_names, n, sub[i]) < 0)
            return SH_FAIL(SHOAL_ERR_FORMAT, "%s/%s: a class folder the training set (%s) does not "
                           "have; held-out classes must be training classes, rename or remove it",
                           dir, sub[i], classes_of->root);
    return SHOAL_OK;
}

shoal_result sh_image_list_folder(const char *dir, const sh_image_list *classes_of, sh_image_list **out)
{
    shoal_result rc = SHOAL_OK;
    sh_image_list *l = NULL;
    char **names = NULL, **sub = NULL;
    size_t n = 0, nsub = 0;
    *out = NULL;
    SH_TRY(read_names(dir, &names, &n));
    SH_TRY_GOTO(new_list(dir, &l), rc, done);
    builder b = {.l = l};
    SH_TRY_GOTO(sh_calloc(n ? n : 1, sizeof *sub, (void **)&sub), rc, done);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_NBYTES];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (entry_is_dir(dir, names[i])) sub[nsub++] = names[i];
        else warn_skip(&b, path, "a file beside the class folders (each class is a folder of pictures)");
    }
    SH_TRY_GOTO(pick_classes(l, dir, classes_of, sub, nsub), rc, done);
    if (l->nclasses == 0 || nsub == 0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s has no class folders: put each class's pictures in a folder "
                     "of its own (DIR/cat/1.jpg, DIR/dog/2.jpg), or pass a list file", dir);
        goto done;
    }
    for (int c = 0; c < l->nclasses; c++) {
        char path[PATH_NBYTES];
        snprintf(path, sizeof path, "%s/%s", dir, l->class_names[c]);
        if (classes_of && !is_dir(path)) continue; /* a class the held-out set lacks */
        int64_t before = l->count;
        SH_TRY_GOTO(walk_class(&b, path, "", c, 0), rc, done);
        if (l->count == before)
            SH_LOG_W("data", "%s: class folder %d (\"%s\") has no pictures; its label stays, nothing "
                     "of it is trained", path, c, l->class_names[c]);
    }
    if (l->count == 0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: no pictures (.jpg, .jpeg, .png) in its %d class folder%s; "
                     "put the pictures in DIR/CLASS/", dir, l->nclasses, l->nclasses == 1 ? "" : "s");
        goto done;
    }
    if (l->skipped > LIST_WARN_MAX)
        SH_LOG_W("data", "%s: %lld files left out in all (not pictures)", dir, (long long)l->skipped);
    finish(l);
    *out = l;
    l = NULL;
done:
    free(sub);
    free_names(names, n);
    sh_image_list_destroy(l);
    return rc;
}

shoal_result sh_image_list_classes(const char *dir, sh_image_list **out)
{
    shoal_result rc = SHOAL_OK;
    sh_image_list *l = NULL;
    char **names = NULL, **sub = NULL;
    size_t n = 0, nsub = 0;
    *out = NULL;
    SH_TRY(read_names(dir, &names, &n));
    SH_TRY_GOTO(new_list(dir, &l), rc, done);
    SH_TRY_GOTO(sh_calloc(n ? n : 1, sizeof *sub, (void **)&sub), rc, done);
    for (size_t i = 0; i < n; i++) {
        if (entry_is_dir(dir, names[i])) sub[nsub++] = names[i];
    }
    SH_TRY_GOTO(pick_classes(l, dir, NULL, sub, nsub), rc, done);
    if (l->nclasses == 0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s has no class folders: its class names label the held-out "
                     "pictures", dir);
        goto done;
    }
    *out = l;
    l = NULL;
done:
    free(sub);
    free_names(names, n);
    sh_image_list_destroy(l);
    return rc;
}

/* Split "PATH LABEL" at its last blank: path (trimmed) and label >= 0. 0: not that shape. */
static int parse_line(char *line, char **path, long *label)
{
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                   line[len - 1] == '\t'))
        line[--len] = 0;
    char *start = line;
    while (*start == ' ' || *start == '\t') start++;
    char *blank = strrchr(start, ' '), *tab = strrchr(start, '\t');
    if (!blank || (tab && tab > blank)) blank = tab;
    if (!blank) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(blank + 1, &end, 10);
    if (end == blank + 1 || *end || errno || v < 0 || v > INT32_MAX) return 0;
    char *p = blank;
    while (p > start && (p[-1] == ' ' || p[-1] == '\t')) p--;
    *p = 0;
    if (p == start) return 0;
    *path = start;
    *label = v;
    return 1;
}

static int blank_line(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return 0;
    return 1;
}

int sh_image_list_sniff(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[PATH_NBYTES + 64];
    int ok = 0;
    while (fgets(line, sizeof line, f)) {
        if (blank_line(line)) continue;
        char *p = NULL;
        long label = 0;
        ok = strchr(line, '\n') && parse_line(line, &p, &label) && sh_image_name_ok(p);
        break;
    }
    fclose(f);
    return ok;
}

/* dir of path ("." when it has none) into out. */
static void folder_of(const char *path, char *out, size_t nbytes)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, nbytes, ".");
    else if (slash == path) snprintf(out, nbytes, "/");
    else snprintf(out, nbytes, "%.*s", (int)(slash - path), path);
}

shoal_result sh_image_list_file(const char *path, sh_image_list **out)
{
    shoal_result rc = SHOAL_OK;
    sh_image_list *l = NULL;
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot open the list (%s)", path, strerror(errno));
    char dir[PATH_NBYTES], line[PATH_NBYTES + 64];
    folder_of(path, dir, sizeof dir);
    SH_TRY_GOTO(new_list(dir, &l), rc, done);
    l->is_list = 1;
    builder b = {.l = l};
    long lineno = 0, maxlabel = -1;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s:%ld: line longer than %d bytes", path, lineno, PATH_NBYTES);
            goto done;
        }
        if (blank_line(line)) continue;
        char *p = NULL;
        long label = 0;
        if (!parse_line(line, &p, &label)) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s:%ld: expected `PATH LABEL` (LABEL an integer >= 0), got "
                         "\"%.80s\"", path, lineno, line);
            goto done;
        }
        if (l->count == 0) {
            char first[2 * PATH_NBYTES];
            snprintf(first, sizeof first, "%s%s%s", p[0] == '/' ? "" : dir, p[0] == '/' ? "" : "/", p);
            struct stat st;
            if (stat(first, &st) != 0) {
                rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s:%ld: %s not found (relative paths are read from the "
                             "list's folder %s)", path, lineno, first, dir);
                goto done;
            }
        }
        SH_TRY_GOTO(add_entry(&b, p, (int32_t)label), rc, done);
        if (label > maxlabel) maxlabel = label;
    }
    if (ferror(f)) {
        rc = SH_FAIL(SHOAL_ERR_IO, "%s: read failed at line %ld", path, lineno + 1);
        goto done;
    }
    if (l->count == 0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: no `PATH LABEL` lines; a list file names one picture a line",
                     path);
        goto done;
    }
    l->nclasses = (int)maxlabel + 1;
    finish(l);
    *out = l;
    l = NULL;
done:
    fclose(f);
    sh_image_list_destroy(l);
    return rc;
}

shoal_result sh_image_list_path(const sh_image_list *l, int64_t i, char *buf, size_t buf_nbytes)
{
    const char *name = l->names + l->name_off[i];
    int n;
    if (l->is_list)
        n = name[0] == '/' ? snprintf(buf, buf_nbytes, "%s", name)
                           : snprintf(buf, buf_nbytes, "%s/%s", l->root, name);
    else
        n = snprintf(buf, buf_nbytes, "%s/%s/%s", l->root, l->class_names[l->labels[i]], name);
    if (n < 0 || (size_t)n >= buf_nbytes)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: path of file %lld longer than %zu bytes", l->root, (long long)i,
                       buf_nbytes);
    return SHOAL_OK;
}

void sh_image_list_destroy(sh_image_list *l)
{
    if (!l) return;
    for (int i = 0; l->class_names && i < l->nclasses; i++) free(l->class_names[i]);
    free(l->class_names);
    free(l->name_off);
    free(l->labels);
    free(l->names);
    free(l->root);
    free(l);
}
