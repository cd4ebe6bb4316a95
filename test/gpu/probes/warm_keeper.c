// Is the driver's cold start (cuInit 0.3 s in a fresh process while the
// GPU's only user is checkpointed) avoided by another process that keeps
// the driver open, and by how little: cuInit only, or a context too? And
// does such a keeper change the checkpoint's and the restore's own time?
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static pid_t spawn(const char*op,int pid,int wait){char p[32];snprintf(p,32,"%d",pid);char*argv[]={"/proc/self/exe",(char*)op,p,0};pid_t c;posix_spawn(&c,"/proc/self/exe",0,0,argv,environ);int st;if(wait)waitpid(c,&st,0);return c;}
static int child(const char*op,int pid){
  if(!strncmp(op,"keep-",5)){ /* a keeper: holds what op names until killed */
    if(!strcmp(op,"keep-nvml")){void*h=dlopen("libnvidia-ml.so.1",RTLD_NOW);int(*init)(void)=dlsym(h,"nvmlInit_v2");init();}
    else {cuInit(0);CUdevice d;cuDeviceGet(&d,0);
      if(!strcmp(op,"keep-ctx")){CUcontext c;cuDevicePrimaryCtxRetain(&c,d);cuCtxSetCurrent(c);cuCtxSynchronize();}
      if(!strcmp(op,"keep-dev1ctx")){cuDeviceGet(&d,1);CUcontext c;cuDevicePrimaryCtxRetain(&c,d);cuCtxSetCurrent(c);cuCtxSynchronize();}}
    pause();return 0;}
  double a=now();int r=cuInit(0);double b=now();printf("    %s: cuInit %.3f s (%d)",op,b-a,r);
  CUcheckpointLockArgs la={0};la.timeoutMs=60000;CUcheckpointCheckpointArgs ca={0};CUcheckpointRestoreArgs ra={0};CUcheckpointUnlockArgs ua={0};
  if(!strcmp(op,"ckpt")){double t=now();int r1=cuCheckpointProcessLock(pid,&la);double t1=now();int r2=cuCheckpointProcessCheckpoint(pid,&ca);printf(" lock %.3f(%d) checkpoint %.3f(%d)",t1-t,r1,now()-t1,r2);}
  if(!strcmp(op,"rest")){double t=now();int r1=cuCheckpointProcessRestore(pid,&ra);double t1=now();int r2=cuCheckpointProcessUnlock(pid,&ua);printf(" restore %.3f(%d) unlock %.3f(%d)",t1-t,r1,now()-t1,r2);}
  printf("\n");fflush(stdout);return 0;}
int main(int argc,char**argv){
  if(argc>2)return child(argv[1],atoi(argv[2]));
  alarm(150);
  cuInit(0);CUdevice d;cuDeviceGet(&d,0);CUcontext c;cuDevicePrimaryCtxRetain(&c,d);cuCtxSetCurrent(c);CUdeviceptr P;size_t N=256<<20;cuMemAlloc(&P,N);cuMemsetD8(P,7,N);cuCtxSynchronize();
  int me=getpid();const char*K[]={"none","keep-init","keep-nvml","keep-ctx","keep-dev1ctx","none"};
  for(int k=0;k<6;k++){printf("keeper %s\n",K[k]);fflush(stdout);pid_t kp=0;if(strcmp(K[k],"none")){kp=spawn(K[k],me,0);usleep(1500000);}
    for(int i=0;i<2;i++){spawn("ckpt",me,1);usleep(300000);spawn("init",me,1);spawn("rest",me,1);}
    if(kp){kill(kp,SIGKILL);waitpid(kp,0,0);}
    unsigned char b=0;cuMemcpyDtoH(&b,P+N-1,1);printf("  data byte %d\n",b);fflush(stdout);}
  return 0;}
