/* test_image_list.c — proves src/data/image_list.c: class folders sorted by name with "val"
 * left out, each class's pictures sorted (subfolders too), other files and hidden ones left
 * out, an empty class keeping its label, a held-out folder labelled by the training
 * classes; list files read with spaces in paths, relative paths from the list's folder,
 * malformed lines and a missing first file refused with file:line; which .txt files are
 * lists; names kept compactly; the fingerprint follows names and labels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "data/image_list.h"

static char dir[] = "/tmp/shoal_test_list_XXXXXX";

static void touch(const char *rel)
{
    char path[1024], cmd[2200];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && : > '%s'", path, path);
    CHECK(system(cmd) == 0, "%s", cmd);
}

static void write_file(const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static const char *name_of(const sh_image_list *l, int64_t i) { return l->names + l->name_off[i]; }

static void class_folders_are_sorted_and_their_pictures_too(void)
{
    touch("a/dog/b.jpg");
    touch("a/dog/a.PNG");
    touch("a/dog/sub/c.jpeg");
    touch("a/dog/notes.txt");
    touch("a/dog/.hidden.jpg");
    touch("a/cat/z.jpg");
    touch("a/cat/y.jpg");
    touch("a/bird/x.png");
    touch("a/empty/.keep");
    touch("a/val/cat/v1.jpg");
    touch("a/val/bird/v2.jpg");
    touch("a/README.md");
    sh_image_list *l = NULL;
    char root[512];
    snprintf(root, sizeof root, "%s/a", dir);
    CHECK_OK(sh_image_list_folder(root, NULL, &l));
    if (!l) return;
    CHECK(l->nclasses == 4, "classes %d, want bird cat dog empty", l->nclasses);
    const char *classes[] = {"bird", "cat", "dog", "empty"};
    for (int c = 0; c < 4 && c < l->nclasses; c++)
        CHECK(!strcmp(l->class_names[c], classes[c]), "class %d is %s, want %s", c, l->class_names[c], classes[c]);
    const char *names[] = {"x.png", "y.jpg", "z.jpg", "a.PNG", "b.jpg", "sub/c.jpeg"};
    const int labels[] = {0, 1, 1, 2, 2, 2};
    CHECK(l->count == 6, "%lld pictures, want 6", (long long)l->count);
    for (int i = 0; i < 6 && i < l->count; i++)
        CHECK(!strcmp(name_of(l, i), names[i]) && l->labels[i] == labels[i], "entry %d: %s label %d, want %s %d",
              i, name_of(l, i), l->labels[i], names[i], labels[i]);
    CHECK(l->skipped == 2, "left out %lld files (notes.txt, README.md), want 2", (long long)l->skipped);
    char path[1024];
    CHECK_OK(sh_image_list_path(l, 5, path, sizeof path));
    char want[1024];
    snprintf(want, sizeof want, "%s/a/dog/sub/c.jpeg", dir);
    CHECK(!strcmp(path, want), "path %s, want %s", path, want);
    CHECK(l->names_nbytes == strlen("x.pngy.jpgz.jpga.PNGb.jpgsub/c.jpeg") + 6, "names take %zu bytes",
          l->names_nbytes);

    /* the held-out folder: the training classes' labels; a class it lacks is fine */
    sh_image_list *v = NULL;
    snprintf(path, sizeof path, "%s/a/val", dir);
    CHECK_OK(sh_image_list_folder(path, l, &v));
    if (v) {
        CHECK(v->count == 2 && v->nclasses == 4, "val: %lld pictures, %d classes", (long long)v->count, v->nclasses);
        CHECK(v->count == 2 && v->labels[0] == 0 && v->labels[1] == 1, "val labels %d %d, want 0 (bird) 1 (cat)",
              v->labels[0], v->labels[1]);
    }
    sh_image_list_destroy(v);
    touch("a/val/horse/h.jpg");
    CHECK_RC(sh_image_list_folder(path, l, &v), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "horse") != NULL, "error does not name the class: %s", shoal_last_error());
    sh_image_list_destroy(l);
}

static void folders_without_classes_or_pictures_are_one_clear_error(void)
{
    sh_image_list *l = NULL;
    char root[512];
    touch("flat/1.jpg");
    snprintf(root, sizeof root, "%s/flat", dir);
    CHECK_RC(sh_image_list_folder(root, NULL, &l), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "no class folders") != NULL, "%s", shoal_last_error());
    touch("nopics/a/readme.txt");
    touch("nopics/b/.keep");
    snprintf(root, sizeof root, "%s/nopics", dir);
    CHECK_RC(sh_image_list_folder(root, NULL, &l), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "no pictures") != NULL, "%s", shoal_last_error());
    snprintf(root, sizeof root, "%s/absent", dir);
    CHECK_RC(sh_image_list_folder(root, NULL, &l), SHOAL_ERR_IO);
    CHECK(l == NULL, "a failed listing returned a list");
}

