// Suspend/resume through a small pinned bounce ring instead of pinning the
// whole held memory: D2H into ring slots, worker threads memcpy slot -> fresh
// unpinned memory (and back for resume). Compared with today's pipeline
// (fault + register 256 MiB pieces on 8 workers, DMA straight in).
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
#define CK(x) do{CUresult r_=(x);if(r_){printf("FAIL %s = %d (line %d)\n",#x,r_,__LINE__);fflush(stdout);}}while(0)
static size_t N; static CUcontext ctx; static CUdeviceptr D; static CUstream S;
static char *fresh(int shared){char*p;if(shared){int fd=memfd_create("x",0);ftruncate(fd,N);p=mmap(0,N,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);close(fd);}else{p=mmap(0,N,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);madvise(p,N,MADV_HUGEPAGE);}return p;}

/* ---- bounce ring ---- */
#define MAXR 64
static char *RING; static size_t SL; static int R; static CUevent EV[MAXR];
static atomic_long state[MAXR];   /* suspend: -1 free, i = DMA of chunk i issued; resume: encoded below */
static atomic_long nextj; static long NCH; static char *DST; static int MODE; /* 0 out, 1 in */
static atomic_long filled[MAXR];  /* resume: chunk index whose bytes the slot holds (-1 none) */
static atomic_long issued[MAXR];  /* resume: chunk index whose DMA was issued from the slot (-1 none) */
static void spin(void){sched_yield();}
static void *bworker(void*a){(void)a;cuCtxSetCurrent(ctx);for(;;){long j=atomic_fetch_add(&nextj,1);if(j>=NCH)return 0;int s=j%R;
  if(MODE==0){while(atomic_load(&state[s])!=j)spin();CK(cuEventSynchronize(EV[s]));memcpy(DST+j*SL,RING+s*SL,SL);atomic_store(&state[s],-1);}
  else{if(j>=R){while(atomic_load(&issued[s])!=j-R)spin();CK(cuEventSynchronize(EV[s]));}memcpy(RING+s*SL,DST+j*SL,SL);atomic_store(&filled[s],j);}}}
static double bounce(int out,int workers,size_t slot,int ring,char*dst){
  SL=slot;R=ring;NCH=N/SL;DST=dst;MODE=!out;atomic_store(&nextj,0);
  for(int i=0;i<R;i++){atomic_store(&state[i],-1);atomic_store(&filled[i],-1);atomic_store(&issued[i],-1);}
  pthread_t t[64];double t0=now();for(int i=0;i<workers;i++)pthread_create(&t[i],0,bworker,0);
  for(long i=0;i<NCH;i++){int s=i%R;
    if(out){while(atomic_load(&state[s])!=-1)spin();CK(cuMemcpyDtoHAsync(RING+s*SL,D+i*SL,SL,S));CK(cuEventRecord(EV[s],S));atomic_store(&state[s],i);}
    else{while(atomic_load(&filled[s])!=i)spin();CK(cuMemcpyHtoDAsync(D+i*SL,RING+s*SL,SL,S));CK(cuEventRecord(EV[s],S));atomic_store(&issued[s],i);}}
  CK(cuStreamSynchronize(S));for(int i=0;i<workers;i++)pthread_join(t[i],0);return now()-t0;}

/* ---- today's pipeline ---- */
#define PC (256ul<<20)
static atomic_int next_chunk; static atomic_int ready[1024]; static char*PP;
static void*pworker(void*a){(void)a;cuCtxSetCurrent(ctx);for(;;){int i=atomic_fetch_add(&next_chunk,1);if((size_t)i*PC>=N)return 0;madvise(PP+i*PC,PC,23);CK(cuMemHostRegister(PP+i*PC,PC,CU_MEMHOSTREGISTER_PORTABLE));atomic_store(&ready[i],1);}}
static double pipeline(int workers){PP=fresh(0);int n=N/PC;atomic_store(&next_chunk,0);for(int i=0;i<n;i++)atomic_store(&ready[i],0);pthread_t t[64];double t0=now();for(int i=0;i<workers;i++)pthread_create(&t[i],0,pworker,0);
  for(int i=0;i<n;i++){while(!atomic_load(&ready[i]));CK(cuMemcpyDtoHAsync(PP+i*PC,D+i*PC,PC,S));}CK(cuStreamSynchronize(S));double el=now()-t0;for(int i=0;i<workers;i++)pthread_join(t[i],0);return el;}

