// WeightSource over a checkpoint folder: zero-copy views into the mapped safetensors files,
// every tensor checked against the shape the model expects, and nothing left unclaimed.
#include <cmath>
#include <set>

#include "common/error.h"
#include "weights/checkpoint.h"
#include "weights/weight_source.h"

namespace mlaserve {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class CheckpointSource final : public WeightSource {
 public:
  explicit CheckpointSource(const std::string& dir) : dir_(dir), ckpt_(Checkpoint::open(dir)) {}

  bool has(const std::string& name) const override { return ckpt_.has(name); }

  Tensor get(const std::string& name, const Shape& shape, WeightRole role) override {
    MLA_CHECK(ckpt_.has(name), "checkpoint {}: tensor '{}' is missing", dir_, name);
    const TensorInfo& info = ckpt_.info(name);
    MLA_CHECK(info.shape == shape, "checkpoint {}: tensor '{}' in '{}' has shape {}, the model expects {}", dir_, name,
              ckpt_.file_of(name), shape_str(info.shape), shape_str(shape));
    bool float_ok = info.dtype == DType::F32 || info.dtype == DType::BF16 || info.dtype == DType::F16 ||
                    (info.dtype == DType::F8_E4M3 && role == WeightRole::Linear);
    MLA_CHECK(float_ok, "checkpoint {}: tensor '{}' in '{}' has dtype {}, not usable for this weight", dir_, name,
              ckpt_.file_of(name), dtype_name(info.dtype));
    used_.insert(name);
    return ckpt_.tensor(name);
  }

  Tensor get_scale(const std::string& weight_name, const Shape& wshape, int64_t bn, int64_t bk) override {
    std::string name = weight_name + "_scale_inv";
    if (!ckpt_.has(name)) return {};
    const TensorInfo& w = ckpt_.info(weight_name);
    MLA_CHECK(w.dtype == DType::F8_E4M3, "checkpoint {}: '{}' has block scales but is {}, not F8_E4M3", dir_,
              weight_name, dtype_name(w.dtype));
    Shape want = {(wshape[0] + bn - 1) / bn, (wshape[1] + bk - 1) / bk};
    const TensorInfo& info = ckpt_.info(name);
    MLA_CHECK(info.shape == want && info.dtype == DType::F32,
              "checkpoint {}: scale '{}' in '{}' is {}{}, expected F32{} (one per {}x{} block)", dir_, name,
              ckpt_.file_of(name), dtype_name(info.dtype), shape_str(info.shape), shape_str(want), bn, bk);
    used_.insert(name);
    return ckpt_.tensor(name);
  }

  std::optional<float> kv_cache_scale(const std::string& attention_prefix) override {
    std::string name = attention_prefix + ".k_scale";
    if (!ckpt_.has(name)) return std::nullopt;
    const TensorInfo& info = ckpt_.info(name);
    MLA_CHECK(is_float(info.dtype) && info.dtype != DType::F8_E4M3 && ckpt_.tensor(name).numel() == 1,
              "checkpoint {}: KV cache scale '{}' in '{}' is {}{}, expected one float", dir_, name, ckpt_.file_of(name),
              dtype_name(info.dtype), shape_str(info.shape));
    float scale = ckpt_.tensor(name).to_f32().data<float>()[0];
    MLA_CHECK(scale > 0 && std::isfinite(scale), "checkpoint {}: KV cache scale '{}' is {}, not a positive number",
              dir_, name, scale);
    used_.insert(name);
    return scale;
  }

  void finish() override {
    for (const std::string& name : ckpt_.names()) {
      if (used_.count(name) || ends_with(name, "rotary_emb.inv_freq")) continue;
      fail("checkpoint {}: tensor '{}' in '{}' is not part of a {} with this config", dir_, name, ckpt_.file_of(name),
           "DeepSeek model");
    }
  }

  std::string describe() const override {
    return fmt::format("{} ({} files, {:.2f} GB)", dir_, ckpt_.num_files(), double(ckpt_.total_bytes()) / 1e9);
  }

 private:
  std::string dir_;
  Checkpoint ckpt_;
  std::set<std::string> used_;
};

}  // namespace

std::unique_ptr<WeightSource> open_checkpoint_source(const std::string& dir) {
  return std::make_unique<CheckpointSource>(dir);
}

}  // namespace mlaserve
