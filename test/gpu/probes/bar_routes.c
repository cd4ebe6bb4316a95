// Which route maps GPU memory into the CPU here (issue 28), tried on what
// the pool is made of: a VMM allocation (cuMemCreate) exported as a POSIX fd.
//   vulkan   the fd imported into Vulkan (VK_KHR_external_memory_fd, opaque
//            fd) as each memory type that is device-local and host-visible,
//            then vkMapMemory: values CUDA wrote read back, then read and
//            write throughput and latency against DMA (cuMemcpy).
//   dma-buf  cuMemGetHandleForAddressRange(DMA_BUF_FD), then mmap.
//   gdrcopy  /dev/gdrdrv present.
// libcuda and libvulkan are opened at run time (the Vulkan loader can be
// carried: see the device README). Build where the Vulkan headers are:
//   cc -O2 -I$CUDA_HOME/include -I<vulkan headers> -o bar_routes test/gpu/probes/bar_routes.c -ldl
// Run: ./bar_routes [MiB=64]
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <smmintrin.h>
#include <vulkan/vulkan.h>

#define CU(name) static __typeof__(&name) p_##name
CU(cuInit);
CU(cuDeviceGet);
CU(cuDeviceGetUuid);
CU(cuDevicePrimaryCtxRetain);
CU(cuCtxSetCurrent);
CU(cuMemCreate);
CU(cuMemExportToShareableHandle);
CU(cuMemAddressReserve);
CU(cuMemMap);
CU(cuMemSetAccess);
CU(cuMemsetD32_v2);
CU(cuCtxSynchronize);
CU(cuMemcpyDtoH_v2);
CU(cuMemcpyHtoD_v2);
CU(cuMemGetHandleForAddressRange);
CU(cuMemAllocHost_v2);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        CUresult r_ = (x);                                                                                             \
        if (r_) {                                                                                                      \
            printf("cuda: %s = %d\n", #x, (int)r_);                                                                    \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

static PFN_vkGetInstanceProcAddr gipa;
#define VK(inst, name) PFN_##name name = (PFN_##name)gipa(inst, #name)

/* Reads through a write-combining mapping with streaming loads (MOVNTDQA),
 * 64 bytes at a time: the only loads that are not one PCIe round trip each. */
__attribute__((target("sse4.1"))) static void stream_read(void *dst, const volatile void *src, size_t n)
{
    __m128i *d = dst;
    __m128i *s = (__m128i *)src;
    for (size_t i = 0; i < n / 16; i += 4) {
        __m128i a = _mm_stream_load_si128(s + i), b = _mm_stream_load_si128(s + i + 1);
        __m128i c = _mm_stream_load_si128(s + i + 2), e = _mm_stream_load_si128(s + i + 3);
        _mm_store_si128(d + i, a);
        _mm_store_si128(d + i + 1, b);
        _mm_store_si128(d + i + 2, c);
        _mm_store_si128(d + i + 3, e);
    }
}

/* Throughput of n bytes each way through the mapping, and latency of 4 KiB reads. */
static void measure_map(volatile uint32_t *map, size_t bytes, CUdeviceptr dptr, void *host)
{
    for (size_t size = 4096; size <= bytes; size *= 16) {
        int reps = size <= (1 << 20) ? 50 : 3;
        double t0 = now();
        for (int i = 0; i < reps; i++)
            stream_read(host, map, size);
        double srd = (now() - t0) / reps;
        printf("measure bar streaming read: bytes=%zu us=%.1f GBps=%.3f\n", size, srd * 1e6, size / srd / 1e9);
        t0 = now();
        for (int i = 0; i < reps; i++)
            memcpy(host, (const void *)map, size);
        double rd = (now() - t0) / reps;
        t0 = now();
        for (int i = 0; i < reps; i++)
            memcpy((void *)map, host, size);
        __sync_synchronize();
        double wr = (now() - t0) / reps;
        t0 = now();
        for (int i = 0; i < reps; i++)
            p_cuMemcpyDtoH_v2(host, dptr, size);
        double dma_rd = (now() - t0) / reps;
        t0 = now();
        for (int i = 0; i < reps; i++)
            p_cuMemcpyHtoD_v2(dptr, host, size);
        double dma_wr = (now() - t0) / reps;
        printf("measure bar vs dma: bytes=%zu bar_read_us=%.1f bar_read_GBps=%.3f bar_write_us=%.1f bar_write_GBps=%.3f "
               "dma_read_us=%.1f dma_read_GBps=%.3f dma_write_us=%.1f dma_write_GBps=%.3f\n",
               size, rd * 1e6, size / rd / 1e9, wr * 1e6, size / wr / 1e9, dma_rd * 1e6, size / dma_rd / 1e9,
               dma_wr * 1e6, size / dma_wr / 1e9);
    }
}

static int try_vulkan(int fd, size_t bytes, const CUuuid *uuid, CUdeviceptr dptr, void *host)
{
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
    if (!lib) {
        printf("route vulkan: no loader (%s)\n", dlerror());
        return 1;
    }
    gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    VK(NULL, vkCreateInstance);
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_1 };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    VkInstance inst;
    VkResult vr = vkCreateInstance(&ici, NULL, &inst);
    if (vr) {
        printf("route vulkan: vkCreateInstance = %d\n", vr);
        return 1;
    }
    VK(inst, vkEnumeratePhysicalDevices);
    VK(inst, vkGetPhysicalDeviceProperties2);
    VK(inst, vkGetPhysicalDeviceMemoryProperties);
    VK(inst, vkCreateDevice);
    VK(inst, vkGetDeviceProcAddr);
    uint32_t n = 16;
    VkPhysicalDevice pds[16];
    vkEnumeratePhysicalDevices(inst, &n, pds);
    VkPhysicalDevice pd = VK_NULL_HANDLE;
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceIDProperties id = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES };
        VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &id };
        vkGetPhysicalDeviceProperties2(pds[i], &p2);
        printf("# vulkan device %u: %s\n", i, p2.properties.deviceName);
        if (!memcmp(id.deviceUUID, uuid->bytes, 16))
            pd = pds[i];
    }
    if (!pd) {
        printf("route vulkan: no Vulkan device with the CUDA device's UUID (%u devices)\n", n);
        return 1;
    }
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        printf("# memory type %u: flags 0x%x heap %u (%llu MiB)\n", i, mp.memoryTypes[i].propertyFlags,
               mp.memoryTypes[i].heapIndex, (unsigned long long)(mp.memoryHeaps[mp.memoryTypes[i].heapIndex].size >> 20));
    float prio = 1;
    VkDeviceQueueCreateInfo q = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1, .pQueuePriorities = &prio };
    const char *ext[] = { "VK_KHR_external_memory_fd" };
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &q,
                               .enabledExtensionCount = 1, .ppEnabledExtensionNames = ext };
    VkDevice dev;
    if ((vr = vkCreateDevice(pd, &dci, NULL, &dev))) {
        printf("route vulkan: vkCreateDevice = %d\n", vr);
        return 1;
    }
    PFN_vkAllocateMemory vkAllocateMemory = (PFN_vkAllocateMemory)vkGetDeviceProcAddr(dev, "vkAllocateMemory");
    PFN_vkMapMemory vkMapMemory = (PFN_vkMapMemory)vkGetDeviceProcAddr(dev, "vkMapMemory");
    PFN_vkGetMemoryFdPropertiesKHR props = (PFN_vkGetMemoryFdPropertiesKHR)vkGetDeviceProcAddr(dev, "vkGetMemoryFdPropertiesKHR");
    if (props) {
        VkMemoryFdPropertiesKHR fp = { .sType = VK_STRUCTURE_TYPE_MEMORY_FD_PROPERTIES_KHR };
        vr = props(dev, VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT, fd, &fp);
        printf("# vkGetMemoryFdPropertiesKHR(opaque) = %d, types 0x%x\n", vr, fp.memoryTypeBits);
    }
    int mapped_any = 0;
    /* Device-local and host-visible first (a BAR of the GPU's memory), then the rest host-visible. */
    for (uint32_t k = 0; k < 2 * mp.memoryTypeCount; k++) {
        uint32_t t = k % mp.memoryTypeCount;
        VkMemoryPropertyFlags f = mp.memoryTypes[t].propertyFlags;
        int local = !!(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) || local != (k < mp.memoryTypeCount))
            continue;
        int dup_fd = dup(fd); /* the import takes it */
        VkImportMemoryFdInfoKHR imp = { .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_FD_INFO_KHR,
                                        .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT, .fd = dup_fd };
        VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &imp, .allocationSize = bytes, .memoryTypeIndex = t };
        VkDeviceMemory mem;
        vr = vkAllocateMemory(dev, &mai, NULL, &mem);
        if (vr) {
            printf("route vulkan: import as memory type %u (flags 0x%x) = %d\n", t, f, vr);
            close(dup_fd);
            continue;
        }
        void *map = NULL;
        vr = vkMapMemory(dev, mem, 0, bytes, 0, &map);
        if (vr) {
            printf("route vulkan: imported as type %u, vkMapMemory = %d\n", t, vr);
            continue;
        }
        volatile uint32_t *w = map;
        printf("route vulkan: WORKS as memory type %u (flags 0x%x): first words 0x%08x 0x%08x, last 0x%08x (CUDA wrote 0x5a5a0001)\n", t, f,
               w[0], w[1], w[bytes / 4 - 1]);
        measure_map(w, bytes, dptr, host);
        /* Written through the mapping, read by DMA: a poke reaches the GPU. */
        w[1] = 0xc0ffee01u;
        __sync_synchronize();
        uint32_t back[2] = { 0 };
        p_cuMemcpyDtoH_v2(back, dptr, sizeof(back));
        printf("route vulkan: a word written through the mapping reads back by DMA as 0x%08x (wrote 0xc0ffee01)\n", back[1]);
        mapped_any = 1;
    }
    return mapped_any ? 0 : 1;
}

