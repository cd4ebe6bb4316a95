/* The part of NCCL's ABI the shim needs, declared here so that building it
 * needs no NCCL: handles are opaque pointers, enums plain ints (the values
 * are NCCL's, stable since 2.0). nccl_functions.h lists every entry point
 * the shim puts itself in front of. */
#ifndef GPUCKPT_NCCL_API_H
#define GPUCKPT_NCCL_API_H

#include <stddef.h>

#include "../interpose/cuda_api.h"

typedef struct ncclComm *ncclComm_t;
typedef void *ncclWindow_t;
typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef int ncclScalarResidence_t;

enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
};

#define GP_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[GP_NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* ncclConfig_t begins with its own size; the shim copies it whole and only
 * reads the fields below, whose offsets are the same in every NCCL that
 * has them (2.14 on). */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
} gp_nccl_config_head;

/* NCCL_SPLIT_NOCOLOR: the caller joins no new communicator. */
#define GP_NCCL_SPLIT_NOCOLOR (-1)

#endif
