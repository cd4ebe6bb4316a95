// The few Vulkan 1.1 declarations the BAR route (bar_map.cc) needs, as the
// Vulkan specification defines them, so that building the addon needs no
// Vulkan SDK: libvulkan.so.1 is opened at run time, where it is installed.
// test/c/vulkan_layout.cc checks these layouts against the real headers
// (make check-vulkan-layout VULKAN_INCLUDE=...).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuckpt::vk {

using Instance = struct InstanceT*;
using PhysicalDevice = struct PhysicalDeviceT*;
using Device = struct DeviceT*;
using DeviceMemory = uint64_t;  // non-dispatchable handle
using Result = int32_t;
using Flags = uint32_t;
using DeviceSize = uint64_t;

constexpr Result SUCCESS = 0;
constexpr uint32_t API_VERSION_1_1 = (1u << 22) | (1u << 12);

enum StructureType : int32_t {
  APPLICATION_INFO = 0,
  INSTANCE_CREATE_INFO = 1,
  DEVICE_QUEUE_CREATE_INFO = 2,
  DEVICE_CREATE_INFO = 3,
  MEMORY_ALLOCATE_INFO = 5,
  PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001,
  PHYSICAL_DEVICE_ID_PROPERTIES = 1000071004,
  IMPORT_MEMORY_FD_INFO_KHR = 1000074000,
};

constexpr Flags MEMORY_PROPERTY_DEVICE_LOCAL = 0x1;
constexpr Flags MEMORY_PROPERTY_HOST_VISIBLE = 0x2;
constexpr Flags MEMORY_PROPERTY_HOST_COHERENT = 0x4;
constexpr uint32_t EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD = 0x1;

struct ApplicationInfo {
  StructureType sType;
  const void* pNext;
  const char* pApplicationName;
  uint32_t applicationVersion;
  const char* pEngineName;
  uint32_t engineVersion;
  uint32_t apiVersion;
};

struct InstanceCreateInfo {
  StructureType sType;
  const void* pNext;
  Flags flags;
  const ApplicationInfo* pApplicationInfo;
  uint32_t enabledLayerCount;
  const char* const* ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char* const* ppEnabledExtensionNames;
};

struct DeviceQueueCreateInfo {
  StructureType sType;
  const void* pNext;
  Flags flags;
  uint32_t queueFamilyIndex;
  uint32_t queueCount;
  const float* pQueuePriorities;
};

struct DeviceCreateInfo {
  StructureType sType;
  const void* pNext;
  Flags flags;
  uint32_t queueCreateInfoCount;
  const DeviceQueueCreateInfo* pQueueCreateInfos;
  uint32_t enabledLayerCount;
  const char* const* ppEnabledLayerNames;
  uint32_t enabledExtensionCount;
  const char* const* ppEnabledExtensionNames;
  const void* pEnabledFeatures;
};

struct PhysicalDeviceIDProperties {
  StructureType sType;
  void* pNext;
  uint8_t deviceUUID[16];
  uint8_t driverUUID[16];
  uint8_t deviceLUID[8];
  uint32_t deviceNodeMask;
  uint32_t deviceLUIDValid;
};

// VkPhysicalDeviceProperties2 with its properties (824 bytes in Vulkan 1.3)
// as room the driver fills: only the chained ID properties are read.
struct PhysicalDeviceProperties2 {
  StructureType sType;
  void* pNext;
  alignas(8) uint8_t properties[1024];
};

struct MemoryType {
  Flags propertyFlags;
  uint32_t heapIndex;
};

struct MemoryHeap {
  DeviceSize size;
  Flags flags;
};

struct PhysicalDeviceMemoryProperties {
  uint32_t memoryTypeCount;
  MemoryType memoryTypes[32];
  uint32_t memoryHeapCount;
  MemoryHeap memoryHeaps[16];
};

struct MemoryAllocateInfo {
  StructureType sType;
  const void* pNext;
  DeviceSize allocationSize;
  uint32_t memoryTypeIndex;
};

struct ImportMemoryFdInfoKHR {
  StructureType sType;
  const void* pNext;
  uint32_t handleType;
  int fd;
};

using VoidFunction = void (*)();
using GetInstanceProcAddr = VoidFunction (*)(Instance, const char*);
using GetDeviceProcAddr = VoidFunction (*)(Device, const char*);
using CreateInstance = Result (*)(const InstanceCreateInfo*, const void*, Instance*);
using DestroyInstance = void (*)(Instance, const void*);
using EnumeratePhysicalDevices = Result (*)(Instance, uint32_t*, PhysicalDevice*);
using GetPhysicalDeviceProperties2 = void (*)(PhysicalDevice, PhysicalDeviceProperties2*);
using GetPhysicalDeviceMemoryProperties = void (*)(PhysicalDevice, PhysicalDeviceMemoryProperties*);
using CreateDevice = Result (*)(PhysicalDevice, const DeviceCreateInfo*, const void*, Device*);
using DestroyDevice = void (*)(Device, const void*);
using AllocateMemory = Result (*)(Device, const MemoryAllocateInfo*, const void*, DeviceMemory*);
using FreeMemory = void (*)(Device, DeviceMemory, const void*);
using MapMemory = Result (*)(Device, DeviceMemory, DeviceSize, DeviceSize, Flags, void**);
using UnmapMemory = void (*)(Device, DeviceMemory);

}  // namespace gpuckpt::vk
