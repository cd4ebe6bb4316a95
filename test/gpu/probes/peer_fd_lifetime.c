// Does an exported POSIX fd keep GPU memory (and its contents) alive after
// the exporting process released its handle and exited? And does cuMemCreate
// need a current context? The parent allocates on GPU 1, (with a context)
// writes a pattern, exports, releases, sends the fds and exits; the child
// (on GPU 0) imports them only after the parent is gone and reads them back.
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK (32ull << 20)
#define N 8
static const char *who = "?";
#define CK(x) do{CUresult r_=(x);if(r_){const char*s;cuGetErrorString(r_,&s);printf("%s:%d %s = %d %s\n",who,__LINE__,#x,r_,s);fflush(stdout);return 1;}}while(0)

static int parent(int s, int with_ctx){
  who="exporter";CK(cuInit(0));CUdevice d;CK(cuDeviceGet(&d,1));CUcontext c=0;
  if(with_ctx){CK(cuDevicePrimaryCtxRetain(&c,d));CK(cuCtxSetCurrent(c));}
  CUmemAllocationProp pr={0};pr.type=CU_MEM_ALLOCATION_TYPE_PINNED;pr.location.type=CU_MEM_LOCATION_TYPE_DEVICE;pr.location.id=1;pr.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  int fds[N];
  for(int i=0;i<N;i++){CUmemGenericAllocationHandle h;CK(cuMemCreate(&h,CHUNK,&pr,0));CK(cuMemExportToShareableHandle(&fds[i],h,CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0));
    if(with_ctx){CUdeviceptr va;CUmemAccessDesc a={{CU_MEM_LOCATION_TYPE_DEVICE,1},CU_MEM_ACCESS_FLAGS_PROT_READWRITE};CK(cuMemAddressReserve(&va,CHUNK,0,0,0));CK(cuMemMap(va,CHUNK,0,h,0));CK(cuMemSetAccess(va,CHUNK,&a,1));CK(cuMemsetD32(va,0x77000000u|i,CHUNK/4));CK(cuCtxSynchronize());CK(cuMemUnmap(va,CHUNK));CK(cuMemAddressFree(va,CHUNK));}
    CK(cuMemRelease(h));}
  printf("exporter (context %d): %d chunks created, exported, released\n",with_ctx,N);fflush(stdout);
  char cm[CMSG_SPACE(sizeof fds)];memset(cm,0,sizeof cm);char b='f';struct iovec v={&b,1};struct msghdr m={0};m.msg_iov=&v;m.msg_iovlen=1;m.msg_control=cm;m.msg_controllen=sizeof cm;
  struct cmsghdr*h=CMSG_FIRSTHDR(&m);h->cmsg_level=SOL_SOCKET;h->cmsg_type=SCM_RIGHTS;h->cmsg_len=CMSG_LEN(sizeof fds);memcpy(CMSG_DATA(h),fds,sizeof fds);
  if(sendmsg(s,&m,0)!=1)return 1;
  if(with_ctx)CK(cuDevicePrimaryCtxRelease(d));
  return 0;}

static int child(int s, int with_ctx){
  who="importer";int fds[N];char cm[CMSG_SPACE(sizeof fds)];char b;struct iovec v={&b,1};struct msghdr m={0};m.msg_iov=&v;m.msg_iovlen=1;m.msg_control=cm;m.msg_controllen=sizeof cm;
  if(recvmsg(s,&m,0)!=1)return 1;memcpy(fds,CMSG_DATA(CMSG_FIRSTHDR(&m)),sizeof fds);
  char e;if(read(s,&e,1)!=0){printf("importer: expected EOF\n");return 1;} /* the exporter is gone */
  usleep(200000);
  CK(cuInit(0));CUdevice d;CK(cuDeviceGet(&d,0));CUcontext c;CK(cuDevicePrimaryCtxRetain(&c,d));CK(cuCtxSetCurrent(c));
  CUdeviceptr va;CK(cuMemAddressReserve(&va,N*CHUNK,0,0,0));CUmemAccessDesc a={{CU_MEM_LOCATION_TYPE_DEVICE,0},CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  int bad=0;
  for(int i=0;i<N;i++){CUmemGenericAllocationHandle h;CK(cuMemImportFromShareableHandle(&h,(void*)(long)fds[i],CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUmemAllocationProp p;CK(cuMemGetAllocationPropertiesFromHandle(&p,h));if(i==0){printf("importer: chunk 0 lives on device %d\n",p.location.id);}
    CK(cuMemMap(va+i*CHUNK,CHUNK,0,h,0));CK(cuMemRelease(h));}
  CK(cuMemSetAccess(va,N*CHUNK,&a,1));
  for(int i=0;i<N;i++){unsigned x[2];CK(cuMemcpyDtoH(x,va+i*CHUNK+CHUNK-8,8));if(with_ctx&&(x[0]!=(0x77000000u|i)||x[1]!=x[0]))bad++;}
  printf("importer: %d chunks imported after the exporter exited (context %d); %d with the wrong contents\n",N,with_ctx,bad);
  /* Also: is the fd still usable for a second import after one import's handle and mapping were dropped? */
  CK(cuMemUnmap(va,N*CHUNK));
  CUmemGenericAllocationHandle h2;CK(cuMemImportFromShareableHandle(&h2,(void*)(long)fds[0],CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));CK(cuMemMap(va,CHUNK,0,h2,0));CK(cuMemSetAccess(va,CHUNK,&a,1));
  unsigned x[2];CK(cuMemcpyDtoH(x,va+CHUNK-8,8));printf("importer: second import of fd 0 after unmapping: %s\n",!with_ctx||x[0]==0x77000000u?"contents kept":"contents LOST");
  return bad?1:0;}

int main(void){
  int rc=0;
  for(int with_ctx=0;with_ctx<2;with_ctx++){int sv[2];socketpair(AF_UNIX,SOCK_STREAM,0,sv);
    pid_t p=fork();if(!p){close(sv[1]);int r=parent(sv[0],with_ctx);fflush(stdout);_exit(r);}
    pid_t q=fork();if(!q){close(sv[0]);int r=child(sv[1],with_ctx);fflush(stdout);_exit(r);}
    close(sv[0]);close(sv[1]);int st;waitpid(p,&st,0);int a=WEXITSTATUS(st);waitpid(q,&st,0);int b=WEXITSTATUS(st);printf("exit: exporter %d importer %d\n",a,b);fflush(stdout);rc|=a|b;}
  return rc;}
