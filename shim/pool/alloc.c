/* Address-range allocator: see alloc.h for the contract. One treap keyed by
 * start address holds every extent, free and used, each node with the
 * largest request its subtree can take per alignment class, so first fit
 * is O(log n); docs/ARCHITECTURE.md says why this shape. */
#include "alloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Alignment classes quantum << 0 .. quantum << (ALIGN_CLASSES - 1). Eight
 * covers the usual spread (e.g. 256 B .. 32 KiB at a 256 B quantum) at 64
 * bytes per node. */
enum { ALIGN_CLASSES = 8 };

struct extent_node {
    uint64_t addr;
    uint64_t size;
    uint64_t priority;  /* max-heap order; a hash of addr */
    struct extent_node *left;
    struct extent_node *right;
    /* fit[k]: the largest size placeable at alignment quantum << k in one
     * free extent of this subtree; 0 if none. fit[0] is the largest free
     * extent, since every extent starts quantum-aligned. */
    uint64_t fit[ALIGN_CLASSES];
    bool used;
    uint8_t quantum_shift; /* log2(quantum), so a node can compute its own fit */
};

struct gp_alloc {
    struct extent_node *root; /* never NULL: the extents tile the range */
    uint64_t base;
    uint64_t end;             /* base + size; cannot wrap (checked at create) */
    uint64_t quantum;
    uint64_t bytes_in_use;
    uint64_t count;
    uint64_t free_extents;
    uint64_t high_water_end;  /* highest end ever placed; base if none */
};

/* ---- small arithmetic helpers ------------------------------------------ */

static bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

static unsigned log2_of_power_of_two(uint64_t x)
{
    unsigned shift = 0;
    while (x >>= 1)
        shift++;
    return shift;
}

