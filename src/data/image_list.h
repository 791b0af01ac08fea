/* image_list.h — which picture files a data set holds and their labels, listed once and kept
 * compactly (a name arena and offsets: about the names' length plus 8 bytes a file): a
 * folder of class folders (torchvision's ImageFolder, ImageNet's train/), or a list file of
 * `PATH LABEL` lines (Caffe's).
 * Not here: decoding (image.h), the order and the shards (loader.c, stream.c).
 * Proved by tests/data/test_image_list.c. */
#ifndef SH_IMAGE_LIST_H
#define SH_IMAGE_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "shoal/result.h"

typedef struct {
    int64_t count;               /* files */
    int nclasses;                /* class folders (empty ones too), or 1 + the largest label */
    char *root;                  /* folders: DIR; lists: the list file's folder */
    char **class_names;          /* folders: (nclasses) sorted names; lists: NULL */
    int is_list;
    uint32_t *name_off;          /* (count) offsets into names */
    int32_t *labels;             /* (count) */
    char *names;                 /* folders: paths under the class folder; lists: as written */
    size_t names_nbytes, names_cap;
    uint64_t fingerprint;        /* FNV-1a of names and labels: what a checkpoint checks */
    int64_t skipped;             /* files left out while listing (not pictures) */
} sh_image_list;

/* List a folder of class folders: classes are its subfolders sorted by name (byte order),
 * except one named "val" (the held-out set beside them); each class's pictures (.jpg,
 * .jpeg, .png, any case; subfolders too) sorted by path. With classes_of non-NULL the
 * classes are that list's (a held-out set labelled as its training set; a folder it does
 * not have is SHOAL_ERR_FORMAT). Hidden names are passed over; other files and empty class
 * folders are warned about (counted in skipped); no picture at all is SHOAL_ERR_FORMAT. */
shoal_result sh_image_list_folder(const char *dir, const sh_image_list *classes_of, sh_image_list **out);

/* Only the classes of a folder as sh_image_list_folder names them (no files listed): what
 * labels a held-out folder when the training pictures are not needed (shoal test). */
shoal_result sh_image_list_classes(const char *dir, sh_image_list **out);

/* Read a list file: one `PATH LABEL` a line (LABEL an integer >= 0, PATH everything before
 * the last blank, relative ones from the list file's folder); blank lines pass. A malformed
 * line is SHOAL_ERR_FORMAT with file:line; so is a first PATH that does not exist. */
shoal_result sh_image_list_file(const char *path, sh_image_list **out);

/* 1 when path is a regular file whose first non-blank line reads `PATH LABEL` with PATH
 * ending .jpg, .jpeg or .png: then --data PATH is a list of pictures, not text. */
int sh_image_list_sniff(const char *path);

/* The file of entry i as a path (into buf of buf_nbytes); SHOAL_ERR_INVALID when too long. */
shoal_result sh_image_list_path(const sh_image_list *l, int64_t i, char *buf, size_t buf_nbytes);

void sh_image_list_destroy(sh_image_list *l);

#endif
