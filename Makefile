# Builds the shim (build/libgpuckpt.so), the driver keeper, and, for `make check`, the C unit
# tests, the test build of the shim, the fake libcuda and the CPU test programs under build/test/.
# Needs only the CUDA toolkit headers (CUDA_HOME), never a GPU or libcuda.
CUDA_HOME ?= /usr/local/cuda
CC ?= cc
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Werror -Wno-unused-parameter
BASE_CFLAGS := -std=gnu11 -pthread -fPIC $(WARN) -I$(CUDA_HOME)/include -Iprotocol -Inative/common
SHIM_CFLAGS := $(BASE_CFLAGS) -fvisibility=hidden
B := build

# The shim's four parts (shim/README.md); shim/testing only in the test build.
SHIM_SRC := $(wildcard shim/interpose/*.c shim/control/*.c shim/collective/*.c shim/pool/*.c)
SHIM_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(SHIM_SRC))
SHIM_HDR := $(wildcard shim/*/*.h protocol/*.h) native/common/page_drop.h native/common/address_reserve.h
TESTING_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(wildcard shim/testing/*.c))

all: $(B)/libgpuckpt.so $(B)/gpuckpt-driver-keeper $(B)/gpuckpt-snapshot-holder $(B)/gpuckpt-criu-compat.so $(B)/criu/gpuckpt_criu.so

$(B)/obj/%.o: %.c $(SHIM_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SHIM_CFLAGS) -c $< -o $@

# -Bsymbolic-functions: the shim's own references to its exported wrappers
# bind to itself; --no-undefined: every GP_ROUTED entry must be defined.
SHIM_LINK = $(CC) -shared -o $@ $^ -pthread -ldl -Wl,--no-undefined -Wl,-Bsymbolic-functions -Wl,-soname,libgpuckpt.so
$(B)/libgpuckpt.so: $(SHIM_OBJ)
	$(SHIM_LINK)

# Started by `gpuckpt suspend` (native/keeper/driver_keeper.c says why).
$(B)/gpuckpt-driver-keeper: native/keeper/driver_keeper.c native/common/proc_stat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -std=gnu11 $(WARN) -o $@ $< -ldl

# Keeps GPU-held snapshots (native/holder/snapshot_holder.c says why).
$(B)/gpuckpt-snapshot-holder: native/holder/snapshot_holder.c native/holder/snapshots.c native/holder/snapshots.h native/holder/messages.gen.h native/common/proc_stat.h protocol/gpuckpt_protocol.h protocol/gpck_wire.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -std=gnu11 $(WARN) -Iprotocol -o $@ native/holder/snapshot_holder.c native/holder/snapshots.c

# Preloaded into CRIU older than 4.2 on Linux 6.16+ (native/criu-compat/criu_compat.c says why).
$(B)/gpuckpt-criu-compat.so: native/criu-compat/criu_compat.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -shared -o $@ $< -ldl

# CRIU's plugin (native/criu-plugin/): alone in its directory, for criu -L.
$(B)/criu/gpuckpt_criu.so: native/criu-plugin/gpuckpt_criu_plugin.c native/criu-plugin/criu_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -std=gnu11 $(WARN) -fPIC -fvisibility=hidden -shared -DGPUCKPT_ROOT='"$(CURDIR)"' -o $@ $<

# The test builds: in a checkout, not in the packed package.
-include test/test.mk

clean:
	rm -rf $(B)

.PHONY: all clean check

# native/src/vulkan_min.h against the Vulkan SDK's headers (where they are installed).
check-vulkan-layout:
	$(CXX) -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I$(VULKAN_INCLUDE) -Inative/src test/c/vulkan_layout.cc

.PHONY: check-vulkan-layout
