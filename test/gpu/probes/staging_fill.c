// What bounds filling restore staging on a GPU host: faulting in memfd
// (shmem, 4 KiB pages here) vs anonymous huge-page memory from several
// threads, and reading an image file back from the page cache.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static size_t N;static char*P;static int T,MODE,FD;static char SRC[16<<20];
static char*PT[64];
static void*work(void*a){long i=(long)a;size_t share=N/T,o=i*share;
  if(MODE==3){int fd=memfd_create("s",0);ftruncate(fd,share);PT[i]=mmap(0,share,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);close(fd);for(size_t k=0;k<share;k+=sizeof SRC)memcpy(PT[i]+k,SRC,sizeof SRC);return 0;}
  if(MODE==0)madvise(P+o,share,23);
  else if(MODE==1)for(size_t k=0;k<share;k+=sizeof SRC)memcpy(P+o+k,SRC,sizeof SRC);
  else{char*buf=malloc(sizeof SRC);for(size_t k=0;k<share;k+=sizeof SRC)if(pread(FD,buf,sizeof SRC,o+k)<=0)break;free(buf);}
  return 0;}
static double run(int threads,int mode){T=threads;MODE=mode;pthread_t t[64];double t0=now();for(long i=0;i<T;i++)pthread_create(&t[i],0,work,(void*)i);for(int i=0;i<T;i++)pthread_join(t[i],0);return now()-t0;}
static char*memfd(void){int fd=memfd_create("s",0);ftruncate(fd,N);char*p=mmap(0,N,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);close(fd);return p;}
static char*anon(void){char*p=mmap(0,N,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);madvise(p,N,MADV_HUGEPAGE);return p;}
int main(int argc,char**argv){N=(size_t)(argc>1?atoi(argv[1]):16)<<30;memset(SRC,7,sizeof SRC);
  int th[]={8,16,32};
  for(int i=0;i<3;i++){P=memfd();double a=run(th[i],0);munmap(P,N);P=memfd();double b=run(th[i],1);munmap(P,N);P=anon();double c=run(th[i],1);munmap(P,N);
    printf("%2d threads, %zu GiB: memfd populate %.2f s (%.1f GB/s), memfd written %.2f s (%.1f GB/s), anon THP written %.2f s (%.1f GB/s)\n",th[i],N>>30,a,N/1e9/a,b,N/1e9/b,c,N/1e9/c);fflush(stdout);}
  for(int i=1;i<3;i++){double d=run(th[i],3);for(int k=0;k<th[i];k++)munmap(PT[k],N/th[i]);printf("%2d threads, a memfd each, written: %.2f s (%.1f GB/s)\n",th[i],d,N/1e9/d);fflush(stdout);}
  { int fd=memfd_create("f",0);ftruncate(fd,N);double a=now();int r=fallocate(fd,0,0,N);double b=now();P=mmap(0,N,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);close(fd);double c=run(16,0);double d=run(16,1);munmap(P,N);
    printf("memfd fallocate %.2f s (r=%d), then populate 16 threads %.2f s, then written 16 threads %.2f s\n",b-a,r,c,d);fflush(stdout);}
  { int fd=memfd_create("h",MFD_HUGETLB);int r=fd<0?-1:ftruncate(fd,1<<30);printf("MFD_HUGETLB: fd %d, 1 GiB ftruncate %d\n",fd,r);}
  const char*path=argc>2?argv[2]:"/tmp/staging_fill.dat";FD=open(path,O_RDWR|O_CREAT|O_TRUNC,0600);size_t fileN=N/2;
  for(size_t k=0;k<fileN;k+=sizeof SRC)if(write(FD,SRC,sizeof SRC)<0)break;fdatasync(FD);size_t keep=N;N=fileN;
  int rt[]={1,4,16};for(int i=0;i<3;i++){double r=run(rt[i],2);printf("read %zu GiB from the page cache, %2d threads, 16 MiB preads: %.2f s (%.1f GB/s)\n",N>>30,rt[i],r,N/1e9/r);fflush(stdout);}
  N=keep;close(FD);unlink(path);return 0;}
