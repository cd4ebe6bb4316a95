/* Generated from protocol/messages.mjs by protocol/generate.mjs: do not edit.
 * Every message the shim serves, for its dispatch (handlers.c):
 * GP_MESSAGE(NAME, handler suffix, reply size preset, takes fds). */
GP_MESSAGE(HELLO, hello, sizeof(struct gpck_hello_rep), 0)
GP_MESSAGE(STATUS, status, sizeof(struct gpck_status_rep), 0)
GP_MESSAGE(DEVICES, devices, sizeof(struct gpck_devices_rep), 0)
GP_MESSAGE(QUIESCE, quiesce, sizeof(struct gpck_quiesce_rep), 0)
GP_MESSAGE(RESUME, resume, sizeof(struct gpck_resume_rep), 0)
GP_MESSAGE(LIST_ALLOCS, list_allocs, sizeof(struct gpck_list_rep), 0)
GP_MESSAGE(STAGING_MAP, staging_map, sizeof(struct gpck_staging_rep), 1)
GP_MESSAGE(STAGING_UNMAP, staging_unmap, 0, 0)
GP_MESSAGE(COPY_OUT, copy_out, sizeof(struct gpck_copy_rep), 0)
GP_MESSAGE(COPY_IN, copy_in, sizeof(struct gpck_copy_rep), 0)
GP_MESSAGE(SUSPEND_POOL, suspend_pool, sizeof(struct gpck_pool_rep), 0)
GP_MESSAGE(REMAP_POOL, remap_pool, sizeof(struct gpck_pool_rep), 0)
GP_MESSAGE(DROP_HELD, drop_held, 0, 0)
GP_MESSAGE(BLOCK_DIGEST, block_digest, sizeof(struct gpck_digest_rep), 0)
GP_MESSAGE(LIVE_WINDOW, live_window, 0, 0)
GP_MESSAGE(PEER_HOLD, peer_hold, sizeof(struct gpck_peer_rep), 1)
