/* test_file_kind.c — proves src/base/file_kind.c: a regular file and a missing path pass, a
 * directory, a FIFO and a device are named in words, and a FIFO is looked at without being
 * opened (the check returns while nothing writes to it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_kind.h"
#include "base/util.h"
#include "check.h"

static void kinds_are_named(void)
{
    char dir[] = "/tmp/shoal-file-kind-XXXXXX", fifo[64], file[64], missing[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(file, sizeof file, "%s/file", dir);
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    CHECK(sh_file_kind_words(file) == NULL && sh_file_kind_words(missing) == NULL && sh_file_kind_words(NULL) == NULL,
          "a file, a missing path and NULL are not refused");
    CHECK(sh_file_check_regular(file, "--resume", "a file") == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(sh_file_check_regular(missing, "--resume", "a file") == SHOAL_OK, "%s", shoal_last_error_message());
    uint64_t t0 = sh_now_ns();
    CHECK(sh_file_check_regular(fifo, "--resume", "the checkpoint file") == SHOAL_ERR_INVALID, "a FIFO passed");
    CHECK((sh_now_ns() - t0) < 1000000000ull, "looking at a FIFO blocked");
    char want[160];
    snprintf(want, sizeof want, "--resume %s is a FIFO (named pipe), not a file; give the checkpoint file", fifo);
    CHECK(strstr(shoal_last_error_message(), want) != NULL, "%s", shoal_last_error_message());
    CHECK(sh_file_check_regular(dir, "--weights", "a file") == SHOAL_ERR_INVALID &&
              strstr(shoal_last_error_message(), "is a directory, not a file"),
          "%s", shoal_last_error_message());
    CHECK(!strcmp(sh_file_kind_words("/dev/null"), "a character device"), "/dev/null: %s",
          sh_file_kind_words("/dev/null"));
    unlink(fifo);
    unlink(file);
    rmdir(dir);
}

int main(void)
{
    check_begin("test_file_kind", 30);
    RUN(kinds_are_named);
    return check_end();
}
