/* Unit tests of the shim's settings parser. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "harness.h"

static void test_sizes(void)
{
    uint64_t v;
    CHECK(gp_parse_size("123", &v) == 0 && v == 123);
    CHECK(gp_parse_size("0x600000000000", &v) == 0 && v == 0x600000000000ull);
    CHECK(gp_parse_size("64G", &v) == 0 && v == 64ull << 30);
    CHECK(gp_parse_size("32M", &v) == 0 && v == 32ull << 20);
    CHECK(gp_parse_size("2GiB", &v) == 0 && v == 2ull << 30);
    CHECK(gp_parse_size("1T", &v) == 0 && v == 1ull << 40);
    CHECK(gp_parse_size("", &v) == -EINVAL);
    CHECK(gp_parse_size("-1", &v) == -EINVAL);
    CHECK(gp_parse_size("12Q", &v) == -EINVAL);
    CHECK(gp_parse_size("99999999999T", &v) == -EINVAL);
    CHECK(gp_parse_size("G", &v) == -EINVAL);
}

static void test_defaults_and_overrides(void)
{
    struct gp_config c;
    unsetenv("GPUCKPT_POOL_BASE");
    unsetenv("GPUCKPT_POOL_SIZE");
    unsetenv("GPUCKPT_RUN_DIR");
    setenv("XDG_RUNTIME_DIR", "/run/user/42", 1);
    CHECK(gp_config_load(&c) == 0);
    CHECK(c.pool_base == GP_DEFAULT_POOL_BASE);
    CHECK(c.slice_size == GP_DEFAULT_SLICE_SIZE);
    CHECK(c.staging_piece == GP_DEFAULT_STAGING_PIECE);
    CHECK(c.staging_file == GP_DEFAULT_STAGING_FILE);
    CHECK(!strcmp(c.run_dir, "/run/user/42/gpuckpt"));
    setenv("GPUCKPT_POOL_SIZE", "100M", 1); /* rounded up to whole chunks */
    setenv("GPUCKPT_RUN_DIR", "/tmp/somewhere", 1);
    CHECK(gp_config_load(&c) == 0);
    CHECK(c.slice_size == 128ull << 20);
    CHECK(!strcmp(c.run_dir, "/tmp/somewhere"));
    setenv("GPUCKPT_STAGING_PIECE", "5000", 1); /* rounded up to whole pages */
    CHECK(gp_config_load(&c) == 0 && c.staging_piece == 8192);
    unsetenv("GPUCKPT_STAGING_PIECE");
    setenv("GPUCKPT_STAGING_FILE", "2M", 1);
    CHECK(gp_config_load(&c) == 0 && c.staging_file == 2ull << 20);
    unsetenv("GPUCKPT_STAGING_FILE");
    setenv("GPUCKPT_POOL_BASE", "nonsense", 1);
    CHECK(gp_config_load(&c) == -EINVAL);
    unsetenv("GPUCKPT_POOL_BASE");
}

int main(void)
{
    setenv("GPUCKPT_LOG", "error", 1);
    RUN(test_sizes);
    RUN(test_defaults_and_overrides);
    return HARNESS_END();
}
