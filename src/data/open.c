/* open.c — what --data (and --test-data) name, opened as a training and a held-out set:
 * "synthetic", a list file of pictures or else text, a folder of class folders, or a folder
 * of IDX / CIFAR-10 files (as before pictures were read).
 * Not here: the readers (idx.c, cifar.c, text.c, image_list.c, source.c).
 * Proved by tests/data/test_open.c and tests/cli/test_train_images.c. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"
#include "data/image_list.h"
#include "data/source.h"

/* --data synthetic: this many training and held-out pictures (an epoch's length). */
#define SYNTH_TRAIN_COUNT 10000
#define SYNTH_TEST_COUNT 100

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_subdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    char path[4096];
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        found = is_dir(path);
    }
    closedir(d);
    return found;
}

/* A streamed dataset over src (ownership taken, also on error). */
static shoal_result streamed(sh_source *src, const sh_image_opts *im, const char *name, uint64_t fingerprint,
                             sh_dataset **out)
{
    *out = NULL;
    if (src->count > INT_MAX) {
        int64_t n = src->count;
        sh_source_destroy(src);
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: %lld pictures, more than the %d a data set may hold; split it",
                       name, (long long)n, INT_MAX);
    }
    shoal_result rc = sh_calloc(1, sizeof **out, (void **)out);
    if (rc != SHOAL_OK) {
        sh_source_destroy(src);
        return rc;
    }
    sh_dataset *d = *out;
    d->count = (int)src->count;
    d->c = im->c;
    d->h = im->h;
    d->w = im->w;
    d->nclasses = src->nclasses;
    d->source = src;
    d->fingerprint = fingerprint;
    snprintf(d->name, sizeof d->name, "%s", name);
    return SHOAL_OK;
}

/* Pictures listed by list (ownership taken, also on error). */
static shoal_result pictures(sh_image_list *list, const sh_data_opts *o, int train, const char *name,
                             sh_dataset **out)
{
    uint64_t fp = list->fingerprint;
    sh_source *src = NULL;
    SH_TRY(sh_source_files_create(list, &o->image, train, o->strict, &src));
    SH_TRY(streamed(src, &o->image, name, fp, out));
    return SHOAL_OK;
}

static shoal_result synthetic(const sh_data_opts *o, sh_dataset **train, sh_dataset **test)
{
    sh_source *src = NULL;
    if (o->nclasses < 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "--data synthetic: the net has %d outputs; it needs classes", o->nclasses);
    SH_TRY(sh_source_synthetic_create(SYNTH_TRAIN_COUNT, 0, o->nclasses, o->seed, &o->image, &src));
    SH_TRY(streamed(src, &o->image, "synthetic", 0, train));
    SH_TRY(sh_source_synthetic_create(SYNTH_TEST_COUNT, SYNTH_TRAIN_COUNT, o->nclasses, o->seed, &o->image, &src));
    SH_TRY(streamed(src, &o->image, "synthetic (held out)", 0, test));
    return SHOAL_OK;
}

/* The held-out set of pictures: --test-data (a folder labelled with classes_of's classes when
 * there are some, or a list file), else DIR/val. */
static shoal_result held_out(const sh_data_opts *o, const char *val_dir, const sh_image_list *classes_of,
                             sh_dataset **test)
{
    sh_image_list *list = NULL;
    const char *path = o->test_path ? o->test_path : val_dir;
    if (!o->test_path && !is_dir(val_dir))
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: no held-out set; put test pictures in %s (class folders as in "
                       "the training set) or pass --test-data DIR|LIST.txt", o->path, val_dir);
    if (is_dir(path)) {
        SH_TRY(sh_image_list_folder(path, classes_of && classes_of->class_names ? classes_of : NULL, &list));
    } else if (sh_image_list_sniff(path)) {
        SH_TRY(sh_image_list_file(path, &list));
    } else {
        return SH_FAIL(SHOAL_ERR_FORMAT, "--test-data %s: neither a folder of class folders nor a list file "
                       "(`PATH LABEL` lines of .jpg/.jpeg/.png pictures)", path);
    }
    SH_TRY(pictures(list, o, 0, path, test));
    return SHOAL_OK;
}

