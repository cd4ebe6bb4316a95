// Where a migrate's remap time goes: mapping memory another process
// exported (the pool held on the target GPU) against fresh memory, with
// access set per chunk or once per range, for the owner alone or owner +
// peer (what the pool does). The exporter is a child process; the importer
// runs on GPU 1, where the memory lies. Usage: remap_cost [chunks] (256).
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (32ull << 20)
#define BATCH 250
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
#define CK(x) do{CUresult r_=(x);if(r_){const char*s;cuGetErrorString(r_,&s);fprintf(stderr,"%d %s = %d %s\n",__LINE__,#x,r_,s);exit(1);}}while(0)
static void send_fds(int s,int*fds,int n){for(int o=0;o<n;o+=BATCH){int k=n-o<BATCH?n-o:BATCH;char c[CMSG_SPACE(sizeof(int)*BATCH)];memset(c,0,sizeof c);char b='f';struct iovec v={&b,1};struct msghdr m={0};m.msg_iov=&v;m.msg_iovlen=1;m.msg_control=c;m.msg_controllen=CMSG_SPACE(sizeof(int)*k);struct cmsghdr*h=CMSG_FIRSTHDR(&m);h->cmsg_level=SOL_SOCKET;h->cmsg_type=SCM_RIGHTS;h->cmsg_len=CMSG_LEN(sizeof(int)*k);memcpy(CMSG_DATA(h),fds+o,sizeof(int)*k);if(sendmsg(s,&m,0)!=1)exit(1);}}
static void recv_fds(int s,int*fds,int n){for(int o=0;o<n;){char c[CMSG_SPACE(sizeof(int)*BATCH)];char b;struct iovec v={&b,1};struct msghdr m={0};m.msg_iov=&v;m.msg_iovlen=1;m.msg_control=c;m.msg_controllen=sizeof c;if(recvmsg(s,&m,0)!=1)exit(1);struct cmsghdr*h=CMSG_FIRSTHDR(&m);int k=(h->cmsg_len-CMSG_LEN(0))/sizeof(int);memcpy(fds+o,CMSG_DATA(h),sizeof(int)*k);o+=k;}}

static CUmemAccessDesc acc[2]={{{CU_MEM_LOCATION_TYPE_DEVICE,1},CU_MEM_ACCESS_FLAGS_PROT_READWRITE},{{CU_MEM_LOCATION_TYPE_DEVICE,0},CU_MEM_ACCESS_FLAGS_PROT_READWRITE}};

/* imported: fds (else fresh memory on GPU 1); props: ask the handle where it lies; per_chunk: access per chunk; ndesc: owner (1) or + peer (2). */
static void variant(const char*name,int*fds,int n,int props,int per_chunk,int ndesc){
  CUdeviceptr va;CK(cuMemAddressReserve(&va,(size_t)n*CHUNK,CHUNK,0,0));CUmemGenericAllocationHandle*h=calloc(n,sizeof*h);
  CUmemAllocationProp pr={0};pr.type=CU_MEM_ALLOCATION_TYPE_PINNED;pr.location.type=CU_MEM_LOCATION_TYPE_DEVICE;pr.location.id=1;
  double t0=now(),ti=0,tp=0,tm=0,ta=0;
  for(int i=0;i<n;i++){double a=now();
    if(fds)CK(cuMemImportFromShareableHandle(&h[i],(void*)(long)fds[i],CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));else CK(cuMemCreate(&h[i],CHUNK,&pr,0));
    double b=now();ti+=b-a;
    if(props){CUmemAllocationProp p;CK(cuMemGetAllocationPropertiesFromHandle(&p,h[i]));if(p.location.id!=1){fprintf(stderr,"lies on %d\n",p.location.id);}}
    double c=now();tp+=c-b;
    CK(cuMemMap(va+i*CHUNK,CHUNK,0,h[i],0));double d=now();tm+=d-c;
    if(per_chunk)CK(cuMemSetAccess(va+i*CHUNK,CHUNK,acc,ndesc));ta+=now()-d;}
  if(!per_chunk){double d=now();CK(cuMemSetAccess(va,(size_t)n*CHUNK,acc,ndesc));ta+=now()-d;}
  double t1=now();
  printf("%-44s %d chunks: %.3f s (import/create %.3f, props %.3f, map %.3f, access %.3f)\n",name,n,t1-t0,ti,tp,tm,ta);fflush(stdout);
  CK(cuMemUnmap(va,(size_t)n*CHUNK));for(int i=0;i<n;i++)CK(cuMemRelease(h[i]));CK(cuMemAddressFree(va,(size_t)n*CHUNK));free(h);}

int main(int argc,char**argv){
  int n=argc>1?atoi(argv[1]):256,sets=4;int sv[2];socketpair(AF_UNIX,SOCK_STREAM,0,sv);
  if(!fork()){close(sv[1]);CK(cuInit(0));CUdevice d;CK(cuDeviceGet(&d,1));
    CUmemAllocationProp pr={0};pr.type=CU_MEM_ALLOCATION_TYPE_PINNED;pr.location.type=CU_MEM_LOCATION_TYPE_DEVICE;pr.location.id=1;pr.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    int*fds=calloc(n*sets,sizeof(int));for(int i=0;i<n*sets;i++){CUmemGenericAllocationHandle h;CK(cuMemCreate(&h,CHUNK,&pr,0));CK(cuMemExportToShareableHandle(&fds[i],h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0));CK(cuMemRelease(h));}
    send_fds(sv[0],fds,n*sets);return 0;}
  close(sv[0]);int*fds=calloc(n*sets,sizeof(int));recv_fds(sv[1],fds,n*sets);int st;wait(&st);
  CK(cuInit(0));CUdevice d;CK(cuDeviceGet(&d,1));CUcontext c;CK(cuDevicePrimaryCtxRetain(&c,d));CK(cuCtxSetCurrent(c));
  variant("fresh, access per chunk, owner + peer",NULL,n,0,1,2);
  variant("imported + props, access per chunk, owner + peer",fds,n,1,1,2);
  variant("imported, access per chunk, owner only",fds+n,n,0,1,1);
  variant("imported, access once, owner + peer",fds+2*n,n,0,0,2);
  variant("imported, access once, owner only",fds+3*n,n,0,0,1);
  variant("fresh, access once, owner + peer",NULL,n,0,0,2);
  return 0;}
