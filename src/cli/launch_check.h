/* launch_check.h — what `shoal launch` settles before its first fork (see launch_check.c).
 * Not here: starting and watching the ranks (launch.h). Proved by tests/cli/test_launch.c. */
#ifndef SH_LAUNCH_CHECK_H
#define SH_LAUNCH_CHECK_H

/* The open-file and process limits hold n more ranks (a soft limit below what is needed is
 * raised up to the hard one). 0, or 1 after one line on stderr naming the limit, what n
 * ranks need and the ulimit to run. tag names the tool ("launch", "train"). */
int sh_launch_check_limits(const char *tag, int n);

/* --output-dir dir: made when missing, then dir/rank-K.out and .err for K = base .. base+n-1
 * created afresh (a file, symbolic or hard link standing there is removed, never written
 * through) into fds[k][0] and fds[k][1] (close-on-exec). 0, or 1 after one line on stderr,
 * with nothing left open. */
int sh_launch_open_outputs(const char *tag, const char *dir, int n, int base, int (*fds)[2]);
/* Close what is still open in fds[0 .. n) and mark it -1. */
void sh_launch_close_outputs(int (*fds)[2], int n);

#endif
