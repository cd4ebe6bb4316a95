// Host memory for a suspend's held copy: how fast 16 GiB of fresh
// anonymous memory faults in by thread count (and whether it gets huge
// pages), and how fast memory kept from an earlier suspend, lazily freed
// with MADV_FREE, can be written again.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static size_t N;
struct job{char*p;size_t n;int how;};
static void*work(void*a){struct job*j=a;if(j->how==0)madvise(j->p,j->n,MADV_POPULATE_WRITE);else if(j->how==1)memset(j->p,0x5a,j->n);else for(size_t i=0;i<j->n;i+=4096)j->p[i]=1;return 0;}
static double par(char*p,int th,int how){pthread_t t[64];struct job j[64];size_t c=N/th;double a=now();for(int i=0;i<th;i++){j[i]=(struct job){p+i*c,c,how};pthread_create(&t[i],0,work,&j[i]);}for(int i=0;i<th;i++)pthread_join(t[i],0);return now()-a;}
static long huge_kb(void){FILE*f=fopen("/proc/self/smaps_rollup","r");char l[256];long v=-1;while(f&&fgets(l,256,f))if(!strncmp(l,"AnonHugePages:",14))v=atol(l+14);if(f)fclose(f);return v;}
static void cat(const char*path){FILE*f=fopen(path,"r");char l[256];printf("%s: ",path);if(f&&fgets(l,256,f))printf("%s",l);else printf("-\n");if(f)fclose(f);}
static char*fresh(void){char*p=mmap(0,N,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);madvise(p,N,MADV_HUGEPAGE);return p;}
int main(int argc,char**argv){
  N=(size_t)(argc>1?atoi(argv[1]):16)<<30;struct utsname u;uname(&u);printf("kernel %s, %ld cpus\n",u.release,sysconf(_SC_NPROCESSORS_ONLN));
  cat("/sys/kernel/mm/transparent_hugepage/enabled");cat("/sys/kernel/mm/transparent_hugepage/defrag");cat("/sys/kernel/mm/transparent_hugepage/shmem_enabled");cat("/proc/sys/vm/nr_hugepages");
  int T[]={8,16,32};
  for(int k=0;k<3;k++){char*p=fresh();double f=par(p,T[k],0);long h=huge_kb();
    double w=par(p,T[k],1);
    double fr=now();madvise(p,N,MADV_FREE);fr=now()-fr;
    double again=par(p,T[k],1);long h2=huge_kb();
    double dn=now();madvise(p,N,MADV_DONTNEED);dn=now()-dn;double refault=par(p,T[k],1);
    printf("%2d threads: fault-in %.3f s (%.1f GB/s, AnonHugePages %ld MiB) | memset faulted %.3f s | MADV_FREE %.3f s, memset after %.3f s (%.1f GB/s, huge %ld MiB) | DONTNEED %.3f s, memset faulting %.3f s\n",
      T[k],f,N/1e9/f,h>>10,w,fr,again,N/1e9/again,h2>>10,dn,refault);fflush(stdout);munmap(p,N);}
  { char*p=fresh();double w=par(p,16,1);printf("16 threads memset into fresh (faulting by writes) %.3f s\n",w);munmap(p,N);}
  { char*p=mmap(0,1<<30,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_HUGETLB,-1,0);printf("MAP_HUGETLB 1 GiB: %s\n",p==MAP_FAILED?"refused":"mapped");}
  return 0;}
