# Test builds (included by the top Makefile). Everything lands in build/test/.
T := $(B)/test
FAKE_SRC := $(wildcard test/fake-cuda/*.c)
# The fake computes the digest kernel's function from the shim's header.
FAKE_HDR := $(wildcard test/fake-cuda/*.h) protocol/block_digest_fn.h
TEST_CFLAGS := $(CFLAGS) $(BASE_CFLAGS)

$(T)/fake/libcuda.so.1: $(FAKE_SRC) $(FAKE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 -o $@ $(FAKE_SRC) -ldl
	ln -sf libcuda.so.1 $(T)/fake/libcuda.so

$(T)/fake-old/libcuda.so.1: $(FAKE_SRC) $(FAKE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -DFAKE_OLD_DRIVER -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 -o $@ $(FAKE_SRC) -ldl

$(T)/fake/libnvidia-ml.so.1: test/fake-nvml/fake_nvml.c
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -fvisibility=hidden -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

# Linked against NCCL by name (libnccl.so.2), as PyTorch is: the shim's
# NCCL wrappers come first.
$(T)/fake/libnccl.so.2: test/fake-nccl/fake_nccl.c
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -fvisibility=hidden -shared -Wl,-soname,libnccl.so.2 -o $@ $< -lrt -ldl
	ln -sf libnccl.so.2 $(T)/fake/libnccl.so

$(T)/fake_selftest: test/fake-cuda/selftest/selftest.c $(T)/fake/libcuda.so.1
	$(CC) $(TEST_CFLAGS) -o $@ $< -L$(T)/fake -lcuda -Wl,-rpath,'$$ORIGIN/fake'

# The shim with its test-only fault injection (shim/testing): what the tests
# that fail driver calls run their applications under (GPUCKPT_SHIM).
$(T)/shim/libgpuckpt.so: $(SHIM_OBJ) $(TESTING_OBJ)
	@mkdir -p $(dir $@)
	$(SHIM_LINK)

$(T)/test_alloc: test/c/test_alloc.c shim/pool/alloc.c shim/pool/alloc.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/pool -o $@ test/c/test_alloc.c shim/pool/alloc.c

$(T)/test_gate: test/c/test_gate.c shim/interpose/gate.c shim/interpose/gate.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/interpose -o $@ test/c/test_gate.c shim/interpose/gate.c

$(T)/test_cut: test/c/test_cut.c shim/collective/cut.c shim/collective/cut.h shim/collective/communicators.c shim/collective/communicators.h shim/interpose/log.c
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/collective -o $@ test/c/test_cut.c shim/collective/cut.c shim/collective/communicators.c shim/interpose/log.c -pthread

$(T)/test_config: test/c/test_config.c shim/interpose/config.c shim/interpose/log.c shim/interpose/config.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/interpose -o $@ test/c/test_config.c shim/interpose/config.c shim/interpose/log.c

$(T)/test_bounce: test/c/test_bounce.c test/c/fake_driver.h shim/control/bounce.c shim/control/bounce.h shim/control/prefault.c shim/control/prefault.h shim/interpose/log.c shim/interpose/config.c shim/interpose/driver_error.c $(T)/fake/libcuda.so.1
	$(CC) $(TEST_CFLAGS) -Ishim/control -Ishim/interpose -o $@ test/c/test_bounce.c shim/control/bounce.c shim/control/prefault.c shim/interpose/log.c shim/interpose/config.c shim/interpose/driver_error.c \
		-ldl -pthread -Wl,-rpath,'$$ORIGIN/fake'

$(T)/test_staging: test/c/test_staging.c test/c/fake_driver.h shim/control/staging.c shim/control/staging.h native/common/page_drop.h shim/control/bounce.c shim/control/prefault.c shim/control/spare_memory.c shim/control/detached.c shim/interpose/log.c shim/interpose/config.c shim/interpose/driver_error.c shim/interpose/gate.c $(T)/fake/libcuda.so.1
	$(CC) $(TEST_CFLAGS) -Ishim/control -Ishim/interpose -o $@ test/c/test_staging.c shim/control/staging.c shim/control/bounce.c shim/control/prefault.c shim/control/spare_memory.c shim/control/detached.c \
		shim/interpose/log.c shim/interpose/config.c shim/interpose/driver_error.c shim/interpose/gate.c -ldl -pthread -Wl,-rpath,'$$ORIGIN/fake'

$(T)/test_spare_memory: test/c/test_spare_memory.c shim/control/spare_memory.c shim/control/spare_memory.h shim/interpose/log.c shim/interpose/config.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/control -Ishim/interpose -o $@ test/c/test_spare_memory.c shim/control/spare_memory.c shim/interpose/log.c -pthread

$(T)/test_prefault: test/c/test_prefault.c shim/control/prefault.c shim/control/prefault.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/control -o $@ test/c/test_prefault.c shim/control/prefault.c -pthread

$(T)/test_driver_zeros: test/c/test_driver_zeros.c shim/control/driver_zeros.c shim/control/driver_zeros.h shim/interpose/driver_mappings.h shim/interpose/proc_maps.c shim/interpose/proc_maps.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/control -Ishim/interpose -o $@ test/c/test_driver_zeros.c shim/control/driver_zeros.c shim/interpose/proc_maps.c -pthread

$(T)/test_driver_mappings: test/c/test_driver_mappings.c shim/interpose/driver_mappings.c shim/interpose/driver_mappings.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/interpose -o $@ test/c/test_driver_mappings.c shim/interpose/driver_mappings.c -ldl -pthread

$(T)/test_device_files: test/c/test_device_files.c shim/interpose/device_files.c shim/interpose/device_files.h shim/interpose/proc_maps.c shim/interpose/proc_maps.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/interpose -o $@ test/c/test_device_files.c shim/interpose/device_files.c shim/interpose/proc_maps.c -pthread

$(T)/test_proxy_wake: test/c/test_proxy_wake.c shim/collective/proxy_wake.c shim/collective/proxy_wake.h shim/interpose/log.c
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Ishim/collective -o $@ test/c/test_proxy_wake.c shim/collective/proxy_wake.c shim/interpose/log.c -ldl -pthread

# Linked against the fake, to make exported GPU memory as a controller does for a migrate.
$(T)/protocol_client: test/c/protocol_client.c protocol/gpuckpt_protocol.h $(T)/fake/libcuda.so.1
	$(CC) $(TEST_CFLAGS) -o $@ $< -L$(T)/fake -lcuda -Wl,-rpath,'$$ORIGIN/fake'

# The CPU test application, linked against the fake (-lcuda) and in the
# cudart-like variant that takes entry points from cuGetProcAddress.
$(T)/pool_app_linked: test/apps/pool_app.c $(T)/fake/libcuda.so.1
	$(CC) $(TEST_CFLAGS) -o $@ $< -L$(T)/fake -lcuda -pthread
$(T)/ddp_app: test/apps/ddp_app.c $(T)/fake/libcuda.so.1 $(T)/fake/libnccl.so.2
	$(CC) $(TEST_CFLAGS) -o $@ $< -L$(T)/fake -lcuda -lnccl -lm -Wl,-rpath,'$$ORIGIN/fake'
$(T)/pool_app_dlopen: test/apps/pool_app.c
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -DUSE_PROC_ADDRESS -o $@ $< -ldl -pthread

# The fake CRIU's plugin host: CRIU's exports to plugins are its own (-rdynamic).
$(T)/plugin_host: test/fake-criu/plugin_host.c native/criu-plugin/criu_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -rdynamic -o $@ $< -ldl

# A `criu restore --restore-sibling` that makes the root a child of its caller.
$(T)/sibling_restore: test/fake-criu/sibling_restore.c
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -o $@ $<

TEST_BINS := $(T)/plugin_host $(T)/sibling_restore $(T)/shim/libgpuckpt.so $(T)/fake/libcuda.so.1 $(T)/fake-old/libcuda.so.1 $(T)/fake/libnvidia-ml.so.1 $(T)/fake_selftest $(T)/test_alloc $(T)/test_gate $(T)/test_cut $(T)/test_config $(T)/test_bounce $(T)/test_staging $(T)/test_spare_memory $(T)/test_prefault $(T)/test_driver_zeros $(T)/test_driver_mappings $(T)/test_device_files $(T)/test_proxy_wake \
	$(T)/protocol_client $(T)/pool_app_linked $(T)/pool_app_dlopen $(T)/fake/libnccl.so.2 $(T)/ddp_app

test-build: all $(TEST_BINS)

# Unit tests in C, and the check that the gated list matches cuda.h.
check: test-build
	node protocol/generate.mjs --check
	node scripts/check-layers.mjs
	node shim/interpose/gen_gated.mjs --check
	bash shim/control/gen_fatbin.sh --check
	$(T)/test_alloc
	$(T)/test_gate
	$(T)/test_cut
	$(T)/test_config
	$(T)/test_bounce
	$(T)/test_staging
	$(T)/test_spare_memory
	$(T)/test_prefault
	$(T)/test_driver_zeros
	$(T)/test_driver_mappings
	$(T)/test_device_files
	$(T)/test_proxy_wake
	$(T)/fake_selftest

.PHONY: test-build
