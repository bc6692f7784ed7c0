#include "kernels/cuda/cublaslt.h"

#include <algorithm>

namespace mlaserve::cuda {

namespace {

bool init_algo(cublasLtHandle_t handle, const CublasLtPlan& plan, int id, cublasLtMatmulAlgo_t& algo) {
  return cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, plan.ab_type, plan.ab_type, plan.cd_type,
                                plan.cd_type, id, &algo) == CUBLAS_STATUS_SUCCESS;
}

// The configuration's attributes on an algorithm `init_algo` made (cuBLASLt's types for each).
void set_config(cublasLtMatmulAlgo_t& algo, const CublasLtConfig& c) {
  const uint32_t tile = uint32_t(c.tile), stages = uint32_t(c.stages), swizzle = uint32_t(c.swizzle);
  const uint32_t custom = uint32_t(c.custom);
  const uint16_t cluster = uint16_t(c.cluster);
  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages));
  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster));
  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle));
  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof(custom));
}

// An algorithm capability that is an array of uint32_t (tiles, stages); {0} (undefined) where it has none.
std::vector<uint32_t> cap_ids(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
    return {0};
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoCapGetAttribute(&algo, attr, ids.data(), bytes, &written));
  return ids;
}

template <class T>
T cap_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t written = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &v, sizeof(v), &written);
  return v;
}

}  // namespace

CublasLtPlan::~CublasLtPlan() {
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (op) cublasLtMatmulDescDestroy(op);
}

void CublasLtPlan::describe(bool trans_a, bool trans_b) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
}

CublasLt::CublasLt(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasLt::~CublasLt() {
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

bool CublasLt::choose_algorithm(CublasLtPlan& plan, uint32_t alignment) {
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                    sizeof(workspace_bytes_)));
  if (alignment > 0)
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment)));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result,
                                              &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found > 0) plan.algo = result.algo;
  return found > 0;
}

bool CublasLt::accepts(const CublasLtPlan& plan, const cublasLtMatmulAlgo_t& algo) const {
  cublasLtMatmulHeuristicResult_t result{};
  return cublasLtMatmulAlgoCheck(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, &algo, &result) ==
             CUBLAS_STATUS_SUCCESS &&
         result.workspaceSize <= workspace_bytes_;
}

std::optional<cublasLtMatmulAlgo_t> CublasLt::accepted_algo(const CublasLtPlan& plan,
                                                            const CublasLtConfig& config) const {
  cublasLtMatmulAlgo_t algo;
  if (config.heuristic() || !init_algo(handle_, plan, config.algo, algo)) return std::nullopt;
  set_config(algo, config);
  if (!accepts(plan, algo)) return std::nullopt;
  return algo;
}

bool CublasLt::use_config(CublasLtPlan& plan, const CublasLtConfig& config) {
  const std::optional<cublasLtMatmulAlgo_t> algo = accepted_algo(plan, config);
  if (algo) plan.algo = *algo;
  return algo.has_value();
}

std::vector<CublasLtConfig> CublasLt::configs(const CublasLtPlan& plan, const std::vector<CublasLtConfig>* among) {
  if (!among) return enumerate_configs(plan);
  std::vector<CublasLtConfig> out;
  for (const CublasLtConfig& c : *among)
    if (accepted_algo(plan, c)) out.push_back(c);
  return out;
}

std::vector<CublasLtConfig> CublasLt::enumerate_configs(const CublasLtPlan& plan) const {
  int ids[128], n_ids = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(handle_, CUBLAS_COMPUTE_32F, CUDA_R_32F, plan.ab_type, plan.ab_type,
                                        plan.cd_type, plan.cd_type, 128, ids, &n_ids));
  const int clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                          CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                          CUBLASLT_CLUSTER_SHAPE_1x4x1};
  std::vector<CublasLtConfig> out;
  for (int i = 0; i < n_ids; ++i) {
    cublasLtMatmulAlgo_t base;
    if (!init_algo(handle_, plan, ids[i], base)) continue;
    const int swizzles = cap_value<uint32_t>(base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) ? 2 : 1;
    const int customs = std::clamp(cap_value<int32_t>(base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX), 0, 7) + 1;
    for (uint32_t tile : cap_ids(base, CUBLASLT_ALGO_CAP_TILE_IDS))
      for (uint32_t stages : cap_ids(base, CUBLASLT_ALGO_CAP_STAGES_IDS))
        for (int cluster : clusters)
          for (int swizzle = 0; swizzle < swizzles; ++swizzle)
            for (int custom = 0; custom < customs; ++custom) {
              const CublasLtConfig c{ids[i], int(tile), int(stages), cluster, swizzle, custom};
              cublasLtMatmulAlgo_t algo = base;
              set_config(algo, c);
              if (accepts(plan, algo)) out.push_back(c);
            }
  }
  return out;
}

void CublasLt::matmul(const CublasLtPlan& p, const void* a, const void* b, void* c, cudaStream_t stream) {
  float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, a, p.a, b, p.b, &beta, c, p.c, c, p.c, &p.algo, workspace_,
                              workspace_bytes_, stream));
}

}  // namespace mlaserve::cuda