/* Links are followed (as ImageFolder follows them): a linked class folder, a linked picture. */
static void linked_folders_and_pictures_are_followed(void)
{
    touch("links/a/1.jpg");
    char cmd[2048], root[512];
    snprintf(cmd, sizeof cmd, "cd %s/links && ln -s a b && mkdir c && ln -s ../a/1.jpg c/2.jpg", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(root, sizeof root, "%s/links", dir);
    sh_image_list *l = NULL;
    CHECK_OK(sh_image_list_folder(root, NULL, &l));
    if (!l) return;
    CHECK(l->nclasses == 3 && l->count == 3, "%d classes, %lld pictures; want 3 and 3", l->nclasses,
          (long long)l->count);
    CHECK(l->count == 3 && l->labels[1] == 1 && !strcmp(name_of(l, 2), "2.jpg"), "b's label %d, c's picture %s",
          l->labels[1], name_of(l, 2));
    sh_image_list_destroy(l);
}

static void fingerprints_follow_names_and_labels(void)
{
    touch("f/a/1.jpg");
    touch("f/b/2.jpg");
    char root[512];
    snprintf(root, sizeof root, "%s/f", dir);
    sh_image_list *x = NULL, *y = NULL, *z = NULL;
    CHECK_OK(sh_image_list_folder(root, NULL, &x));
    CHECK_OK(sh_image_list_folder(root, NULL, &y));
    touch("f/b/3.jpg");
    CHECK_OK(sh_image_list_folder(root, NULL, &z));
    if (x && y && z) {
        CHECK(x->fingerprint == y->fingerprint, "two listings of one folder differ");
        CHECK(x->fingerprint != z->fingerprint, "a new file left the fingerprint");
    }
    sh_image_list_destroy(x);
    sh_image_list_destroy(y);
    sh_image_list_destroy(z);
}

static void list_files_read_paths_and_labels(void)
{
    touch("imgs/one.jpg");
    touch("imgs/two words.png");
    char text[2048];
    snprintf(text, sizeof text, "imgs/one.jpg 3\n\n  imgs/two words.png\t0  \r\n%s/imgs/one.jpg 7\n", dir);
    write_file("train.txt", text);
    char path[1024], got[1024], want[1024];
    snprintf(path, sizeof path, "%s/train.txt", dir);
    CHECK(sh_image_list_sniff(path), "a list file was not recognised");
    sh_image_list *l = NULL;
    CHECK_OK(sh_image_list_file(path, &l));
    if (!l) return;
    CHECK(l->count == 3 && l->nclasses == 8, "%lld entries, %d classes; want 3, 8", (long long)l->count,
          l->nclasses);
    CHECK(l->count == 3 && l->labels[0] == 3 && l->labels[1] == 0 && l->labels[2] == 7, "labels %d %d %d",
          l->labels[0], l->labels[1], l->labels[2]);
    CHECK_OK(sh_image_list_path(l, 1, got, sizeof got));
    snprintf(want, sizeof want, "%s/imgs/two words.png", dir);
    CHECK(!strcmp(got, want), "relative path %s, want %s", got, want);
    CHECK_OK(sh_image_list_path(l, 2, got, sizeof got));
    snprintf(want, sizeof want, "%s/imgs/one.jpg", dir);
    CHECK(!strcmp(got, want), "absolute path %s, want %s", got, want);
    sh_image_list_destroy(l);
}

static void bad_list_files_are_refused_at_their_line(void)
{
    char path[1024];
    sh_image_list *l = NULL;
    write_file("bad.txt", "imgs/one.jpg 1\nimgs/two words.png minus\n");
    snprintf(path, sizeof path, "%s/bad.txt", dir);
    CHECK_RC(sh_image_list_file(path, &l), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "bad.txt:2:") != NULL, "no file:line in %s", shoal_last_error());
    write_file("neg.txt", "imgs/one.jpg -1\n");
    snprintf(path, sizeof path, "%s/neg.txt", dir);
    CHECK_RC(sh_image_list_file(path, &l), SHOAL_ERR_FORMAT);
    write_file("missing.txt", "imgs/nothere.jpg 1\nimgs/one.jpg 2\n");
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    CHECK_RC(sh_image_list_file(path, &l), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "missing.txt:1:") && strstr(shoal_last_error(), "nothere.jpg"),
          "error: %s", shoal_last_error());
    write_file("blank.txt", "\n\n");
    snprintf(path, sizeof path, "%s/blank.txt", dir);
    CHECK_RC(sh_image_list_file(path, &l), SHOAL_ERR_FORMAT);
    CHECK(l == NULL, "a refused list was returned");
}

static void only_lists_of_pictures_are_lists(void)
{
    struct {
        const char *text;
        int list;
    } cases[] = {
        {"a/b.jpg 1\n", 1},
        {"\n  x.PNG\t12\n", 1},
        {"x.jpeg 0\nanything at all\n", 1},
        {"First Citizen:\nBefore we proceed any further, hear me speak.\n", 0},
        {"x.bmp 3\n", 0},
        {"x.jpg three\n", 0},
        {"x.jpg\n", 0},
        {"the year 1984\n", 0},
        {"", 0},
    };
    char path[1024];
    snprintf(path, sizeof path, "%s/sniff.txt", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file("sniff.txt", cases[i].text);
        CHECK(sh_image_list_sniff(path) == cases[i].list, "\"%s\": list %d, want %d", cases[i].text,
              sh_image_list_sniff(path), cases[i].list);
    }
    snprintf(path, sizeof path, "%s/imgs", dir);
    CHECK(!sh_image_list_sniff(path), "a folder taken as a list");
}

int main(void)
{
    check_begin("test_image_list", 60);
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return check_end();
    }
    RUN(class_folders_are_sorted_and_their_pictures_too);
    RUN(folders_without_classes_or_pictures_are_one_clear_error);
    RUN(linked_folders_and_pictures_are_followed);
    RUN(fingerprints_follow_names_and_labels);
    RUN(list_files_read_paths_and_labels);
    RUN(bad_list_files_are_refused_at_their_line);
    RUN(only_lists_of_pictures_are_lists);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
