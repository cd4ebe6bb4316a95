// The controller's fault injector for tests, loaded into the CLI with
// NODE_OPTIONS=--import (FAULTS_CLI in e2e.ts; test/gpu does the same):
// - GPUCKPT_TEST_FAULT=step[,step...] fails each named step of the
//   controller's own (controller/base/faults.ts lists them);
// - GPUCKPT_TEST_DRIVER_FAULT=fn:n[,fn:n...] makes the n-th call of the
//   driver's process checkpoint function fn (cuCheckpointProcessLock, ...)
//   return CUDA_ERROR_UNKNOWN. The test build of the shim reads the same
//   variable for the driver calls it makes (shim/testing/test_faults.h).
import { installFaultInjector } from '../../dist/controller/base/faults.js';

const listed = (name) => (process.env[name] ?? '').split(',').filter(Boolean);
const driverCalls = new Map();

installFaultInjector({
  failStep: (step) => (listed('GPUCKPT_TEST_FAULT').includes(step) ? 'GPUCKPT_TEST_FAULT' : undefined),
  failDriverCall(fn) {
    const nth = (driverCalls.get(fn) ?? 0) + 1;
    driverCalls.set(fn, nth);
    return listed('GPUCKPT_TEST_DRIVER_FAULT').includes(`${fn}:${nth}`);
  },
});
