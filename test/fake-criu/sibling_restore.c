/* A `criu restore` that does only what --restore-sibling does to the tree's
 * root: the root is made a child of this program's parent (clone with
 * CLONE_PARENT), its PID goes to --pidfile, and this program exits 0. The
 * fake CRIU cannot do that (it continues a stopped process); this lets the
 * tests reap a root gpuckpt did not spawn and read its exit status.
 *   sibling_restore --version            "Version: 4.1.1"
 *   sibling_restore restore ... --pidfile F ... --restore-detached --restore-sibling ...
 * The root waits SIBLING_AFTER_MS (default 300), then ends as SIBLING_END
 * says: "exit N" or "signal N". SIBLING_FAIL=1: the restore fails after the
 * root was made (exit 1, the root left to its caller); SIBLING_PID_COPY:
 * a file that gets the root's PID too. Without both flags
 * it refuses, as CRIU refuses --restore-sibling without --restore-detached. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void end_as_told(void)
{
    const char *after = getenv("SIBLING_AFTER_MS");
    usleep((useconds_t)(after ? atoi(after) : 300) * 1000u);
    const char *how = getenv("SIBLING_END");
    int n = 0;
    if (how && sscanf(how, "signal %d", &n) == 1) {
        signal(n, SIG_DFL);
        raise(n);
    }
    _exit(how && sscanf(how, "exit %d", &n) == 1 ? n : 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        puts("Version: 4.1.1");
        return 0;
    }
    const char *pidfile = NULL;
    int detached = 0, sibling = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pidfile") && i + 1 < argc)
            pidfile = argv[++i];
        detached |= !strcmp(argv[i], "--restore-detached");
        sibling |= !strcmp(argv[i], "--restore-sibling");
    }
    if (argc < 2 || strcmp(argv[1], "restore") || !pidfile || !detached || !sibling) {
        fprintf(stderr, "sibling_restore: restore --pidfile F --restore-detached --restore-sibling expected\n");
        return 1;
    }
    long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
    if (pid < 0)
        return 1;
    if (pid == 0)
        end_as_told();
    FILE *f = fopen(pidfile, "w");
    if (!f || fprintf(f, "%ld\n", pid) < 0 || fclose(f))
        return 1;
    const char *copy = getenv("SIBLING_PID_COPY"); /* the pidfile goes with the restore */
    if (copy && (!(f = fopen(copy, "w")) || fprintf(f, "%ld\n", pid) < 0 || fclose(f)))
        return 1;
    return getenv("SIBLING_FAIL") ? 1 : 0;
}
