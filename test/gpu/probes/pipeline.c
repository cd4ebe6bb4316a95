// Where does suspend's host-memory time go, and what can overlap?
//  A: 16 threads fault, then one register (today's staging)
//  B: 16 threads each fault+register its own 1 GiB
//  F: 16 threads register already-faulted 1 GiB chunks (resume's re-pin)
//  C: pipeline: workers fault+register 256 MiB chunks, main DMAs each as ready
//  D: DMA alone into registered memory
//  E: does registered host memory survive a driver checkpoint/restore, and what does it cost there?
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
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
static size_t N; static char *H; static CUcontext ctx;
static void touch(char*p,size_t n){for(size_t i=0;i<n;i+=4096)p[i]=0;}
static char *fresh(void){char*p=mmap(0,N,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);madvise(p,N,MADV_HUGEPAGE);return p;}
struct job{char*p;size_t n;int fault,reg;};
static void*worker(void*a){struct job*j=a;cuCtxSetCurrent(ctx);if(j->fault)touch(j->p,j->n);if(j->reg)CK(cuMemHostRegister(j->p,j->n,CU_MEMHOSTREGISTER_PORTABLE));return 0;}
static double par(char*p,size_t chunk,int fault,int reg){int n=N/chunk;pthread_t t[256];struct job j[256];double t0=now();for(int i=0;i<n;i++){j[i]=(struct job){p+i*chunk,chunk,fault,reg};pthread_create(&t[i],0,worker,&j[i]);}for(int i=0;i<n;i++)pthread_join(t[i],0);return now()-t0;}
static void unreg_chunks(char*p,size_t chunk){for(size_t o=0;o<N;o+=chunk)cuMemHostUnregister(p+o);}
// pipeline
#define PC (256ul<<20)
static atomic_int next_chunk; static atomic_int ready[1024]; static char*PP;
static void*pworker(void*a){(void)a;cuCtxSetCurrent(ctx);for(;;){int i=atomic_fetch_add(&next_chunk,1);if((size_t)i*PC>=N)return 0;touch(PP+i*PC,PC);CK(cuMemHostRegister(PP+i*PC,PC,CU_MEMHOSTREGISTER_PORTABLE));atomic_store(&ready[i],1);}}
static double pipeline(CUdeviceptr d,int workers,CUstream s){PP=fresh();int n=N/PC;atomic_store(&next_chunk,0);for(int i=0;i<n;i++)atomic_store(&ready[i],0);pthread_t t[64];double t0=now();for(int i=0;i<workers;i++)pthread_create(&t[i],0,pworker,0);
  for(int i=0;i<n;i++){while(!atomic_load(&ready[i]));CK(cuMemcpyDtoHAsync(PP+i*PC,d+i*PC,PC,s));}CK(cuStreamSynchronize(s));double el=now()-t0;for(int i=0;i<workers;i++)pthread_join(t[i],0);return el;}
static void child_ckpt(const char*tag){char pid[32];snprintf(pid,32,"%d",getpid());char*argv[]={"/proc/self/exe","--ckpt",pid,(char*)tag,0};pid_t c;posix_spawn(&c,"/proc/self/exe",0,0,argv,environ);int st;waitpid(c,&st,0);}
static int do_ckpt(int pid,const char*tag){CUcheckpointLockArgs la={0};la.timeoutMs=60000;CUcheckpointCheckpointArgs ca={0};CUcheckpointRestoreArgs ra={0};CUcheckpointUnlockArgs ua={0};
  double t0=now();CK(cuCheckpointProcessLock(pid,&la));double t1=now();CK(cuCheckpointProcessCheckpoint(pid,&ca));double t2=now();CK(cuCheckpointProcessRestore(pid,&ra));double t3=now();CK(cuCheckpointProcessUnlock(pid,&ua));double t4=now();
  printf("E %-28s lock %.3f checkpoint %.3f restore %.3f unlock %.3f\n",tag,t1-t0,t2-t1,t3-t2,t4-t3);fflush(stdout);return 0;}