/* The training pictures' folder: DIR/train beside DIR/val, as ImageNet unpacks, or DIR. */
static void picture_root(const char *path, char *root, size_t nbytes)
{
    snprintf(root, nbytes, "%s/train", path);
    if (!is_dir(root)) snprintf(root, nbytes, "%s", path);
}

static shoal_result picture_folder(const sh_data_opts *o, sh_dataset **train, sh_dataset **test)
{
    char root[4096], val[4096];
    picture_root(o->path, root, sizeof root);
    snprintf(val, sizeof val, "%s/val", o->path);
    sh_image_list *list = NULL;
    SH_TRY(sh_image_list_folder(root, NULL, &list));
    shoal_result rc = held_out(o, val, list, test);
    if (rc != SHOAL_OK) {
        sh_image_list_destroy(list);
        return rc;
    }
    SH_TRY(pictures(list, o, 1, root, train));
    return SHOAL_OK;
}

static int is_picture_folder(const char *path)
{
    return is_dir(path) && !sh_dataset_dir_has_files(path) && has_subdir(path);
}

shoal_result sh_data_open_test(const sh_data_opts *o, sh_dataset **test)
{
    *test = NULL;
    const char *path = o->path;
    struct stat st;
    if (!path || !*path) return SH_FAIL(SHOAL_ERR_INVALID, "no data: pass --data DIR, FILE or synthetic");
    if (!strcmp(path, "synthetic")) {
        sh_source *src = NULL;
        SH_TRY(sh_source_synthetic_create(SYNTH_TEST_COUNT, SYNTH_TRAIN_COUNT, o->nclasses, o->seed, &o->image, &src));
        return streamed(src, &o->image, "synthetic (held out)", 0, test);
    }
    int list = stat(path, &st) == 0 && S_ISREG(st.st_mode) && sh_image_list_sniff(path);
    if (o->test_path || list || is_picture_folder(path)) {
        char root[4096], val[4096];
        sh_image_list *classes = NULL;
        sh_data_opts q = *o;
        if (list && !o->test_path) q.test_path = path; /* the list named is the one to test on */
        if (is_picture_folder(path)) {
            picture_root(path, root, sizeof root);
            SH_TRY(sh_image_list_classes(root, &classes));
        }
        snprintf(val, sizeof val, "%s/val", path);
        shoal_result rc = held_out(&q, val, classes, test);
        sh_image_list_destroy(classes);
        return rc;
    }
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) return sh_text_load(path, 0, test);
    return sh_dataset_open_dir(path, 0, test);
}

shoal_result sh_data_open(const sh_data_opts *o, sh_dataset **train, sh_dataset **test)
{
    *train = *test = NULL;
    shoal_result rc = SHOAL_OK;
    const char *path = o->path;
    struct stat st;
    if (!path || !*path) return SH_FAIL(SHOAL_ERR_INVALID, "no data: pass --data DIR, FILE or synthetic");
    if (!strcmp(path, "synthetic")) {
        rc = synthetic(o, train, test);
    } else if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        if (sh_image_list_sniff(path)) { /* a list of pictures */
            sh_image_list *list = NULL;
            if (!o->test_path)
                return SH_FAIL(SHOAL_ERR_INVALID, "%s is a list of pictures; pass the held-out set with "
                               "--test-data LIST.txt|DIR", path);
            SH_TRY(sh_image_list_file(path, &list));
            SH_TRY(pictures(list, o, 1, path, train));
            rc = held_out(o, NULL, NULL, test);
        } else { /* a file: character-level text, as `darknet rnn train` reads it */
            if (o->test_path)
                return SH_FAIL(SHOAL_ERR_INVALID, "--test-data goes with pictures; text %s holds out its own "
                               "tail", path);
            SH_TRY(sh_text_load(path, 1, train));
            rc = sh_text_load(path, 0, test);
        }
    } else if (is_picture_folder(path)) {
        rc = picture_folder(o, train, test);
    } else {
        if (o->test_path)
            return SH_FAIL(SHOAL_ERR_INVALID, "--test-data goes with pictures; %s's IDX or CIFAR-10 files "
                           "hold their own test split", path);
        SH_TRY(sh_dataset_open_dir(path, 1, train));
        rc = sh_dataset_open_dir(path, 0, test);
    }
    if (rc != SHOAL_OK) {
        sh_dataset_destroy(*train);
        sh_dataset_destroy(*test);
        *train = *test = NULL;
    }
    return rc;
}
