// Is the driver restore's extra 0.3 s a per-calling-process cost?
#define _GNU_SOURCE
#include <cuda.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static void run(const char*op,int pid){char p[32];snprintf(p,32,"%d",pid);char*argv[]={"/proc/self/exe",(char*)op,p,0};pid_t c;posix_spawn(&c,"/proc/self/exe",0,0,argv,environ);int st;waitpid(c,&st,0);}
int main(int argc,char**argv){
  if(argc>2){int pid=atoi(argv[2]);const char*op=argv[1];double a=now();cuInit(0);double b=now();
    CUcheckpointLockArgs la={0};la.timeoutMs=60000;CUcheckpointCheckpointArgs ca={0};CUcheckpointRestoreArgs ra={0};CUcheckpointUnlockArgs ua={0};CUprocessState st;
    printf("%-14s cuInit %.3f",op,b-a);
    if(strstr(op,"ckpt")){double t=now();int r1=cuCheckpointProcessLock(pid,&la);double t1=now();int r2=cuCheckpointProcessCheckpoint(pid,&ca);printf(" lock %.3f(%d) checkpoint %.3f(%d)",t1-t,r1,now()-t1,r2);}
    if(strstr(op,"state")){double t=now();int r=cuCheckpointProcessGetState(pid,&st);printf(" getState %.3f(%d)",now()-t,r);double t2=now();r=cuCheckpointProcessGetState(pid,&st);printf(" again %.3f(%d)",now()-t2,r);}
    if(strstr(op,"rest")){double t=now();int r1=cuCheckpointProcessRestore(pid,&ra);double t1=now();int r2=cuCheckpointProcessUnlock(pid,&ua);printf(" restore %.3f(%d) unlock %.3f(%d)",t1-t,r1,now()-t1,r2);}
    printf("\n");fflush(stdout);return 0;}
  cuInit(0);CUdevice d;cuDeviceGet(&d,0);CUcontext c;cuDevicePrimaryCtxRetain(&c,d);cuCtxSetCurrent(c);CUdeviceptr p;cuMemAlloc(&p,64<<20);cuMemsetD8(p,1,64<<20);cuCtxSynchronize();
  int me=getpid();
  for(int i=0;i<2;i++){run("ckpt",me);run("rest",me);}
  for(int i=0;i<2;i++){run("ckpt",me);run("state+rest",me);}
  for(int i=0;i<2;i++){run("ckpt+rest",me);}
  run("ckpt",me);sleep(2);run("rest",me);
  run("ckpt",me);run("state",me);run("rest",me);
  unsigned char b=0;int r=cuMemcpyDtoH(&b,p,1);printf("after: copy %d byte %d\n",r,b);return 0;}
