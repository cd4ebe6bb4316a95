// Can a migrate hand the pool over through NVLink instead of host memory?
// The parent (a controller) allocates the pool's chunks on GPU 1, exports
// them as fds, sends them and lets go of its own handles and fds; the child
// (an application on GPU 0) imports them, copies its pool into them peer to
// peer, keeps only the fds and releases everything on GPU 0; the parent
// checkpoints the child's context with the driver and restores it onto
// GPU 1; the child imports its fds again, maps them at its pool's addresses
// and checks every chunk. Usage: peer_migrate [GiB] (default 16).
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
#define CK(x) do{CUresult r_=(x);if(r_){const char*s;cuGetErrorString(r_,&s);fprintf(stderr,"%s:%d %s = %d %s\n",who,__LINE__,#x,r_,s);exit(1);}}while(0)
static const char *who = "?";
static void send_fds(int s,int*fds,int n){for(int o=0;o<n;o+=BATCH){int k=n-o<BATCH?n-o:BATCH;char c[CMSG_SPACE(sizeof(int)*BATCH)];memset(c,0,sizeof c);char b='f';struct iovec v={&b,1};struct msghdr m={0};m.msg_iov=&v;m.msg_iovlen=1;m.msg_control=c;m.msg_controllen=CMSG_SPACE(sizeof(int)*k);struct cmsghdr*h=CMSG_FIRSTHDR(&m);h->cmsg_level=SOL_SOCKET;h->cmsg_type=SCM_RIGHTS;h->cmsg_len=CMSG_LEN(sizeof(int)*k);memcpy(CMSG_DATA(h),fds+o,sizeof(int)*k);if(sendmsg(s,&m,0)!=1){perror("sendmsg");exit(1);}}}
static void recv_fds(int s,int*fds,int n){for(int o=0;o<n;){char c[CMSG_SPACE(sizeof(int)*BATCH)];char b;struct iovec v={&b,1};struct msghdr m={0};m.msg_iov=&v;m.msg_iovlen=1;m.msg_control=c;m.msg_controllen=sizeof c;if(recvmsg(s,&m,0)!=1){perror("recvmsg");exit(1);}struct cmsghdr*h=CMSG_FIRSTHDR(&m);int k=(h->cmsg_len-CMSG_LEN(0))/sizeof(int);memcpy(fds+o,CMSG_DATA(h),sizeof(int)*k);o+=k;}}
static void say(int s,char c){if(write(s,&c,1)!=1)exit(1);}
static void hear(int s,char want){char c;if(read(s,&c,1)!=1||c!=want){fprintf(stderr,"%s: expected %c\n",who,want);exit(1);}}
static void uuid_of(int ord,CUuuid*u){CUdevice d;cuDeviceGet(&d,ord);cuDeviceGetUuid_v2(u,d);}

