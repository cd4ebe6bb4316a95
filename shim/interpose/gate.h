/* The gate every driver call the application makes passes through.
 *
 * Entering and leaving cost a few plain loads and stores on the calling
 * thread's own slot (gate.c says why that is enough); closing makes new
 * calls wait, then waits for the calls in flight to return. Only the
 * control thread closes and opens it; it reaches the driver through the
 * real entry points, never through the gate. */
#ifndef GPUCKPT_GATE_H
#define GPUCKPT_GATE_H

#include <stdbool.h>
#include <stdint.h>

void gp_gate_enter(void);
void gp_gate_exit(void);
/* Closes the gate and waits up to timeout_ms for calls in flight to return.
 * -ETIMEDOUT: some call did not return (a thread blocked in the driver on
 * work that needs another, now gated, thread); the gate is reopened. */
int gp_gate_close(uint32_t timeout_ms, uint64_t *drain_ns);
/* Reopens; returns how long it was closed, in ns. */
uint64_t gp_gate_open(void);
bool gp_gate_is_closed(void);
/* The calling thread passes a closed gate while on: the framework hook's
 * thread, reading its allocator inside a pause (control/framework_hook.c),
 * which makes no call that needs the GPU still. Returns its slot, for
 * gp_gate_exempt_end (NULL where it cannot be exempt). */
void *gp_gate_exempt_self(bool on);
/* Ends the exemption of a slot gp_gate_exempt_self returned, from any thread. */
void gp_gate_exempt_end(void *slot);
uint64_t gp_gate_calls(void);
/* After fork in a child of a CUDA process: the driver is unusable there and
 * no controller can reach it, so calls pass straight through. */
void gp_gate_bypass(void);
uint64_t gp_now_ns(void);

#endif
