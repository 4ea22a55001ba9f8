// Debian bookworm's Vulkan headers (1.3.239) predate VK_EXT_layer_settings
// (1.3.261), which llama.cpp's Vulkan backend uses to configure the
// validation layer when it creates its instance. scripts/setup.sh puts this
// directory first on the include path only when the system's vulkan.hpp
// lacks the extension: it includes that header, then declares the three
// types with the C ABI layout of VkLayerSettingEXT and
// VkLayerSettingsCreateInfoEXT. The structure is only passed in pNext, which
// a loader or driver that does not know it ignores.
#pragma once
#include_next <vulkan/vulkan.hpp>

#include <cstdint>
#include <vector>

namespace vk {
enum class LayerSettingTypeEXT : int32_t {
    eBool32 = 0,
    eInt32 = 1,
    eInt64 = 2,
    eUint32 = 3,
    eUint64 = 4,
    eFloat32 = 5,
    eFloat64 = 6,
    eString = 7,
};

struct LayerSettingEXT {
    const char * pLayerName;
    const char * pSettingName;
    LayerSettingTypeEXT type;
    uint32_t valueCount;
    const void * pValues;
};

struct LayerSettingsCreateInfoEXT {
    explicit LayerSettingsCreateInfoEXT(const std::vector<LayerSettingEXT> & settings)
        : settingCount(static_cast<uint32_t>(settings.size())), pSettings(settings.data()) {}
    // VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT
    StructureType sType = static_cast<StructureType>(1000496000);
    const void * pNext = nullptr;
    uint32_t settingCount;
    const LayerSettingEXT * pSettings;
};
}  // namespace vk
