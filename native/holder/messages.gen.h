/* Generated from protocol/messages.mjs by protocol/generate.mjs: do not edit.
 * Every message the holder serves, for its dispatch (snapshot_holder.c):
 * GP_MESSAGE(NAME, handler suffix, reply size preset, takes fds). */
GP_MESSAGE(HOLD_PUT, hold_put, sizeof(struct gpck_hold_rep), 1)
GP_MESSAGE(HOLD_LIST, hold_list, sizeof(struct gpck_hold_list_rep), 0)
GP_MESSAGE(HOLD_TAKE, hold_take, sizeof(struct gpck_hold_rep), 0)
GP_MESSAGE(HOLD_DROP, hold_drop, sizeof(struct gpck_hold_rep), 0)
GP_MESSAGE(HOLD_RECLAIM, hold_reclaim, sizeof(struct gpck_hold_rep), 0)
