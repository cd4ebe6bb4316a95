/* A CRIU plugin: plain `criu dump` and `criu restore` of a process under the
 * gpuckpt shim carry its GPU pool, in gpuckpt's image format, at the same
 * addresses (docs/ARCHITECTURE.md, "CRIU's own dump and restore").
 *
 * The work is gpuckpt's controller, run as `gpuckpt __criu-plugin STEP PID
 * IMAGES`: at PAUSE_DEVICES (the process still runs) it suspends the
 * process into an image under CRIU's images directory, so the GPU is free
 * and the process maps no device memory when CRIU dumps it; a helper then
 * resumes it if CRIU leaves it (a failed dump, --leave-running), once CRIU
 * has exited. At RESUME_DEVICES_LATE (the restored process still stopped) a
 * helper opens the image and starts loading it, says so, and resumes the
 * process once CRIU releases it. A process not under gpuckpt is not ours:
 * -ENOTSUP, for the next plugin; so is every process when gpuckpt runs CRIU
 * itself. 0 or -errno, as CRIU's hooks want. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criu_abi.h"

#define PLUGIN_NAME "gpuckpt"
/* `gpuckpt __criu-plugin`'s exit status for a process not under gpuckpt. */
#define EXIT_NOT_OURS 10
#define MAX_PAUSED 256
#ifndef GPUCKPT_ROOT
#define GPUCKPT_ROOT "."
#endif

static int stage;
/* gpuckpt runs this CRIU itself (GPUCKPT_RUNS_CRIU, controller/adapters/criu.ts)
 * and has moved the GPU already: a plugin found in CRIU's default directory
 * stands aside rather than suspend a pool gpuckpt suspended. */
static int gpuckpt_runs_criu;
static pid_t criu_pid;
static pid_t paused[MAX_PAUSED];
static int npaused;

__attribute__((format(printf, 2, 3))) static void say(unsigned int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (print_on_level)
        print_on_level(level, "gpuckpt: %s\n", line);
    else
        fprintf(stderr, "gpuckpt: %s\n", line);
}

/* GPUCKPT_BIN; else the package this plugin lies in (PKG/build/criu/);
 * else the one that built it; else gpuckpt on PATH. */
static const char *gpuckpt_bin(void)
{
    static char found[PATH_MAX];
    const char *given = getenv("GPUCKPT_BIN");
    if (given && *given)
        return given;
    Dl_info self;
    if (dladdr((void *)gpuckpt_bin, &self) && self.dli_fname) {
        char *slash;
        snprintf(found, sizeof found, "%s", self.dli_fname);
        for (int up = 0; up < 3 && (slash = strrchr(found, '/')); up++)
            *slash = '\0';
        if (strlen(found) + sizeof "/bin/gpuckpt" <= sizeof found) {
            strcat(found, "/bin/gpuckpt");
            if (access(found, X_OK) == 0)
                return found;
        }
    }
    if (access(GPUCKPT_ROOT "/bin/gpuckpt", X_OK) == 0)
        return GPUCKPT_ROOT "/bin/gpuckpt";
    return "gpuckpt";
}

/* CRIU's images directory as a path (the helpers outlive its open fd). */
static int images_path(char *out, size_t size)
{
    if (!criu_get_image_dir)
        return -ENOSYS;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", criu_get_image_dir());
    ssize_t n = readlink(link, out, size - 1);
    if (n < 0)
        return -errno;
    out[n] = '\0';
    return 0;
}

/* Starts `gpuckpt __criu-plugin step pid IMAGES`; its stdout and stderr
 * come back on *out (one pipe). Detached: a grandchild, init's once its
 * parent is reaped here, so it outlives CRIU. Returns the pid waited for. */
static pid_t start(const char *step, pid_t pid, int *out, int detached)
{
    char images[PATH_MAX];
    int err = images_path(images, sizeof images);
    if (err)
        return err;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -errno;
    pid_t child = fork();
    if (child < 0) {
        int err = -errno;
        close(p[0]);
        close(p[1]);
        return err;
    }
    if (child == 0) {
        if (detached && fork() != 0)
            _exit(0);
        if (detached)
            setsid();
        /* Not CRIU's blocked signals, its fds or its CRIU pid's env. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        char pidtext[16], criu[16];
        snprintf(pidtext, sizeof pidtext, "%d", (int)pid);
        snprintf(criu, sizeof criu, "%d", (int)criu_pid);
        setenv("GPUCKPT_CRIU_PID", criu, 1);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(p[1], 1);
        /* A helper's later words go to its log; the pipe carries "ready". */
        dup2(detached ? null : p[1], 2);
        syscall(SYS_close_range, 3, ~0U, 0);
        const char *bin = gpuckpt_bin();
        execlp(bin, "gpuckpt", "__criu-plugin", step, pidtext, images, (char *)NULL);
        dprintf(1, "cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    *out = p[0];
    return child;
}

/* Reads what fd says until it closes or a line "ready" comes; the last
 * other line goes to why. Returns 1 on "ready". */
static int read_until_ready(int fd, char *why, size_t size)
{
    char buf[4096];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        char *nl;
        while ((nl = strchr(buf, '\n'))) {
            *nl = '\0';
            if (!strcmp(buf, "ready"))
                return 1;
            if (*buf)
                snprintf(why, size, "%.*s", (int)(size - 1), buf);
            have -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, have + 1);
        }
        if (have == sizeof buf - 1)
            have = 0; /* a line longer than the buffer: dropped */
    }
    if (have && *buf)
        snprintf(why, size, "%.*s", (int)(size - 1), buf);
    return 0;
}