static void fill(void){for(size_t o=0;o<N;o+=1<<20)CK(cuMemsetD32(D+o,(unsigned)(o>>20)*2654435761u,1<<18));CK(cuCtxSynchronize());}
static long check_host(char*h){long bad=0;for(size_t o=0;o<N;o+=1<<20){unsigned v=(unsigned)(o>>20)*2654435761u;if(*(unsigned*)(h+o)!=v||*(unsigned*)(h+o+(1<<20)-4)!=v)bad++;}return bad;}
static long check_dev(void){long bad=0;for(size_t o=0;o<N;o+=(size_t)97<<20){unsigned v=(unsigned)(o>>20)*2654435761u,g=0;CK(cuMemcpyDtoH(&g,D+o,4));if(g!=v)bad++;}return bad;}

static void child_ckpt(const char*tag){char pid[32];snprintf(pid,32,"%d",getpid());char*argv[]={"/proc/self/exe","--ckpt",pid,(char*)tag,0};pid_t c;posix_spawn(&c,"/proc/self/exe",0,0,argv,environ);int st;waitpid(c,&st,0);}
static int do_ckpt(int pid,const char*tag){CUcheckpointLockArgs la={0};la.timeoutMs=60000;CUcheckpointCheckpointArgs ca={0};CUcheckpointRestoreArgs ra={0};CUcheckpointUnlockArgs ua={0};
  double a=now();CK(cuInit(0));double t0=now();CK(cuCheckpointProcessLock(pid,&la));double t1=now();CK(cuCheckpointProcessCheckpoint(pid,&ca));double t2=now();CK(cuCheckpointProcessRestore(pid,&ra));double t3=now();CK(cuCheckpointProcessUnlock(pid,&ua));double t4=now();
  printf("E %-34s cuInit %.3f lock %.3f checkpoint %.3f restore %.3f unlock %.3f\n",tag,t0-a,t1-t0,t2-t1,t3-t2,t4-t3);fflush(stdout);return 0;}

