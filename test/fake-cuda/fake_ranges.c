/* Sorted sets of disjoint address ranges.
 *
 * Every table of the fake (allocations, host registrations, VMM reservations
 * and mappings, live handles) is one of these: a sorted array searched by
 * binary search. Tests create thousands of pool mappings at most, so an
 * array with memmove on insert is plenty and keeps neighbour walks trivial
 * (copies and cuMemUnmap may span several consecutive mappings).
 *
 * No locking here: callers hold fake_lock.
 */
#include "fake_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t range_end(const struct fake_range *r)
{
    return r->start + r->size;
}

size_t fake_rs_lower(const struct fake_rangeset *s, uint64_t addr)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (range_end(&s->v[mid]) > addr)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

long fake_rs_find(const struct fake_rangeset *s, uint64_t addr)
{
    size_t i = fake_rs_lower(s, addr);
    if (i < s->n && s->v[i].start <= addr)
        return (long)i;
    return -ENOENT;
}

long fake_rs_find_start(const struct fake_rangeset *s, uint64_t start)
{
    long i = fake_rs_find(s, start);
    if (i >= 0 && s->v[i].start == start)
        return i;
    return -ENOENT;
}

int fake_rs_overlaps(const struct fake_rangeset *s, uint64_t start, uint64_t size)
{
    size_t i = fake_rs_lower(s, start);
    return i < s->n && s->v[i].start < start + size;
}

int fake_rs_insert(struct fake_rangeset *s, uint64_t start, uint64_t size, void *data)
{
    if (size == 0 || start + size < start)
        return -EINVAL;
    if (fake_rs_overlaps(s, start, size))
        return -EEXIST;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct fake_range *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    size_t i = fake_rs_lower(s, start);
    memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
    s->v[i] = (struct fake_range){ .start = start, .size = size, .data = data };
    s->n++;
    return 0;
}

int fake_rs_cover(const struct fake_rangeset *s, uint64_t start, uint64_t size, int whole,
                  size_t *first, size_t *count)
{
    if (size == 0 || start + size < start)
        return -ENOENT;
    uint64_t end = start + size;
    size_t i = fake_rs_lower(s, start);
    if (i >= s->n || s->v[i].start > start)
        return -ENOENT;
    if (whole && s->v[i].start != start)
        return -ENOENT;
    size_t j = i;
    uint64_t reach = range_end(&s->v[j]);
    while (reach < end) {
        if (j + 1 >= s->n || s->v[j + 1].start != reach)
            return -ENOENT; /* a gap */
        j++;
        reach = range_end(&s->v[j]);
    }
    if (whole && reach != end)
        return -ENOENT;
    *first = i;
    *count = j - i + 1;
    return 0;
}

void fake_rs_remove(struct fake_rangeset *s, size_t i)
{
    if (i >= s->n)
        return;
    memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
    s->n--;
}

int fake_reg_add(struct fake_rangeset *s, const void *p)
{
    return fake_rs_insert(s, (uint64_t)(uintptr_t)p, 1, (void *)p);
}

int fake_reg_has(const struct fake_rangeset *s, const void *p)
{
    return p && fake_rs_find_start(s, (uint64_t)(uintptr_t)p) >= 0;
}

void fake_reg_del(struct fake_rangeset *s, const void *p)
{
    long i = fake_rs_find_start(s, (uint64_t)(uintptr_t)p);
    if (i >= 0)
        fake_rs_remove(s, (size_t)i);
}