static void import_map(int*fds,int n,CUdeviceptr va,CUmemGenericAllocationHandle*h){
  CUmemAccessDesc a={{CU_MEM_LOCATION_TYPE_DEVICE,0},CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  for(int i=0;i<n;i++){CK(cuMemImportFromShareableHandle(&h[i],(void*)(long)fds[i],CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));CK(cuMemMap(va+i*CHUNK,CHUNK,0,h[i],0));}
  CK(cuMemSetAccess(va,(size_t)n*CHUNK,&a,1));}

static int app(int s,int n){
  who="app";CK(cuInit(0));CUdevice d;CK(cuDeviceGet(&d,0));CUcontext c;CK(cuDevicePrimaryCtxRetain(&c,d));CK(cuCtxSetCurrent(c));
  CUdeviceptr pool,tmp;CK(cuMemAddressReserve(&pool,(size_t)n*CHUNK,CHUNK,0,0));CK(cuMemAddressReserve(&tmp,(size_t)n*CHUNK,CHUNK,0,0));
  CUmemGenericAllocationHandle*h=calloc(n,sizeof*h),*p=calloc(n,sizeof*p);int*fds=calloc(n,sizeof*fds);
  CUmemAllocationProp pr={0};pr.type=CU_MEM_ALLOCATION_TYPE_PINNED;pr.location.type=CU_MEM_LOCATION_TYPE_DEVICE;pr.location.id=0;
  CUmemAccessDesc a={{CU_MEM_LOCATION_TYPE_DEVICE,0},CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  for(int i=0;i<n;i++){CK(cuMemCreate(&p[i],CHUNK,&pr,0));CK(cuMemMap(pool+i*CHUNK,CHUNK,0,p[i],0));}
  CK(cuMemSetAccess(pool,(size_t)n*CHUNK,&a,1));
  for(int i=0;i<n;i++)CK(cuMemsetD32(pool+i*CHUNK,0x5a000000u|i,CHUNK/4));
  CK(cuCtxSynchronize());
  say(s,'r');recv_fds(s,fds,n);
  double t0=now();import_map(fds,n,tmp,h);double t1=now();
  CUstream st;CK(cuStreamCreate(&st,CU_STREAM_NON_BLOCKING));
  CK(cuMemcpyDtoDAsync(tmp,pool,(size_t)n*CHUNK,st));CK(cuStreamSynchronize(st));double t2=now();
  CK(cuMemUnmap(tmp,(size_t)n*CHUNK));for(int i=0;i<n;i++)CK(cuMemRelease(h[i]));
  CK(cuMemUnmap(pool,(size_t)n*CHUNK));for(int i=0;i<n;i++)CK(cuMemRelease(p[i]));double t3=now();
  CK(cuStreamDestroy(st));
  printf("app: import+map %d chunks %.3f s; peer copy %.2f GiB %.3f s (%.0f GB/s); unmap+release %.3f s\n",n,t1-t0,n*CHUNK/1073741824.0,t2-t1,n*CHUNK/1e9/(t2-t1),t3-t2);
  fflush(stdout);
  say(s,'x');hear(s,'g');
  double t4=now();import_map(fds,n,pool,h);double t5=now();
  CUuuid u,u1;CK(cuCtxGetDevice(&d));CK(cuDeviceGetUuid_v2(&u,d));
  int bad=0;for(int i=0;i<n;i++){unsigned v[2];CK(cuMemcpyDtoH(v,pool+i*CHUNK+CHUNK-8,8));if(v[0]!=(0x5a000000u|i)||v[1]!=v[0])bad++;}
  printf("app: after restore import+map at the pool %.3f s; device 0 is now uuid byte0 %02x; %d bad chunks\n",t5-t4,(unsigned char)u.bytes[0],bad);
  (void)u1;fflush(stdout);
  for(int i=0;i<n;i++)cuMemRelease(h[i]);
  say(s,'d');return bad?1:0;}

int main(int argc,char**argv){
  int n=(int)((argc>1?atof(argv[1]):16)*1024/32);int sv[2];socketpair(AF_UNIX,SOCK_STREAM,0,sv);
  pid_t kid=fork();if(!kid){close(sv[0]);return app(sv[1],n);}
  close(sv[1]);int s=sv[0];who="ctl";hear(s,'r');
  double t0=now();CK(cuInit(0));double ti=now();CUdevice d1;CK(cuDeviceGet(&d1,1));CUcontext c;CK(cuDevicePrimaryCtxRetain(&c,d1));CK(cuCtxSetCurrent(c));double tc=now();
  int can=0;CUdevice d0;cuDeviceGet(&d0,0);cuDeviceCanAccessPeer(&can,d0,d1);
  CUmemAllocationProp pr={0};pr.type=CU_MEM_ALLOCATION_TYPE_PINNED;pr.location.type=CU_MEM_LOCATION_TYPE_DEVICE;pr.location.id=1;pr.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle*h=calloc(n,sizeof*h);int*fds=calloc(n,sizeof*fds);
  for(int i=0;i<n;i++){CK(cuMemCreate(&h[i],CHUNK,&pr,0));CK(cuMemExportToShareableHandle(&fds[i],h[i],CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0));}
  double te=now();
  printf("ctl: cuInit %.3f s, context on GPU 1 %.3f s, %d chunks created+exported %.3f s; GPU 0 can access GPU 1: %d\n",ti-t0,tc-ti,n,te-tc,can);fflush(stdout);
  send_fds(s,fds,n);for(int i=0;i<n;i++){CK(cuMemRelease(h[i]));close(fds[i]);}
  hear(s,'x');
  CUuuid u0,u1;uuid_of(0,&u0);uuid_of(1,&u1);CUcheckpointGpuPair pairs[2]={{u0,u1},{u1,u0}};
  CUcheckpointLockArgs la={0};la.timeoutMs=60000;CUcheckpointCheckpointArgs ca={0};CUcheckpointRestoreArgs ra={0};ra.gpuPairs=pairs;ra.gpuPairsCount=2;CUcheckpointUnlockArgs ua={0};
  double a=now();CK(cuCheckpointProcessLock(kid,&la));double b=now();CK(cuCheckpointProcessCheckpoint(kid,&ca));double cc=now();CK(cuCheckpointProcessRestore(kid,&ra));double dd=now();CK(cuCheckpointProcessUnlock(kid,&ua));double e=now();
  printf("ctl: driver lock %.3f checkpoint %.3f restore onto GPU 1 %.3f unlock %.3f s (GPU 1 uuid byte0 %02x)\n",b-a,cc-b,dd-cc,e-dd,(unsigned char)u1.bytes[0]);fflush(stdout);
  say(s,'g');hear(s,'d');
  int st;waitpid(kid,&st,0);printf("ctl: app exit %d\n",WEXITSTATUS(st));return WEXITSTATUS(st);}