int main(int argc,char**argv){
  if(argc>1&&!strcmp(argv[1],"--ckpt"))return do_ckpt(atoi(argv[2]),argv[3]);
  N=(size_t)(argc>1?atoi(argv[1]):16)<<30;
  CK(cuInit(0));CUdevice dev;cuDeviceGet(&dev,0);CK(cuDevicePrimaryCtxRetain(&ctx,dev));cuCtxSetCurrent(ctx);
  CUdeviceptr d;CK(cuMemAlloc(&d,N));CK(cuMemsetD8(d,7,N));CUstream s;cuStreamCreate(&s,CU_STREAM_NON_BLOCKING);cuCtxSynchronize();
  size_t G=1ul<<30;
  char*a=fresh();double t0=now();par(a,N/16,1,0);double t1=now();CK(cuMemHostRegister(a,N,CU_MEMHOSTREGISTER_PORTABLE));double t2=now();
  printf("A fault16 %.3f + register-one %.3f = %.3f s\n",t1-t0,t2-t1,t2-t0);
  t0=now();CK(cuMemcpyDtoHAsync(a,d,N,s));CK(cuStreamSynchronize(s));printf("D DMA out %.3f s (%.1f GB/s)\n",now()-t0,N/1e9/(now()-t0));
  t0=now();cuMemHostUnregister(a);printf("  unregister-one %.3f s\n",now()-t0);
  printf("F re-register 16 threads x %zu MiB: %.3f s\n",(N/16)>>20,par(a,N/16,0,1));unreg_chunks(a,N/16);
  printf("F re-register 64 threads x %zu MiB: %.3f s\n",(N/64)>>20,par(a,N/64,0,1));unreg_chunks(a,N/64);
  t0=now();CK(cuMemHostRegister(a,N,CU_MEMHOSTREGISTER_PORTABLE));printf("F re-register one: %.3f s\n",now()-t0);cuMemHostUnregister(a);
  munmap(a,N);
  char*b=fresh();printf("B fault+register 16 threads x %zu MiB: %.3f s\n",(N/16)>>20,par(b,N/16,1,1));unreg_chunks(b,N/16);munmap(b,N);
  b=fresh();printf("B fault+register 64 threads x %zu MiB: %.3f s\n",(N/64)>>20,par(b,N/64,1,1));unreg_chunks(b,N/64);munmap(b,N);
  for(int w=4;w<=16;w*=2){double el=pipeline(d,w,s);printf("C pipeline %d workers, 256 MiB chunks: %.3f s (%.1f GB/s)\n",w,el,N/1e9/el);if(w<16){unreg_chunks(PP,PC);munmap(PP,N);}}
  // E: PP is registered (16 GiB) and holds the data; free the device buffer like a pool release
  CK(cuMemFree(d));cuStreamDestroy(s);
  child_ckpt("with 16 GiB registered");
  unsigned fl=0;CUresult r=cuMemHostGetFlags(&fl,PP);printf("E after restore: cuMemHostGetFlags on chunk 0 = %d\n",r);
  CK(cuMemAlloc(&d,N));cuStreamCreate(&s,CU_STREAM_NON_BLOCKING);
  t0=now();CK(cuMemcpyHtoDAsync(d,PP,N,s));CK(cuStreamSynchronize(s));printf("E DMA in after restore, no re-register: %.3f s (%.1f GB/s)\n",now()-t0,N/1e9/(now()-t0));
  CK(cuMemFree(d));
  t0=now();unreg_chunks(PP,PC);printf("  unregister 64 chunks %.3f s\n",now()-t0);
  child_ckpt("nothing registered");
  t0=now();printf("F after restore: re-register 16 threads %.3f s\n",par(PP,N/16,0,1));unreg_chunks(PP,N/16);
  t0=now();printf("F after restore: re-register 64 threads %.3f s\n",par(PP,N/64,0,1));
  child_ckpt("16 GiB registered in 64 chunks");
  return 0;}
