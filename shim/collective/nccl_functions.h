/* Every NCCL entry point that takes or makes a communicator, once: the
 * shim's wrappers (wrappers.c) are made from this list, and a test checks
 * it against the NCCL the GPU host has (test/gpu/probes/nccl_symbols.sh).
 *
 * GP_NCCL_OP(name, params, args): a collective or point-to-point call on
 *   the communicator `comm`: one unit of the cut (cut.h), unless inside the
 *   application's group.
 * GP_NCCL_COUNTED(name, params, args, field, delta): a call on `comm` that
 *   makes (+1) or drops (-1) state a rebuilt communicator would not have,
 *   counted in struct gp_comm's field so that a checkpoint refuses it.
 * The rest are written out in wrappers.c, and listed here for that check:
 * GP_NCCL_OTHER(name). */
#ifndef GP_NCCL_OP
#define GP_NCCL_OP(name, params, args)
#endif
#ifndef GP_NCCL_COUNTED
#define GP_NCCL_COUNTED(name, params, args, field, delta)
#endif
#ifndef GP_NCCL_OTHER
#define GP_NCCL_OTHER(name)
#endif

GP_NCCL_OP(ncclAllReduce,
           (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
            ncclComm_t comm, CUstream stream),
           (sendbuff, recvbuff, count, datatype, op, comm, stream))
GP_NCCL_OP(ncclBroadcast,
           (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
            CUstream stream),
           (sendbuff, recvbuff, count, datatype, root, comm, stream))
GP_NCCL_OP(ncclBcast, (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, CUstream stream),
           (buff, count, datatype, root, comm, stream))
GP_NCCL_OP(ncclReduce,
           (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
            ncclComm_t comm, CUstream stream),
           (sendbuff, recvbuff, count, datatype, op, root, comm, stream))
GP_NCCL_OP(ncclAllGather,
           (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
            CUstream stream),
           (sendbuff, recvbuff, sendcount, datatype, comm, stream))
GP_NCCL_OP(ncclReduceScatter,
           (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
            ncclComm_t comm, CUstream stream),
           (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))
GP_NCCL_OP(ncclAlltoAll,
           (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
            CUstream stream),
           (sendbuff, recvbuff, count, datatype, comm, stream))
GP_NCCL_OP(ncclGather,
           (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
            CUstream stream),
           (sendbuff, recvbuff, count, datatype, root, comm, stream))
GP_NCCL_OP(ncclScatter,
           (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
            CUstream stream),
           (sendbuff, recvbuff, count, datatype, root, comm, stream))
GP_NCCL_OP(ncclSend, (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, CUstream stream),
           (sendbuff, count, datatype, peer, comm, stream))
GP_NCCL_OP(ncclRecv, (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, CUstream stream),
           (recvbuff, count, datatype, peer, comm, stream))

GP_NCCL_COUNTED(ncclCommRegister, (ncclComm_t comm, void *buff, size_t size, void **handle), (comm, buff, size, handle),
                registrations, 1)
GP_NCCL_COUNTED(ncclCommDeregister, (ncclComm_t comm, void *handle), (comm, handle), registrations, -1)
GP_NCCL_COUNTED(ncclCommWindowRegister, (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int flags),
                (comm, buff, size, win, flags), windows, 1)
GP_NCCL_COUNTED(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win), windows, -1)
GP_NCCL_COUNTED(ncclRedOpCreatePreMulSum,
                (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm),
                (op, scalar, datatype, residence, comm), custom_ops, 1)
GP_NCCL_COUNTED(ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm), custom_ops, -1)

GP_NCCL_OTHER(ncclCommInitRank)
GP_NCCL_OTHER(ncclCommInitRankConfig)
GP_NCCL_OTHER(ncclCommInitRankScalable)
GP_NCCL_OTHER(ncclCommInitAll)
GP_NCCL_OTHER(ncclCommSplit)
GP_NCCL_OTHER(ncclCommShrink)
GP_NCCL_OTHER(ncclCommFinalize)
GP_NCCL_OTHER(ncclCommDestroy)
GP_NCCL_OTHER(ncclCommAbort)
GP_NCCL_OTHER(ncclCommRevoke)
GP_NCCL_OTHER(ncclCommGetAsyncError)
GP_NCCL_OTHER(ncclGetLastError)
GP_NCCL_OTHER(ncclCommCount)
GP_NCCL_OTHER(ncclCommCuDevice)
GP_NCCL_OTHER(ncclCommUserRank)
GP_NCCL_OTHER(ncclGroupStart)
GP_NCCL_OTHER(ncclGroupEnd)
GP_NCCL_OTHER(ncclGroupSimulateEnd)
GP_NCCL_OTHER(ncclMemAlloc)
GP_NCCL_OTHER(ncclMemFree)

#undef GP_NCCL_OP
#undef GP_NCCL_COUNTED
#undef GP_NCCL_OTHER
