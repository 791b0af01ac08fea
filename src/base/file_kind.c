/* file_kind.c — what a path names, before anything opens it (see file_kind.h).
 * Not here: reading the files (their loaders). Proved by tests/base/test_file_kind.c. */
#include "base/file_kind.h"

#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"

const char *sh_file_kind_words(const char *path)
{
    struct stat st;
    if (!path || stat(path, &st) != 0 || S_ISREG(st.st_mode)) return NULL;
    if (S_ISDIR(st.st_mode)) return "a directory";
    if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(st.st_mode)) return "a character device";
    if (S_ISBLK(st.st_mode)) return "a block device";
    if (S_ISSOCK(st.st_mode)) return "a socket";
    return "neither a file nor a directory";
}

shoal_result sh_file_check_regular(const char *path, const char *what, const char *hint)
{
    const char *kind = sh_file_kind_words(path);
    if (!kind) return SHOAL_OK;
    return SH_FAIL(SHOAL_ERR_INVALID, "%s %s is %s, not a file; give %s", what, path, kind, hint);
}

shoal_result sh_file_check_data(const char *path, const char *what)
{
    const char *kind = sh_file_kind_words(path);
    if (!kind || !strcmp(kind, "a directory")) return SHOAL_OK;
    return SH_FAIL(SHOAL_ERR_INVALID, "%s %s is %s, not a dataset directory or a file; give the folder holding the "
                   "dataset, a list file of pictures or a text file", what, path, kind);
}
