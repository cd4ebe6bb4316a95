/* The fake CRIU's plugin host (test/fake-criu/criu -L DIR): loads every .so
 * of DIR as CRIU 4.1 does and calls their hooks in CRIU's order, around
 * what the fake does instead of a dump or a restore:
 *   plugin_host dump DIR IMAGES [--leave-running] PID...
 *     init(DUMP); PAUSE_DEVICES each PID (running); SIGSTOP them (CRIU's
 *     freeze); CHECKPOINT_DEVICES each; exit(DUMP, ret); SIGCONT them when
 *     the dump failed (FAKE_CRIU_FAIL=dump-late fails it then) or
 *     --leave-running
 *   plugin_host restore DIR IMAGES PID...
 *     init(RESTORE); RESUME_DEVICES_LATE each PID (still stopped); SIGCONT
 *     them (CRIU's release); exit(RESTORE, 0); refused, as CRIU does, when
 *     the inventory names a plugin no loaded one took
 * The functions CRIU exports to plugins are this program's (-rdynamic):
 * the inventory is IMAGES/fake-criu-plugins, one name a line. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../native/criu-plugin/criu_abi.h"

static int images_fd = -1;
static char inventory[4096];
static char taken[16][64];
static int ntaken;

int criu_get_image_dir(void)
{
    return images_fd;
}

void add_inventory_plugin(const char *name)
{
    int fd = openat(images_fd, "fake-criu-plugins", O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dprintf(fd, "%s\n", name);
        close(fd);
    }
}

bool check_and_remove_inventory_plugin(const char *name, size_t n)
{
    if (ntaken < 16)
        snprintf(taken[ntaken++], sizeof taken[0], "%.*s", (int)n, name);
    return true;
}

void print_on_level(unsigned int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

static struct criu_plugin_desc *plugins[16];
static int nplugins;

static int load(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "Error (criu/plugin.c): can't open %s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]->d_name);
        if (len > 3 && !strcmp(names[i]->d_name + len - 3, ".so") && nplugins < 16) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            struct criu_plugin_desc *d = h ? dlsym(h, "CR_PLUGIN_DESC") : NULL;
            if (!d || d->version > CRIU_PLUGIN_ABI_VERSION || d->max_hooks > CRIU_HOOK_COUNT) {
                fprintf(stderr, "Error (criu/plugin.c): bad plugin %s: %s\n", path, h ? "no descriptor" : dlerror());
                return -1;
            }
            plugins[nplugins++] = d;
        }
        free(names[i]);
    }
    free(names);
    return 0;
}

/* The first answer other than -ENOTSUP, as CRIU takes it. */
static int run_hook(int hook, int pid)
{
    for (int i = 0; i < nplugins; i++) {
        int (*fn)(int) = (int (*)(int))plugins[i]->hooks[hook];
        if (!fn)
            continue;
        int rc = fn(pid);
        if (rc != -ENOTSUP)
            return rc;
    }
    return -ENOTSUP;
}

static void signal_all(int sig, int argc, char **argv, int first)
{
    for (int i = first; i < argc; i++)
        kill(atoi(argv[i]), sig);
}

int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    bool dump = !strcmp(argv[1], "dump");
    images_fd = open(argv[3], O_RDONLY | O_DIRECTORY);
    if (images_fd < 0 || load(argv[2]) != 0)
        return 1;
    int first = 4;
    bool leave = dump && !strcmp(argv[4], "--leave-running");
    if (leave)
        first++;
    int stage = dump ? CRIU_STAGE_DUMP : CRIU_STAGE_RESTORE;
    for (int i = 0; i < nplugins; i++)
        if (plugins[i]->init && plugins[i]->init(stage) != 0)
            return 1;
    int ret = 0;
    if (dump) {
        for (int i = first; i < argc && !ret; i++) {
            int rc = run_hook(CRIU_HOOK_PAUSE_DEVICES, atoi(argv[i]));
            if (rc < 0 && rc != -ENOTSUP) {
                fprintf(stderr, "Error (criu/seize.c): pausing devices of %s failed\n", argv[i]);
                ret = -1;
            }
        }
        signal_all(SIGSTOP, argc, argv, first);
        for (int i = first; i < argc && !ret; i++) {
            int rc = run_hook(CRIU_HOOK_CHECKPOINT_DEVICES, atoi(argv[i]));
            if (rc < 0 && rc != -ENOTSUP)
                ret = -1;
        }
        /* FAKE_CRIU_FAIL=dump-late: the dump fails after the devices were saved. */
        const char *fail = getenv("FAKE_CRIU_FAIL");
        if (!ret && fail && !strcmp(fail, "dump-late")) {
            fprintf(stderr, "Error (criu/cr-dump.c:1700): fake-criu: injected failure after the devices were saved\n");
            ret = -1;
        }
        for (int i = 0; i < nplugins; i++)
            if (plugins[i]->exit)
                plugins[i]->exit(stage, ret);
        if (ret || leave)
            signal_all(SIGCONT, argc, argv, first);
        return ret ? 1 : 0;
    }
    int fd = openat(images_fd, "fake-criu-plugins", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, inventory, sizeof inventory - 1) : 0;
    if (fd >= 0)
        close(fd);
    inventory[n > 0 ? n : 0] = '\0';
    for (char *line = strtok(inventory, "\n"); line; line = strtok(NULL, "\n")) {
        bool found = false;
        for (int i = 0; i < ntaken; i++)
            found |= !strncmp(line, taken[i], strlen(taken[i]));
        if (!found) {
            fprintf(stderr, "Error (criu/image.c): Missing required plugin: %s\n", line);
            return 1;
        }
    }
    for (int i = first; i < argc; i++)
        run_hook(CRIU_HOOK_RESUME_DEVICES_LATE, atoi(argv[i]));
    signal_all(SIGCONT, argc, argv, first);
    for (int i = 0; i < nplugins; i++)
        if (plugins[i]->exit)
            plugins[i]->exit(stage, 0);
    return 0;
}