int main(int argc,char**argv){
  if(argc>1&&!strcmp(argv[1],"--ckpt"))return do_ckpt(atoi(argv[2]),argv[3]);
  N=(size_t)(argc>1?atoi(argv[1]):16)<<30;
  CK(cuInit(0));CUdevice dev;cuDeviceGet(&dev,0);CK(cuDevicePrimaryCtxRetain(&ctx,dev));cuCtxSetCurrent(ctx);
  CK(cuMemAlloc(&D,N));cuStreamCreate(&S,CU_STREAM_NON_BLOCKING);fill();
  for(int i=0;i<MAXR;i++)CK(cuEventCreate(&EV[i],CU_EVENT_DISABLE_TIMING));
  size_t ringmax=(size_t)1<<30;RING=mmap(0,ringmax,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0);
  double t0=now();CK(cuMemHostRegister(RING,ringmax,CU_MEMHOSTREGISTER_PORTABLE));printf("ring 1 GiB registered in %.3f s\n",now()-t0);
  /* fault-in alone, for reference */
  { char*p=fresh(0);t0=now();madvise(p,N,23);printf("fault-in 16 GiB one thread (MADV_POPULATE_WRITE, THP advised) %.3f s\n",now()-t0);munmap(p,N);}
  double best=1e9;
  for(int rep=0;rep<2;rep++){double el=pipeline(8);printf("C today: 8 workers fault+register 256 MiB, DMA: %.3f s (%.1f GB/s) bad=%ld\n",el,N/1e9/el,check_host(PP));
    t0=now();for(size_t o=0;o<N;o+=PC)cuMemHostUnregister(PP+o);printf("  then unregister %.3f s\n",now()-t0);munmap(PP,N);}
  int W[]={4,8,12,16};size_t SLOT[]={16<<20,32<<20,64<<20};
  for(int si=0;si<3;si++)for(int wi=0;wi<4;wi++){int w=W[wi];size_t sl=SLOT[si];int ring=2*w;if((size_t)ring*sl>ringmax)ring=ringmax/sl;
    char*dst=fresh(0);double out=bounce(1,w,sl,ring,dst);long bad=check_host(dst);
    CK(cuMemsetD8(D,0,N));CK(cuCtxSynchronize());double in=bounce(0,w,sl,ring,dst);long badd=check_dev();
    printf("B bounce %2d workers, %2zu MiB slots x %2d: out %.3f s (%.1f GB/s) bad=%ld | in %.3f s (%.1f GB/s) bad=%ld\n",w,sl>>20,ring,out,N/1e9/out,bad,in,N/1e9/in,badd);fflush(stdout);
    if(out<best)best=out;munmap(dst,N);}
  { char*dst=fresh(1);double out=bounce(1,16,32<<20,32,dst);long bad=check_host(dst);double in=bounce(0,16,32<<20,32,dst);
    printf("B bounce into memfd (shared), 16 workers 32 MiB: out %.3f s bad=%ld in %.3f s\n",out,bad,in);munmap(dst,N);}
  { char*dst=fresh(0);madvise(dst,N,23);double out=bounce(1,16,32<<20,32,dst);double in=bounce(0,16,32<<20,32,dst);
    printf("B bounce into pre-faulted memory, 16 workers 32 MiB: out %.3f s in %.3f s\n",out,in);
    /* driver checkpoint costs: held memory unpinned, ring pinned vs not */
    CK(cuMemFree(D));CK(cuCtxSynchronize());
    child_ckpt("1 GiB ring registered");
    t0=now();cuMemHostUnregister(RING);printf("  ring unregister %.3f s\n",now()-t0);
    child_ckpt("nothing registered");
    child_ckpt("nothing registered (again)");
    CK(cuMemAlloc(&D,N));t0=now();CK(cuMemHostRegister(RING,ringmax,CU_MEMHOSTREGISTER_PORTABLE));printf("ring re-register after restore %.3f s\n",now()-t0);
    in=bounce(0,16,32<<20,32,dst);printf("B in after restore %.3f s bad=%ld\n",in,check_dev());munmap(dst,N);}
  /* host VMM allocation as staging */
  { CUmemAllocationProp pr={0};pr.type=CU_MEM_ALLOCATION_TYPE_PINNED;pr.location.type=CU_MEM_LOCATION_TYPE_HOST_NUMA;pr.location.id=0;size_t g=0;
    CK(cuMemGetAllocationGranularity(&g,&pr,CU_MEM_ALLOC_GRANULARITY_MINIMUM));printf("host VMM granularity %zu\n",g);
    CUmemGenericAllocationHandle h;t0=now();CUresult r=cuMemCreate(&h,N,&pr,0);double t1=now();
    if(!r){CUdeviceptr va;CK(cuMemAddressReserve(&va,N,0,0,0));CK(cuMemMap(va,N,0,h,0));CUmemAccessDesc ad={0};ad.location.type=CU_MEM_LOCATION_TYPE_DEVICE;ad.location.id=0;ad.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE;CK(cuMemSetAccess(va,N,&ad,1));double t2=now();
      CK(cuMemcpyDtoDAsync(va,D,N,S));CK(cuStreamSynchronize(S));double t3=now();CK(cuMemFree(D));
      child_ckpt("16 GiB host VMM mapped");
      double t4=now();CK(cuMemUnmap(va,N));CK(cuMemRelease(h));double t5=now();
      printf("host VMM 16 GiB: create %.3f map+access %.3f copy D->hostVMM %.3f s (%.1f GB/s) unmap+release %.3f\n",t1-t0,t2-t1,t3-t2,N/1e9/(t3-t2),t5-t4);}
    else printf("host VMM cuMemCreate failed %d\n",r);}
  return 0;}
