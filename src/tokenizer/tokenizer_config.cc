#include "tokenizer/tokenizer_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/logging.h"

namespace mlaserve {
namespace {

std::optional<std::string> token_text(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return std::nullopt;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MLA_CHECK(in, "cannot open {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TokenizerConfig TokenizerConfig::from_json(const nlohmann::json& config) {
  TokenizerConfig c;
  c.bos_token = token_text(config, "bos_token");
  c.eos_token = token_text(config, "eos_token");
  c.pad_token = token_text(config, "pad_token");
  c.unk_token = token_text(config, "unk_token");
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    c.add_bos_token = config["add_bos_token"].get<bool>();
  }
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
    c.add_eos_token = config["add_eos_token"].get<bool>();
  }
  if (config.contains("tokenizer_class") && config["tokenizer_class"].is_string()) {
    c.tokenizer_class = config["tokenizer_class"].get<std::string>();
  }
  if (config.contains("clean_up_tokenization_spaces") && config["clean_up_tokenization_spaces"] == true) {
    // transformers would also rewrite " ." to "." and the like after decoding; we decode as HF
    // tokenizers does, which keeps streamed pieces equal to the full decode.
    spdlog::warn("tokenizer_config.json: clean_up_tokenization_spaces is set but not applied");
  }
  if (config.contains("chat_template")) {
    const auto& t = config["chat_template"];
    if (t.is_string()) {
      c.chat_templates["default"] = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& named : t) {
        c.chat_templates[named.at("name").get<std::string>()] = named.at("template").get<std::string>();
      }
    }
  }
  return c;
}

TokenizerConfig TokenizerConfig::from_dir(const std::string& dir) {
  const std::filesystem::path folder(dir);
  TokenizerConfig c;
  const auto config_path = folder / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: {}", config_path.string(), e.what());
    }
    c = from_json(config);
  }
  const auto jinja_path = folder / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) c.chat_templates["default"] = read_file(jinja_path);
  return c;
}

std::optional<std::string> TokenizerConfig::chat_template(bool with_tools) const {
  if (with_tools) {
    if (const auto it = chat_templates.find("tool_use"); it != chat_templates.end()) return it->second;
  }
  if (const auto it = chat_templates.find("default"); it != chat_templates.end()) return it->second;
  return std::nullopt;
}

}  // namespace mlaserve
