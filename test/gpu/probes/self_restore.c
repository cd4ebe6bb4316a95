// Can a process drive the driver's checkpoint API on itself (restore, and
// lock + checkpoint, from a thread of its own), and what do cuInit and
// nvmlInit cost in a fresh process while the GPU's only user is
// checkpointed? Resume's controller pays that cuInit (0.3 s on some hosts).
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static void spawn(const char*op,int pid){char p[32];snprintf(p,32,"%d",pid);char*argv[]={"/proc/self/exe",(char*)op,p,0};pid_t c;posix_spawn(&c,"/proc/self/exe",0,0,argv,environ);int st;waitpid(c,&st,0);}
static int child(const char*op,int pid){
  double a=now();
  if(!strcmp(op,"nvml")){void*h=dlopen("libnvidia-ml.so.1",RTLD_NOW);int(*init)(void)=dlsym(h,"nvmlInit_v2");int(*get)(unsigned,void**)=dlsym(h,"nvmlDeviceGetHandleByIndex_v2");
    int r=init();double b=now();void*d=0;int r2=get(0,&d);printf("  fresh process: nvmlInit %.3f s (%d), handle %.3f s (%d)\n",b-a,r,now()-b,r2);return 0;}
  int r=cuInit(0);double b=now();printf("  fresh process %s: cuInit %.3f s (%d)",op,b-a,r);
  CUcheckpointLockArgs la={0};la.timeoutMs=60000;CUcheckpointCheckpointArgs ca={0};CUcheckpointRestoreArgs ra={0};CUcheckpointUnlockArgs ua={0};
  if(!strcmp(op,"ckpt")){double t=now();int r1=cuCheckpointProcessLock(pid,&la);double t1=now();int r2=cuCheckpointProcessCheckpoint(pid,&ca);printf(" lock %.3f(%d) checkpoint %.3f(%d)",t1-t,r1,now()-t1,r2);}
  if(!strcmp(op,"rest")){double t=now();int r1=cuCheckpointProcessRestore(pid,&ra);double t1=now();int r2=cuCheckpointProcessUnlock(pid,&ua);printf(" restore %.3f(%d) unlock %.3f(%d)",t1-t,r1,now()-t1,r2);}
  printf("\n");fflush(stdout);return 0;}
static int mode; static double took[3]; static int res[3];
static void*self_op(void*x){(void)x;int me=getpid();
  CUcheckpointLockArgs la={0};la.timeoutMs=60000;CUcheckpointCheckpointArgs ca={0};CUcheckpointRestoreArgs ra={0};CUcheckpointUnlockArgs ua={0};
  double t=now();
  if(mode==0){res[0]=cuCheckpointProcessRestore(me,&ra);took[0]=now()-t;t=now();res[1]=cuCheckpointProcessUnlock(me,&ua);took[1]=now()-t;}
  else{res[0]=cuCheckpointProcessLock(me,&la);took[0]=now()-t;t=now();res[1]=cuCheckpointProcessCheckpoint(me,&ca);took[1]=now()-t;}
  return 0;}
static void self(int m){mode=m;pthread_t t;pthread_create(&t,0,self_op,0);pthread_join(t,0);
  printf("  self %s: %s %.3f s (%d), %s %.3f s (%d)\n",m?"checkpoint":"restore",m?"lock":"restore",took[0],res[0],m?"checkpoint":"unlock",took[1],res[1]);fflush(stdout);}
static CUdeviceptr P;static size_t N=256<<20;
static int check(void){unsigned char b[4096];int r=cuMemcpyDtoH(b,P+N-4096,4096);return r?-r:b[17];}
int main(int argc,char**argv){
  if(argc>2)return child(argv[1],atoi(argv[2]));
  alarm(120);
  cuInit(0);CUdevice d;cuDeviceGet(&d,0);CUcontext c;cuDevicePrimaryCtxRetain(&c,d);cuCtxSetCurrent(c);cuMemAlloc(&P,N);cuMemsetD8(P,7,N);cuCtxSynchronize();
  int me=getpid();printf("pid %d, data byte %d\n",me,check());
  printf("A. external checkpoint, fresh processes probe the cold GPU, then the process restores itself (x3)\n");
  for(int i=0;i<3;i++){spawn("ckpt",me);spawn("init",me);spawn("nvml",me);self(0);
    if(res[0]){printf("  self restore refused: external restore\n");spawn("rest",me);}
    printf("  after: data byte %d\n",check());fflush(stdout);}
  printf("B. external checkpoint and external restore (x2), for comparison\n");
  for(int i=0;i<2;i++){spawn("ckpt",me);spawn("rest",me);printf("  after: data byte %d\n",check());}
  printf("C. the process checkpoints itself, then restores itself (x2)\n");
  for(int i=0;i<2;i++){self(1);if(res[0]||res[1]){printf("  self checkpoint refused\n");break;}
    spawn("init",me);self(0);if(res[0])spawn("rest",me);printf("  after: data byte %d\n",check());}
  printf("D. bare context: external checkpoint with the allocation freed (x2)\n");
  cuMemFree(P);cuCtxSynchronize();
  for(int i=0;i<2;i++){spawn("ckpt",me);self(0);if(res[0])spawn("rest",me);}
  return 0;}
