// native/src/vulkan_min.h against the Vulkan SDK's own headers: every
// struct the BAR route passes to the driver has the same size and field
// offsets, every constant the same value. Compiles or fails; nothing runs.
//   make check-vulkan-layout VULKAN_INCLUDE=/usr/include
#include <vulkan/vulkan.h>

#include <cstddef>

#include "vulkan_min.h"

namespace vk = gpuckpt::vk;

#define SAME(ours, theirs) static_assert(sizeof(vk::ours) == sizeof(theirs), #ours " size")
#define AT(ours, theirs, field) static_assert(offsetof(vk::ours, field) == offsetof(theirs, field), #ours "." #field)

SAME(ApplicationInfo, VkApplicationInfo);
AT(ApplicationInfo, VkApplicationInfo, apiVersion);
SAME(InstanceCreateInfo, VkInstanceCreateInfo);
AT(InstanceCreateInfo, VkInstanceCreateInfo, pApplicationInfo);
AT(InstanceCreateInfo, VkInstanceCreateInfo, ppEnabledExtensionNames);
SAME(DeviceQueueCreateInfo, VkDeviceQueueCreateInfo);
AT(DeviceQueueCreateInfo, VkDeviceQueueCreateInfo, pQueuePriorities);
SAME(DeviceCreateInfo, VkDeviceCreateInfo);
AT(DeviceCreateInfo, VkDeviceCreateInfo, ppEnabledExtensionNames);
AT(DeviceCreateInfo, VkDeviceCreateInfo, pEnabledFeatures);
SAME(PhysicalDeviceIDProperties, VkPhysicalDeviceIDProperties);
AT(PhysicalDeviceIDProperties, VkPhysicalDeviceIDProperties, deviceUUID);
static_assert(sizeof(vk::PhysicalDeviceProperties2) >= sizeof(VkPhysicalDeviceProperties2), "room for the properties");
AT(PhysicalDeviceProperties2, VkPhysicalDeviceProperties2, pNext);
AT(PhysicalDeviceProperties2, VkPhysicalDeviceProperties2, properties);
SAME(PhysicalDeviceMemoryProperties, VkPhysicalDeviceMemoryProperties);
AT(PhysicalDeviceMemoryProperties, VkPhysicalDeviceMemoryProperties, memoryHeapCount);
AT(PhysicalDeviceMemoryProperties, VkPhysicalDeviceMemoryProperties, memoryHeaps);
SAME(MemoryAllocateInfo, VkMemoryAllocateInfo);
AT(MemoryAllocateInfo, VkMemoryAllocateInfo, memoryTypeIndex);
SAME(ImportMemoryFdInfoKHR, VkImportMemoryFdInfoKHR);
AT(ImportMemoryFdInfoKHR, VkImportMemoryFdInfoKHR, fd);
static_assert(int(vk::APPLICATION_INFO) == int(VK_STRUCTURE_TYPE_APPLICATION_INFO));
static_assert(int(vk::INSTANCE_CREATE_INFO) == int(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO));
static_assert(int(vk::DEVICE_QUEUE_CREATE_INFO) == int(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO));
static_assert(int(vk::DEVICE_CREATE_INFO) == int(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO));
static_assert(int(vk::MEMORY_ALLOCATE_INFO) == int(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO));
static_assert(int(vk::PHYSICAL_DEVICE_PROPERTIES_2) == int(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2));
static_assert(int(vk::PHYSICAL_DEVICE_ID_PROPERTIES) == int(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES));
static_assert(int(vk::IMPORT_MEMORY_FD_INFO_KHR) == int(VK_STRUCTURE_TYPE_IMPORT_MEMORY_FD_INFO_KHR));
static_assert(vk::API_VERSION_1_1 == VK_API_VERSION_1_1);
static_assert(vk::MEMORY_PROPERTY_DEVICE_LOCAL == VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
static_assert(vk::MEMORY_PROPERTY_HOST_VISIBLE == VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
static_assert(vk::MEMORY_PROPERTY_HOST_COHERENT == VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
static_assert(vk::EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD == VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT);

int main() { return 0; }
