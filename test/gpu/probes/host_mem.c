// How fast can 16 GiB of pinned host memory be had? (memfd vs anon, THP, threads)
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static CUresult (*reg)(void*,size_t,unsigned);static CUresult (*unreg)(void*);
struct span{char*p;size_t n;};
static void*touch(void*a){struct span*s=a;for(size_t i=0;i<s->n;i+=4096)s->p[i]=0;return 0;}
static void ptouch(char*p,size_t n,int th){pthread_t t[64];struct span s[64];size_t c=n/th;for(int i=0;i<th;i++){s[i]=(struct span){p+i*c,c};pthread_create(&t[i],0,touch,&s[i]);}for(int i=0;i<th;i++)pthread_join(t[i],0);}
static void trial(const char*name,int memfd,int populate,int huge,int threads,size_t n){
  double t0=now();char*p;int fd=-1;
  if(memfd){fd=memfd_create("x",0);ftruncate(fd,n);p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_SHARED|(populate?MAP_POPULATE:0),fd,0);}
  else p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|(populate?MAP_POPULATE:0),-1,0);
  if(huge)madvise(p,n,MADV_HUGEPAGE);
  if(threads)ptouch(p,n,threads);
  double t1=now();CUresult r=reg(p,n,CU_MEMHOSTREGISTER_PORTABLE);double t2=now();unreg(p);double t3=now();
  // second register of the same (already faulted) memory
  reg(p,n,CU_MEMHOSTREGISTER_PORTABLE);double t4=now();unreg(p);
  munmap(p,n);
  // remap existing memfd pages (resume case)
  double rm=-1,rr=-1;
  if(memfd){double a=now();p=mmap(0,n,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_POPULATE,fd,0);if(huge)madvise(p,n,MADV_HUGEPAGE);double b=now();reg(p,n,CU_MEMHOSTREGISTER_PORTABLE);double c=now();unreg(p);munmap(p,n);rm=b-a;rr=c-b;}
  if(fd>=0)close(fd);
  printf("%-34s alloc+fault %.3f s  register %.3f s (r=%d)  unregister %.3f s  re-register %.3f s  remap %.3f s  register-after-remap %.3f s\n",name,t1-t0,t2-t1,r,t3-t2,t4-t3,rm,rr);
  fflush(stdout);
}
int main(int argc,char**argv){
  size_t n=(size_t)(argc>1?atoi(argv[1]):16)<<30;
  cuInit(0);CUdevice d;cuDeviceGet(&d,0);CUcontext c;cuDevicePrimaryCtxRetain(&c,d);cuCtxSetCurrent(c);
  reg=(void*)cuMemHostRegister_v2;unreg=(void*)cuMemHostUnregister;
  trial("memfd populate",1,1,0,0,n);
  trial("memfd thp-advise touch16",1,0,1,16,n);
  trial("memfd touch16",1,0,0,16,n);
  trial("anon populate",0,1,0,0,n);
  trial("anon thp-advise touch16",0,0,1,16,n);
  double a=now();void*h;CUresult r=cuMemHostAlloc(&h,n,CU_MEMHOSTALLOC_PORTABLE);double b=now();cuMemFreeHost(h);
  printf("cuMemHostAlloc %.3f s (r=%d) free %.3f\n",b-a,r,now()-b);
  return 0;
}