/* Runs a step to its end: 0, -ENOTSUP (not ours) or -EIO (why logged). */
static int run_step(const char *step, pid_t pid)
{
    int fd;
    pid_t child = start(step, pid, &fd, 0);
    if (child < 0)
        return (int)child;
    char why[1024] = "";
    read_until_ready(fd, why, sizeof why);
    close(fd);
    int status = 0;
    pid_t got;
    while ((got = waitpid(child, &status, 0)) < 0 && errno == EINTR)
        ;
    if (got < 0)
        return -errno;
    if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_NOT_OURS)
        return -ENOTSUP;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    say(1, "%s of process %d failed: %s", step, (int)pid, why);
    return -EIO;
}

/* Starts a helper that stays after this hook; 0 once it said "ready". */
static int start_helper(const char *step, pid_t pid)
{
    int fd;
    pid_t child = start(step, pid, &fd, 1);
    if (child < 0)
        return (int)child;
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
        ; /* the first fork, gone at once */
    char why[1024] = "";
    int ready = read_until_ready(fd, why, sizeof why);
    close(fd);
    if (ready)
        return 0;
    if (!strncmp(why, "not ours", 8))
        return -ENOTSUP;
    say(1, "%s of process %d failed: %s", step, (int)pid, why);
    return -EIO;
}

static int pause_devices(int pid)
{
    if (gpuckpt_runs_criu || stage != CRIU_STAGE_DUMP)
        return -ENOTSUP; /* a pre-dump leaves the GPU alone */
    int err = run_step("dump", pid);
    if (err)
        return err;
    if (npaused < MAX_PAUSED)
        paused[npaused++] = pid;
    if (add_inventory_plugin && npaused == 1)
        add_inventory_plugin(PLUGIN_NAME); /* a restore without this plugin is refused */
    say(3, "process %d: GPU pool saved in the images directory, GPU free", pid);
    /* Whatever becomes of this dump (failed, --leave-running, CRIU gone
     * past its alarm): the process, if CRIU leaves it, is resumed once
     * CRIU has exited. A process CRIU ends ends its helper too. */
    if (start_helper("resume", pid) != 0)
        say(1, "process %d stays suspended if CRIU leaves it: gpuckpt resume %d", pid, pid);
    return 0;
}

static int is_paused(int pid)
{
    for (int i = 0; i < npaused; i++)
        if (paused[i] == pid)
            return 1;
    return 0;
}

static int checkpoint_devices(int pid)
{
    return is_paused(pid) ? 0 : -ENOTSUP; /* the pool went at the pause */
}

static int resume_devices_late(int pid)
{
    if (gpuckpt_runs_criu)
        return -ENOTSUP;
    int err = start_helper("restore", pid);
    /* CRIU releases it whatever this returns: without its GPU data it would
     * wait for ever in the shim, so it is ended, as gpuckpt restore does. */
    if (err && err != -ENOTSUP)
        kill(pid, SIGKILL);
    return err;
}

static int plugin_init(int s)
{
    stage = s;
    const char *runs = getenv("GPUCKPT_RUNS_CRIU");
    gpuckpt_runs_criu = runs && !strcmp(runs, "1");
    criu_pid = getpid();
    npaused = 0;
    if (s == CRIU_STAGE_RESTORE && check_and_remove_inventory_plugin)
        check_and_remove_inventory_plugin(PLUGIN_NAME, strlen(PLUGIN_NAME));
    return 0;
}

static void plugin_exit(int s, int ret)
{
    npaused = 0;
}

__attribute__((visibility("default"))) struct criu_plugin_desc CR_PLUGIN_DESC = {
    .name = PLUGIN_NAME,
    .init = plugin_init,
    .exit = plugin_exit,
    .version = CRIU_PLUGIN_ABI_VERSION,
    .max_hooks = CRIU_HOOK_COUNT,
    .hooks = {
        [CRIU_HOOK_PAUSE_DEVICES] = pause_devices,
        [CRIU_HOOK_CHECKPOINT_DEVICES] = checkpoint_devices,
        [CRIU_HOOK_RESUME_DEVICES_LATE] = resume_devices_late,
    },
};
