// Built-in model presets: the architecture facts of the public DeepSeek checkpoints (as their
// config.json states them) and small models that run on a CPU.
#pragma once

#include <string>
#include <vector>

namespace mlaserve {

// config.json text of a preset, or nullptr for an unknown name.
const char* model_preset_json(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace mlaserve