int main(int argc, char **argv)
{
    size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        printf("no libcuda\n");
        return 1;
    }
#define LOAD(name) p_##name = (__typeof__(p_##name))dlsym(cuda, #name)
    LOAD(cuInit);
    LOAD(cuDeviceGet);
    LOAD(cuDeviceGetUuid);
    LOAD(cuDevicePrimaryCtxRetain);
    LOAD(cuCtxSetCurrent);
    LOAD(cuMemCreate);
    LOAD(cuMemExportToShareableHandle);
    LOAD(cuMemAddressReserve);
    LOAD(cuMemMap);
    LOAD(cuMemSetAccess);
    LOAD(cuMemsetD32_v2);
    LOAD(cuCtxSynchronize);
    LOAD(cuMemcpyDtoH_v2);
    LOAD(cuMemcpyHtoD_v2);
    LOAD(cuMemGetHandleForAddressRange);
    LOAD(cuMemAllocHost_v2);
    CUdevice d;
    CUcontext ctx;
    CUuuid uuid;
    CK(p_cuInit(0));
    CK(p_cuDeviceGet(&d, 0));
    CK(p_cuDeviceGetUuid(&uuid, d));
    CK(p_cuDevicePrimaryCtxRetain(&ctx, d));
    CK(p_cuCtxSetCurrent(ctx));
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
    CUmemGenericAllocationHandle h;
    CK(p_cuMemCreate(&h, bytes, &prop, 0));
    CUdeviceptr va;
    CK(p_cuMemAddressReserve(&va, bytes, 0, 0, 0));
    CK(p_cuMemMap(va, bytes, 0, h, 0));
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(p_cuMemSetAccess(va, bytes, &acc, 1));
    CK(p_cuMemsetD32_v2(va, 0x5a5a0001u, bytes / 4));
    CK(p_cuCtxSynchronize());
    int fd = -1;
    CK(p_cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    void *host;
    CK(p_cuMemAllocHost_v2(&host, bytes));

    /* dma-buf of the same range, then mmap */
    int dmabuf = -1;
    CUresult r = p_cuMemGetHandleForAddressRange ? p_cuMemGetHandleForAddressRange(&dmabuf, va, bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)
                                                 : CUDA_ERROR_NOT_SUPPORTED;
    if (r)
        printf("route dma-buf: cuMemGetHandleForAddressRange = %d\n", (int)r);
    else {
        void *m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, dmabuf, 0);
        if (m == MAP_FAILED)
            printf("route dma-buf: mmap refused: %s\n", strerror(errno));
        else
            printf("route dma-buf: WORKS: first word 0x%08x\n", *(volatile uint32_t *)m);
    }
    printf("route gdrcopy: %s\n", access("/dev/gdrdrv", F_OK) == 0 ? "/dev/gdrdrv present" : "no /dev/gdrdrv (module not loaded)");
    return try_vulkan(fd, bytes, &uuid, va, host);
}
