/* The hooks of the shim's test-only fault injection (shim/testing), so
 * that tests fail each step the shim performs for the controller on a real
 * driver as well as on the fake one: GPUCKPT_TEST_DRIVER_FAULT=fn:n[,fn:n...]
 * in the application's environment makes the n-th call (1-based) of driver
 * function fn that the shim makes on its control thread fail once with
 * CUDA_ERROR_UNKNOWN. The application's own calls are never failed or
 * counted. The controller's test injector reads the same variable for its
 * own driver calls (test/helpers/fault-injector.mjs). */
#ifndef GPUCKPT_TEST_HOOKS_H
#define GPUCKPT_TEST_HOOKS_H

/* Only the test build of the shim (build/test/shim/libgpuckpt.so, which
 * tests name in GPUCKPT_SHIM) defines them: weak, they are NULL in the
 * production build, whose callers then skip them. */

/* Puts a failing stand-in in front of each named entry point of gp_real[];
 * called once, right after the table is resolved and before anything
 * copies entries out of it. */
void gp_test_faults_install(void) __attribute__((weak, visibility("hidden")));

/* Marks the calling thread as the one whose calls are counted (the
 * control server's). */
void gp_test_faults_count_this_thread(void) __attribute__((weak, visibility("hidden")));

#endif