/* splitmix64 finalizer: a bijection, so distinct addresses never tie. */
static uint64_t priority_of(uint64_t addr)
{
    uint64_t z = addr + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Lowest address >= start aligned to align that leaves size bytes before
 * limit. Written so no intermediate can wrap, whatever align and size are. */
static bool aligned_fit(uint64_t start, uint64_t limit, uint64_t size, uint64_t align,
                        uint64_t *addr_out)
{
    uint64_t mask = align - 1;
    if (start > UINT64_MAX - mask)
        return false;
    uint64_t addr = (start + mask) & ~mask;
    if (addr >= limit || limit - addr < size)
        return false;
    *addr_out = addr;
    return true;
}

/* ---- treap primitives -------------------------------------------------- */

/* Raises fit[] to what this node's own extent can take, if it is free. The
 * aligned start only moves up as the class grows, so the first class with
 * no aligned start inside the extent ends the loop. */
static void fold_own_fit(struct extent_node *n)
{
    uint64_t end = n->addr + n->size;
    for (unsigned k = 0; k < ALIGN_CLASSES && n->quantum_shift + k < 64; k++) {
        uint64_t addr;
        /* Asking for one byte finds the aligned start, if there is one. */
        if (!aligned_fit(n->addr, end, 1, 1ull << (n->quantum_shift + k), &addr))
            break;
        n->fit[k] = max_u64(n->fit[k], end - addr);
    }
}

static void recompute(struct extent_node *n)
{
    static const uint64_t no_fit[ALIGN_CLASSES];
    const uint64_t *left = n->left ? n->left->fit : no_fit;
    const uint64_t *right = n->right ? n->right->fit : no_fit;
    for (unsigned k = 0; k < ALIGN_CLASSES; k++)
        n->fit[k] = max_u64(left[k], right[k]);
    if (!n->used)
        fold_own_fit(n);
}

static struct extent_node *node_new(const struct gp_alloc *a, uint64_t addr, uint64_t size,
                                    bool used)
{
    struct extent_node *n = malloc(sizeof(*n));
    if (!n)
        return NULL;
    n->addr = addr;
    n->size = size;
    n->used = used;
    n->quantum_shift = (uint8_t)log2_of_power_of_two(a->quantum);
    n->priority = priority_of(addr);
    n->left = n->right = NULL;
    recompute(n);
    return n;
}

static struct extent_node *rotate_right(struct extent_node *t)
{
    struct extent_node *l = t->left;
    t->left = l->right;
    l->right = t;
    recompute(t);
    recompute(l);
    return l;
}

static struct extent_node *rotate_left(struct extent_node *t)
{
    struct extent_node *r = t->right;
    t->right = r->left;
    r->left = t;
    recompute(t);
    recompute(r);
    return r;
}

static struct extent_node *tree_insert(struct extent_node *t, struct extent_node *n)
{
    if (!t)
        return n;
    if (n->addr < t->addr) {
        t->left = tree_insert(t->left, n);
        if (t->left->priority > t->priority)
            return rotate_right(t);
    } else {
        t->right = tree_insert(t->right, n);
        if (t->right->priority > t->priority)
            return rotate_left(t);
    }
    recompute(t);
    return t;
}

/* Joins two treaps where every key of l is below every key of r. */
static struct extent_node *tree_join(struct extent_node *l, struct extent_node *r)
{
    if (!l)
        return r;
    if (!r)
        return l;
    if (l->priority > r->priority) {
        l->right = tree_join(l->right, r);
        recompute(l);
        return l;
    }
    r->left = tree_join(l, r->left);
    recompute(r);
    return r;
}

/* Unlinks the node keyed addr (which must exist); the caller frees it. */
static struct extent_node *tree_unlink(struct extent_node *t, uint64_t addr)
{
    if (addr == t->addr)
        return tree_join(t->left, t->right);
    if (addr < t->addr)
        t->left = tree_unlink(t->left, addr);
    else
        t->right = tree_unlink(t->right, addr);
    recompute(t);
    return t;
}

/* After a node's size or used flag changed in place, fit[] is stale on the
 * path from the root down to it, and only there. */
static void refresh_path(struct extent_node *t, uint64_t addr)
{
    if (!t)
        return;
    if (addr < t->addr)
        refresh_path(t->left, addr);
    else if (addr > t->addr)
        refresh_path(t->right, addr);
    recompute(t);
}

static struct extent_node *tree_lookup(struct extent_node *t, uint64_t addr)
{
    while (t && t->addr != addr)
        t = addr < t->addr ? t->left : t->right;
    return t;
}

/* Node with the greatest key <= addr, or NULL. */
static struct extent_node *tree_floor(struct extent_node *t, uint64_t addr)
{
    struct extent_node *best = NULL;
    while (t) {
        if (t->addr <= addr) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return best;
}

/* Node with the greatest key < addr, or NULL. */
static struct extent_node *tree_predecessor(struct extent_node *t, uint64_t addr)
{
    return addr == 0 ? NULL : tree_floor(t, addr - 1);
}

/* Leftmost free extent with an aligned fit for size; its placement goes to
 * *addr_out. Subtrees whose fit[align_class] is too small are never entered.
 * For alignments up to the last class the bound is exact, so the walk goes
 * straight down; above it, the exact check at a node may still fail. */
static struct extent_node *first_fit(struct extent_node *t, uint64_t size, uint64_t align,
                                     unsigned align_class, uint64_t *addr_out)
{
    if (!t || t->fit[align_class] < size)
        return NULL;
    struct extent_node *found = first_fit(t->left, size, align, align_class, addr_out);
    if (found)
        return found;
    if (!t->used && aligned_fit(t->addr, t->addr + t->size, size, align, addr_out))
        return t;
    return first_fit(t->right, size, align, align_class, addr_out);
}

/* The class whose fit[] bounds a request at align (>= quantum): exact up to
 * the last class, the last class beyond (an alignment never fits more). */
static unsigned align_class_of(const struct gp_alloc *a, uint64_t align)
{
    unsigned k = log2_of_power_of_two(align) - log2_of_power_of_two(a->quantum);
    return k < ALIGN_CLASSES ? k : ALIGN_CLASSES - 1;
}

static void tree_free(struct extent_node *t)
{
    while (t) {
        tree_free(t->left);
        struct extent_node *right = t->right;
        free(t);
        t = right; /* loop on the right spine: half the recursion */
    }
}

/* ---- public API -------------------------------------------------------- */

int gp_alloc_create(uint64_t base, uint64_t size, uint64_t quantum, struct gp_alloc **out)
{
    if (!out || !is_power_of_two(quantum) || size == 0)
        return -EINVAL;
    if (base % quantum != 0 || size % quantum != 0 || size > UINT64_MAX - base)
        return -EINVAL;

    struct gp_alloc *a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->base = base;
    a->end = base + size;
    a->quantum = quantum;
    a->root = node_new(a, base, size, false);
    if (!a->root) {
        free(a);
        return -ENOMEM;
    }
    a->free_extents = 1;
    a->high_water_end = base;
    *out = a;
    return 0;
}

void gp_alloc_destroy(struct gp_alloc *a)
{
    if (!a)
        return;
    tree_free(a->root);
    free(a);
}

/* Rounds size up to the quantum; false when that would wrap (such a request
 * could never fit, whatever the range). */
static bool round_to_quantum(uint64_t size, uint64_t quantum, uint64_t *rounded)
{
    uint64_t mask = quantum - 1;
    if (size > UINT64_MAX - mask)
        return false;
    *rounded = (size + mask) & ~mask;
    return true;
}

int gp_alloc_get(struct gp_alloc *a, uint64_t size, uint64_t align, uint64_t *addr_out)
{
    if (!a || !addr_out || size == 0 || !is_power_of_two(align))
        return -EINVAL;
    /* An alignment finer than the quantum is already implied by it. */
    align = max_u64(align, a->quantum);

    uint64_t placed_size;
    if (!round_to_quantum(size, a->quantum, &placed_size) || placed_size > a->end - a->base)
        return -ENOMEM;

    uint64_t addr;
    struct extent_node *hole =
        first_fit(a->root, placed_size, align, align_class_of(a, align), &addr);
    if (!hole)
        return -ENOMEM;

    uint64_t hole_end = hole->addr + hole->size;
    uint64_t placed_end = addr + placed_size;
    bool has_lead = addr > hole->addr;   /* free gap left below, from alignment */
    bool has_tail = placed_end < hole_end;

    /* Get every node first so that running out of memory changes nothing. */
    struct extent_node *used_node = NULL, *tail_node = NULL;
    if (has_lead && !(used_node = node_new(a, addr, placed_size, true)))
        return -ENOMEM;
    if (has_tail && !(tail_node = node_new(a, placed_end, hole_end - placed_end, false))) {
        free(used_node);
        return -ENOMEM;
    }

    if (has_lead) {
        hole->size = addr - hole->addr; /* the hole node keeps the lead gap */
        refresh_path(a->root, hole->addr);
        a->root = tree_insert(a->root, used_node);
    } else {
        hole->size = placed_size;       /* the hole node itself becomes used */
        hole->used = true;
        refresh_path(a->root, hole->addr);
    }
    if (has_tail)
        a->root = tree_insert(a->root, tail_node);

    /* One free extent was consumed; lead and tail each leave one behind. */
    a->free_extents = a->free_extents - 1 + has_lead + has_tail;
    a->bytes_in_use += placed_size;
    a->count++;
    a->high_water_end = max_u64(a->high_water_end, placed_end);
    *addr_out = addr;
    return 0;
}

/* Unlinks and frees a node whose extent a neighbour has absorbed. */
static void drop_node(struct gp_alloc *a, struct extent_node *n)
{
    a->root = tree_unlink(a->root, n->addr);
    free(n);
}

int gp_alloc_put(struct gp_alloc *a, uint64_t addr, uint64_t *size_out)
{
    if (!a)
        return -EINVAL;
    struct extent_node *n = tree_lookup(a->root, addr);
    if (!n || !n->used)
        return -ENOENT;

    uint64_t placed_size = n->size;
    uint64_t placed_end = addr + placed_size;
    struct extent_node *prev = tree_predecessor(a->root, addr);
    struct extent_node *next = placed_end < a->end ? tree_lookup(a->root, placed_end) : NULL;
    bool merge_prev = prev && !prev->used;
    bool merge_next = next && !next->used;

    /* The merged free extent lives on in its lowest node, so keys never
     * move; the nodes it swallowed go. fit[] is made whole by one refresh
     * at the end: only the survivor's ancestors can depend on its change. */
    struct extent_node *survivor = merge_prev ? prev : n;
    uint64_t merged_end = merge_next ? next->addr + next->size : placed_end;
    if (merge_next)
        drop_node(a, next);
    if (merge_prev)
        drop_node(a, n);
    survivor->used = false;
    survivor->size = merged_end - survivor->addr;
    refresh_path(a->root, survivor->addr);

    /* One new free extent, minus one per neighbour it merged with. */
    a->free_extents = a->free_extents + 1 - merge_prev - merge_next;
    a->bytes_in_use -= placed_size;
    a->count--;
    if (size_out)
        *size_out = placed_size;
    return 0;
}

static void fill_extent(const struct extent_node *n, struct gp_extent *out)
{
    out->addr = n->addr;
    out->size = n->size;
}

int gp_alloc_find(const struct gp_alloc *a, uint64_t addr, struct gp_extent *out)
{
    if (!a || !out)
        return -EINVAL;
    if (addr < a->base || addr >= a->end)
        return -ENOENT;
    /* The extents tile the range, so the floor extent contains addr. */
    const struct extent_node *n = tree_floor(a->root, addr);
    if (!n || !n->used)
        return -ENOENT;
    fill_extent(n, out);
    return 0;
}

typedef int (*extent_visitor)(const struct gp_extent *, void *);

/* In-order walk of the used extents overlapping [lo, hi). A subtree is
 * skipped when none of its extents can overlap: everything left of t ends by
 * t->addr, everything right of t starts at or after t's end. */
static int walk_range(const struct extent_node *t, uint64_t lo, uint64_t hi, extent_visitor fn,
                      void *arg)
{
    while (t) {
        uint64_t t_end = t->addr + t->size;
        if (t->addr > lo) {
            int rc = walk_range(t->left, lo, hi, fn, arg);
            if (rc)
                return rc;
        }
        if (t->used && t->addr < hi && t_end > lo) {
            struct gp_extent e;
            fill_extent(t, &e);
            int rc = fn(&e, arg);
            if (rc)
                return rc;
        }
        if (t_end >= hi)
            return 0;
        t = t->right; /* loop on the right spine: half the recursion */
    }
    return 0;
}

int gp_alloc_foreach(const struct gp_alloc *a, extent_visitor fn, void *arg)
{
    if (!a || !fn)
        return -EINVAL;
    return walk_range(a->root, a->base, a->end, fn, arg);
}

int gp_alloc_foreach_in(const struct gp_alloc *a, uint64_t lo, uint64_t hi, extent_visitor fn,
                        void *arg)
{
    if (!a || !fn)
        return -EINVAL;
    if (lo >= hi)
        return 0; /* an empty range overlaps nothing */
    return walk_range(a->root, lo, hi, fn, arg);
}

void gp_alloc_stats(const struct gp_alloc *a, struct gp_alloc_stats *out)
{
    if (!out)
        return;
    if (!a) {
        *out = (struct gp_alloc_stats){0};
        return;
    }
    out->bytes_in_use = a->bytes_in_use;
    out->count = a->count;
    out->largest_free = a->root->fit[0];
    out->free_extents = a->free_extents;
    out->high_water = a->high_water_end - a->base;
}
