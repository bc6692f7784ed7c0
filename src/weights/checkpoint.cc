#include "weights/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"

namespace mlaserve {

namespace fs = std::filesystem;

namespace {

// weight_map of the index: tensor name -> shard file name (relative to the folder).
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  std::ifstream in(index);
  MLA_CHECK(in, "cannot read checkpoint index '{}'", index.string());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint index '{}' is not valid JSON: {}", index.string(), e.what());
  }
  MLA_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
            "checkpoint index '{}' has no \"weight_map\" object", index.string());
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : j["weight_map"].items()) {
    MLA_CHECK(shard.is_string() && !shard.get<std::string>().empty(),
              "checkpoint index '{}': shard of tensor '{}' is not a file name", index.string(), name);
    map[name] = shard.get<std::string>();
  }
  return map;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  MLA_CHECK(fs::is_directory(dir, ec), "checkpoint folder '{}' does not exist or is not a folder", dir);
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::vector<fs::path> paths;

  if (fs::exists(index, ec)) {
    weight_map = read_weight_map(index);
    MLA_CHECK(!weight_map.empty(), "checkpoint index '{}' lists no tensors", index.string());
    std::map<std::string, std::string> shards;  // shard -> one tensor it holds, for messages
    for (const auto& [name, shard] : weight_map) shards.emplace(shard, name);
    for (const auto& [shard, some_tensor] : shards) {
      fs::path p = fs::path(dir) / shard;
      MLA_CHECK(fs::is_regular_file(p, ec), "shard '{}' (holding tensor '{}') listed in index '{}' is missing",
                p.string(), some_tensor, index.string());
      paths.push_back(p);
    }
  } else {
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.is_regular_file() && entry.path().extension() == ".safetensors") paths.push_back(entry.path());
    MLA_CHECK(!ec, "cannot list checkpoint folder '{}': {}", dir, ec.message());
    std::sort(paths.begin(), paths.end());
    auto single = std::find_if(paths.begin(), paths.end(),
                               [](const fs::path& p) { return p.filename() == "model.safetensors"; });
    if (single != paths.end()) paths = {*single};
  }
  MLA_CHECK(!paths.empty(), "no .safetensors files in checkpoint folder '{}'", dir);

  for (const fs::path& p : paths) {
    ckpt.files_.push_back(SafetensorsFile::open(p.string()));
    const size_t f = ckpt.files_.size() - 1;
    for (const auto& [name, t] : ckpt.files_[f]->tensors()) {
      auto [it, inserted] = ckpt.where_.emplace(name, f);
      MLA_CHECK(inserted, "tensor '{}' is in both '{}' and '{}'", name, ckpt.files_[it->second]->path(), p.string());
    }
  }

  // The index and the shards must agree; names unique across shards make "where" unambiguous.
  for (const auto& [name, shard] : weight_map) {
    std::string listed = (fs::path(dir) / shard).string();
    auto it = ckpt.where_.find(name);
    MLA_CHECK(it != ckpt.where_.end() && ckpt.files_[it->second]->path() == listed,
              "tensor '{}' is listed in index '{}' under shard '{}' but that shard does not hold it", name,
              index.string(), listed);
  }
  return ckpt;
}

const SafetensorsFile& Checkpoint::file_holding(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("no tensor '{}' in checkpoint '{}'", name, dir_);
  return *files_[it->second];
}

const TensorInfo& Checkpoint::info(const std::string& name) const { return file_holding(name).info(name); }

std::string Checkpoint::file_of(const std::string& name) const { return file_holding(name).path(); }

Tensor Checkpoint::tensor(const std::string& name) const { return file_holding(name).tensor(name); }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, f] : where_) out.push_back(name);
  return out;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, f] : where_) total += files_[f]->info(name).nbytes;
  return total;
}

}  // namespace mlaserve
