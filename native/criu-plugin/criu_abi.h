/* What a CRIU 4.1 plugin must match of the criu binary that loads it
 * (criu/include/criu-plugin.h there): the descriptor CRIU looks up by the
 * name CR_PLUGIN_DESC, the numbers of the hooks, and the functions the criu
 * binary exports to plugins (-rdynamic). Declared weak: a criu without one
 * of them still loads the plugin, which then does without. */
#ifndef GPUCKPT_CRIU_ABI_H
#define GPUCKPT_CRIU_ABI_H

#include <stdbool.h>
#include <stddef.h>

enum criu_hook {
    CRIU_HOOK_HANDLE_DEVICE_VMA = 7,
    CRIU_HOOK_UPDATE_VMA_MAP = 8,
    CRIU_HOOK_RESUME_DEVICES_LATE = 9,
    CRIU_HOOK_PAUSE_DEVICES = 10,
    CRIU_HOOK_CHECKPOINT_DEVICES = 11,
    /* CRIU 4.1 refuses a plugin that declares more hooks than it knows. */
    CRIU_HOOK_COUNT = 12,
};

enum criu_stage { CRIU_STAGE_DUMP = 0, CRIU_STAGE_PRE_DUMP = 1, CRIU_STAGE_RESTORE = 2 };

/* 0.2.0: the descriptor with max_hooks and hooks[] */
#define CRIU_PLUGIN_ABI_VERSION ((0 << 16) + (2 << 8) + 0)

struct criu_plugin_desc {
    const char *name;
    int (*init)(int stage);
    void (*exit)(int stage, int ret);
    unsigned int version;
    unsigned int max_hooks;
    void *hooks[CRIU_HOOK_COUNT];
};

/* The images directory, open (valid in the hooks, closed before a restore's exit). */
extern int criu_get_image_dir(void) __attribute__((weak));
/* The image's inventory names the plugins a restore needs (prefix match). */
extern void add_inventory_plugin(const char *name) __attribute__((weak));
extern bool check_and_remove_inventory_plugin(const char *name, size_t n) __attribute__((weak));
/* CRIU's log: level 1 error, 2 warning, 3 info. */
extern void print_on_level(unsigned int level, const char *fmt, ...) __attribute__((weak, format(printf, 2, 3)));

#endif
