// What the tuned-config files share (kernels/gemm_tuning.h, kernels/moe_tuning.h): their folder,
// their names (one file a device and kind of kernel), reading and writing the JSON, and the lookup of
// the nearest tuned size.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace mlaserve {

// The folder of tuned configs: `dir` if given, else $MLASERVE_TUNING_DIR, else configs/tuning beside
// the folder of the running executable (build/mlaserve -> configs/tuning of the checkout).
std::string tuning_dir(const std::string& dir);
inline constexpr const char* kTuningDirHelp =
    "Folder of tuned kernel configs, fp8_gemm_<device>.json and moe_fp8_<device>.json (default: "
    "$MLASERVE_TUNING_DIR, else configs/tuning of the checkout)";

// "<prefix>_NVIDIA_H200.json" for "NVIDIA H200": the device name with every character other than
// letters, digits, '-' and '.' as '_'.
std::string tuning_file_name(const std::string& prefix, const std::string& device);

// The file's JSON; errors name the file.
nlohmann::json read_tuning_json(const std::string& path);
void write_tuning_json(const std::string& path, const nlohmann::json& j);

// "123" -> 123; anything but a positive integer is an error naming `where`.
int64_t parse_tuned_count(const std::string& s, const std::string& where);

// The entry tuned for the count nearest to `count` (the smaller on a tie); nullptr if there is none,
// or `count` lies past the largest tuned one by more than half of it: a choice made for 16 tokens
// says nothing about 4096.
template <class V>
const V* nearest_tuned(const std::map<int64_t, V>& by_count, int64_t count) {
  if (by_count.empty()) return nullptr;
  const int64_t largest = by_count.rbegin()->first;
  if (count > largest + largest / 2) return nullptr;
  auto above = by_count.lower_bound(count);
  if (above == by_count.end()) return &std::prev(above)->second;
  if (above == by_count.begin() || above->first == count) return &above->second;
  auto below = std::prev(above);
  return count - below->first <= above->first - count ? &below->second : &above->second;
}

}  // namespace mlaserve
