/* A tiny test harness for the C unit tests: CHECK records the first failure
 * of a test; each test prints "ok NAME" or "FAIL NAME: file:line: expr", and
 * the run ends with "N passed, N failed". */
#ifndef GPUCKPT_TEST_HARNESS_H
#define GPUCKPT_TEST_HARNESS_H

#include <stdio.h>

static const char *harness_failure;
static char harness_buf[512];
static int harness_passed, harness_failed;

#define CHECK(expr)                                                                                    \
    do {                                                                                               \
        if (!(expr) && !harness_failure) {                                                             \
            snprintf(harness_buf, sizeof(harness_buf), "%s:%d: %s", __FILE__, __LINE__, #expr);        \
            harness_failure = harness_buf;                                                             \
        }                                                                                              \
    } while (0)

#define RUN(test)                                                                                      \
    do {                                                                                               \
        harness_failure = NULL;                                                                        \
        test();                                                                                        \
        if (harness_failure) {                                                                         \
            printf("FAIL %s: %s\n", #test, harness_failure);                                           \
            harness_failed++;                                                                          \
        } else {                                                                                       \
            printf("ok %s\n", #test);                                                                  \
            harness_passed++;                                                                          \
        }                                                                                              \
    } while (0)

#define HARNESS_END()                                                                                  \
    (printf("%d passed, %d failed\n", harness_passed, harness_failed), harness_failed ? 1 : 0)

#endif
