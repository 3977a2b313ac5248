#include "tools/io/scenario.hpp"

#include "sim/training/step.hpp"
#include "tools/io/cluster.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#ifndef SCALEOUT_SOURCE_DIR
#define SCALEOUT_SOURCE_DIR "."
#endif

namespace scaleout {
namespace fs = std::filesystem;

namespace {
constexpr std::int64_t kMaxDim = std::int64_t(1) << 32;
constexpr std::int64_t kMaxGpus = std::int64_t(1) << 24;

const char* kind_folder(const std::string& kind) { return kind == "models" ? "models/zoo" : "hardware/gpus"; }

std::string zoo_file(const std::string& kind, const std::string& name, const std::string& file, const std::string& path) {
  const bool safe = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  }) && name.find("..") == std::string::npos;
  const fs::path p = fs::path(data_dir()) / kind_folder(kind) / (name + ".json");
  if (!safe || !is_file(p.string())) {
    std::string known;
    for (const auto& n : zoo_names(kind)) known += (known.empty() ? "" : ", ") + n;
    throw InputError(file, path, "unknown " + std::string(kind == "models" ? "model" : "GPU") + " \"" + name +
                                     "\" (known: " + known + ")");
  }
  return p.string();
}

}  // namespace

std::string data_dir() {
  if (const char* d = std::getenv("SCALEOUT_DATA"); d && *d) return d;
  return SCALEOUT_SOURCE_DIR;
}

std::vector<std::string> zoo_names(const std::string& kind) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(data_dir()) / kind_folder(kind);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

void read_model_fields(JsonReader& r, TransformerSpec& m, bool require_all) {
  auto int_field = [&](const char* key, std::int64_t& dst, std::int64_t min) {
    if (require_all || r.has(key)) dst = r.integer(key, min, kMaxDim);
    else r.ignore(key);
  };
  if (require_all || r.has("arch")) m.arch = r.choice("arch", {"gpt", "llama"}) == "gpt" ? Arch::gpt : Arch::llama;
  if (m.arch == Arch::gpt) m.activation = Activation::gelu;
  if (r.has("activation")) {
    const std::string a = r.choice("activation", {"swiglu", "squared_relu", "gelu"});
    m.activation = a == "swiglu" ? Activation::swiglu : a == "squared_relu" ? Activation::squared_relu : Activation::gelu;
    if (m.arch == Arch::gpt && m.activation != Activation::gelu) r.fail("activation", "arch gpt has a GELU MLP; \"" + a + "\" needs arch llama");
  } else {
    r.ignore("activation");
  }
  int_field("layers", m.layers, 1);
  int_field("hidden", m.hidden, 1);
  int_field("heads", m.heads, 1);
  if (r.has("kv_heads")) m.kv_heads = r.integer("kv_heads", 1, kMaxDim);
  else r.ignore("kv_heads");
  if (r.has("head_dim")) m.head_dim = r.integer("head_dim", 1, kMaxDim);
  else r.ignore("head_dim");
  int_field("ffn", m.ffn, 1);
  int_field("vocab", m.vocab, 1);
  if (r.has("tied_embeddings")) m.tied_embeddings = r.boolean("tied_embeddings");
  else if (require_all) m.tied_embeddings = r.boolean("tied_embeddings");
  else r.ignore("tied_embeddings");
  if (r.has("max_positions")) m.max_positions = r.integer("max_positions", 1, kMaxDim);
  else r.ignore("max_positions");
  if (r.has("experts")) m.experts = r.integer("experts", 1, 4096);
  else r.ignore("experts");
  if (r.has("top_k")) m.top_k = r.integer("top_k", 1, 4096);
  else r.ignore("top_k");
  for (auto [key, dst] : {std::pair<const char*, std::int64_t*>{"moe_ffn", &m.moe_ffn}, {"shared_experts", &m.shared_experts},
                          {"dense_layers", &m.dense_layers}, {"q_lora_rank", &m.q_lora_rank},
                          {"kv_lora_rank", &m.kv_lora_rank}, {"qk_rope_dim", &m.qk_rope_dim}, {"v_head_dim", &m.v_head_dim}}) {
    if (r.has(key)) *dst = r.integer(key, 0, kMaxDim);
    else r.ignore(key);
  }
  if (r.has("reported_params")) m.reported_params = r.number("reported_params", 0);
  else r.ignore("reported_params");
  if (r.has("name")) m.name = r.string("name");
  else r.ignore("name");
  if (r.has("description")) m.description = r.string("description");
  else r.ignore("description");
  if (r.has("sources")) m.sources = r.strings_or("sources");
  else r.ignore("sources");
  if (r.has("notes")) m.notes = r.string("notes");
  else r.ignore("notes");
}

void check_model(const TransformerSpec& m, const JsonReader& r) {
  if (m.kv_heads == 0) const_cast<TransformerSpec&>(m).kv_heads = m.heads;
  if (m.head_dim == 0 && m.hidden % m.heads != 0)
    r.fail("heads", std::to_string(m.heads) + " does not divide hidden=" + std::to_string(m.hidden) +
                        " (give head_dim to decouple them)");
  if (m.heads % m.kv_heads != 0)
    r.fail("kv_heads", std::to_string(m.kv_heads) + " does not divide heads=" + std::to_string(m.heads));
  if (m.top_k > m.experts) r.fail("top_k", std::to_string(m.top_k) + " exceeds experts=" + std::to_string(m.experts));
  if (m.experts <= 1 && (m.moe_ffn > 0 || m.shared_experts > 0 || m.dense_layers > 0))
    r.fail(m.moe_ffn > 0 ? "moe_ffn" : m.shared_experts > 0 ? "shared_experts" : "dense_layers", "needs experts > 1");
  if (m.dense_layers >= m.layers && m.experts > 1)
    r.fail("dense_layers", std::to_string(m.dense_layers) + " leaves no MoE layer of layers=" + std::to_string(m.layers));
  if (!m.mla() && (m.q_lora_rank > 0 || m.qk_rope_dim > 0 || m.v_head_dim > 0))
    r.fail(m.q_lora_rank > 0 ? "q_lora_rank" : m.qk_rope_dim > 0 ? "qk_rope_dim" : "v_head_dim",
           "is multi-head latent attention's: needs kv_lora_rank > 0");
  if (m.mla() && m.kv_heads != m.heads)
    r.fail("kv_heads", "multi-head latent attention gives every query head its own key and value (kv_heads = heads)");
  if (m.mla() && m.arch != Arch::llama) r.fail("kv_lora_rank", "multi-head latent attention needs arch llama");
  if (m.experts > 1 && !m.gated_mlp()) r.fail("activation", "MoE experts are SwiGLU MLPs here; a plain MLP is modelled for dense models only");
}

}  // namespace

TransformerSpec parse_model(const Json& j, const std::string& file, const std::string& path) {
  TransformerSpec m;
  if (j.is_string()) return load_model(j.get<std::string>());
  JsonReader r(j, file, path);
  if (r.has("base")) {
    const std::string base = r.string("base");
    {
      const std::string f = zoo_file("models", base, file, path + "/base");
      const Json bj = load_json_file(f);
      m = parse_model(bj, f, "");
    }
    read_model_fields(r, m, false);
  } else {
    read_model_fields(r, m, true);
  }
  r.finish();
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  check_model(m, r);
  return m;
}

TransformerSpec load_model(const std::string& name) {
  const std::string f = zoo_file("models", name, "scaleout", "model");
  return parse_model(load_json_file(f), f, "");
}

GpuSpec parse_gpu(const Json& j, const std::string& file, const std::string& path) {
  JsonReader r(j, file, path);
  GpuSpec g;
  g.name = r.string("name");
  g.description = r.string_or("description", "");
  g.memory = Bytes{r.quantity("memory", QuantityKind::bytes)};
  g.hbm_bandwidth = BytesPerSecond{r.quantity("hbm_bandwidth", QuantityKind::bandwidth)};
  g.sms = static_cast<int>(r.integer("sms", 1, 1 << 20));
  g.stream_efficiency = r.number_or("stream_efficiency", 0.0, 0.0, 1.0);
  g.l2_cache = Bytes{r.quantity_or("l2_cache", QuantityKind::bytes, 0)};
  g.boost_clock = Hertz{r.quantity_or("boost_clock", QuantityKind::frequency, 0)};
  JsonReader peaks = r.object("peak_dense");
  for (std::size_t i = 0; i < kDtypeCount; ++i) {
    const std::string key(kDtypeNames[i]);
    g.peak_dense[i] = FlopsPerSecond{peaks.quantity_or(key, QuantityKind::flops, 0)};
  }
  peaks.finish();
  if (g.peak(Dtype::bf16).value <= 0 && g.peak(Dtype::fp16).value <= 0)
    r.fail("peak_dense", "needs at least a bf16 or fp16 rate");
  if (g.memory.value <= 0) r.fail("memory", "must be positive");
  if (g.hbm_bandwidth.value <= 0) r.fail("hbm_bandwidth", "must be positive");
  g.nvlink_bandwidth = BytesPerSecond{r.quantity_or("nvlink_bandwidth", QuantityKind::bandwidth, 0)};
  g.pcie = r.string_or("pcie", "");
  g.pcie_bandwidth = BytesPerSecond{r.quantity_or("pcie_bandwidth", QuantityKind::bandwidth, 32e9)};
  g.tdp_watts = r.quantity_or("tdp", QuantityKind::power, 0);
  g.default_node = r.choice_or("default_node", {"nvswitch", "nvlink-bridge-pairs", "pcie", "infinity-fabric"}, "pcie");
  g.gpus_per_node = static_cast<int>(r.integer_or("gpus_per_node", 8, 1, 1024));
  g.sources = r.strings_or("sources");
  g.notes = r.string_or("notes", "");
  r.finish();
  return g;
}

GpuSpec load_gpu(const std::string& name) {
  const std::string f = zoo_file("gpus", name, "scaleout", "gpu");
  return parse_gpu(load_json_file(f), f, "");
}

namespace {

// A profile's "links" section (hardware/link_profile.hpp; written by `scaleout calibrate fit --links`).
LinkProfile parse_link_profile(JsonReader r) {
  LinkProfile l;
  l.measured_on = r.string("measured_on");
  l.source = r.string_or("source", "");
  r.ignore("cluster");
  r.ignore("fit");
  constexpr double kMaxStepS = 1e-3;  // a correction beyond a millisecond per step is a unit mistake
  const char* classes[] = {"nvlink", "pcie", "network"};
  std::optional<double>* effs[] = {&l.nvlink_efficiency, &l.pcie_efficiency, &l.network_efficiency};
  for (std::size_t i = 0; i < 3; ++i) {
    if (!r.has(classes[i])) {
      r.ignore(classes[i]);
      continue;
    }
    JsonReader c = r.object(classes[i]);
    *effs[i] = c.number("efficiency", 1e-3, 1.0);
    l.tuning.step_latency_s[i] = 1e-6 * c.number_or("step_latency_us", 0, -1e6 * kMaxStepS, 1e6 * kMaxStepS);
    // What plain copies reach (cudaMemcpyPeer): documentation, checked but not used by the model.
    if (c.has("p2p_latency")) c.quantity("p2p_latency", QuantityKind::time_s);
    else c.ignore("p2p_latency");
    if (c.has("p2p_bandwidth")) c.quantity("p2p_bandwidth", QuantityKind::bandwidth);
    else c.ignore("p2p_bandwidth");
    c.finish();
  }
  for (const char* algo : {"ring", "tree"}) {
    if (!r.has(algo)) {
      r.ignore(algo);
      continue;
    }
    JsonReader a = r.object(algo);
    const double step = 1e-6 * a.number_or("step_latency_us", 0, -1e6 * kMaxStepS, 1e6 * kMaxStepS);
    const double eff = a.number("bus_efficiency", 1e-3, 4.0);
    if (std::string(algo) == "ring") l.tuning.ring_step_latency_s = step, l.tuning.ring_bus_efficiency = eff;
    else l.tuning.tree_step_latency_s = step, l.tuning.tree_bus_efficiency = eff;
    a.finish();
  }
  r.finish();
  return l;
}

}  // namespace

ComputeProfile parse_profile(const Json& j, const std::string& file, const std::string& path, const GpuSpec& gpu) {
  ComputeProfile p = default_profile(gpu);
  JsonReader r(j, file, path);
  p.name = r.string("name");
  p.measured_on = r.string("measured_on");
  p.source = r.string_or("source", "");
  r.ignore("gpu");
  r.ignore("fit");
  // An object of figures by dtype name, each in [lo, hi]; dtypes it leaves out keep theirs.
  auto by_dtype = [&r](const char* key, std::array<double, kDtypeCount>& a, double lo, double hi) {
    if (!r.has(key)) return;
    JsonReader e = r.object(key);
    for (std::size_t i = 0; i < kDtypeCount; ++i) a[i] = e.number_or(std::string(kDtypeNames[i]), a[i], lo, hi);
    e.finish();
  };
  by_dtype("gemm_efficiency", p.gemm_efficiency, 0.0, 1.0);
  p.gemm_k_half = r.number_or("gemm_k_half", p.gemm_k_half, 0, 1e6);
  if (r.has("gemm_k_half_by_dtype")) {
    JsonReader e = r.object("gemm_k_half_by_dtype");
    for (std::size_t i = 0; i < kDtypeCount; ++i)
      p.gemm_k_half_by_dtype[i] = e.number_or(std::string(kDtypeNames[i]), 0.0, 0.0, 1e6);
    e.finish();
  } else {
    r.ignore("gemm_k_half_by_dtype");
  }
  p.wave_quantization = r.number_or("wave_quantization", p.wave_quantization, 0.0, 1.0);
  p.fp8_split_accumulate = r.number_or("gemm_fp8_split_accumulate", p.fp8_split_accumulate, 1.0, 4.0);
  p.gemm_memory_efficiency = r.number_or("gemm_memory_efficiency", p.gemm_memory_efficiency, 1e-3, 1.0);
  p.gemm_overlap_exponent = r.number_or("gemm_overlap_exponent", p.gemm_overlap_exponent, 0.0, 100.0);
  p.gemm_unaligned_efficiency = r.number_or("gemm_unaligned_efficiency", p.gemm_unaligned_efficiency, 1e-3, 1.0);
  if (r.has("gemm_unaligned_efficiency_by_dtype")) {
    JsonReader e = r.object("gemm_unaligned_efficiency_by_dtype");
    for (std::size_t i = 0; i < kDtypeCount; ++i)
      p.gemm_unaligned_efficiency_by_dtype[i] = e.number_or(std::string(kDtypeNames[i]), 0.0, 1e-3, 1.0);
    e.finish();
  } else {
    r.ignore("gemm_unaligned_efficiency_by_dtype");
  }
  if (r.has("gemm_unaligned_tile")) {
    JsonReader tr = r.object("gemm_unaligned_tile");
    p.gemm_unaligned_tile.m = static_cast<int>(tr.integer("m", 1, 4096));
    p.gemm_unaligned_tile.n = static_cast<int>(tr.integer("n", 1, 4096));
    p.gemm_unaligned_tile.efficiency = 1.0;
    tr.finish();
  }
  if (r.has("tiles")) {
    const Json& t = r.raw("tiles");
    if (!t.is_array() || t.empty()) r.fail("tiles", "expected a non-empty array of {m, n, efficiency}");
    p.tiles.clear();
    for (std::size_t i = 0; i < t.size(); ++i) {
      JsonReader tr(t[i], file, r.path("tiles") + "/" + std::to_string(i));
      GemmTile tile;
      tile.m = static_cast<int>(tr.integer("m", 1, 4096));
      tile.n = static_cast<int>(tr.integer("n", 1, 4096));
      tile.efficiency = tr.number("efficiency", 1e-3, 1.0);
      tr.finish();
      p.tiles.push_back(tile);
    }
  }
  p.memory_efficiency = r.number_or("memory_efficiency", p.memory_efficiency, 1e-3, 1.0);
  by_dtype("multi_tensor_efficiency", p.multi_tensor_efficiency, 1e-3, 1.0);
  p.unrolled_efficiency = r.number_or("unrolled_efficiency", p.unrolled_efficiency, 1e-3, 1.0);
  by_dtype("strided_efficiency", p.strided_efficiency, 1e-3, 1.0);
  p.reduction_efficiency = r.number_or("reduction_efficiency", p.reduction_efficiency, 1e-3, 1.0);
  p.reduction_latency = Time::from_seconds(r.quantity_or("reduction_latency", QuantityKind::time_s, p.reduction_latency.seconds()));
  p.kernel_latency = Time::from_seconds(r.quantity_or("kernel_latency", QuantityKind::time_s, p.kernel_latency.seconds()));
  p.gemm_stream_ramp = Time::from_seconds(r.quantity_or("gemm_stream_ramp", QuantityKind::time_s, 0.0));
  if (r.has("gemm_split_k")) {
    JsonReader e = r.object("gemm_split_k");
    for (std::size_t i = 0; i < kDtypeCount; ++i)
      p.gemm_split_k[i] = e.boolean_or(std::string(kDtypeNames[i]), p.gemm_split_k[i]);
    e.finish();
  }
  p.attention_fwd_efficiency = r.number_or("attention_fwd_efficiency", p.attention_fwd_efficiency, 1e-3, 1.0);
  p.attention_bwd_efficiency = r.number_or("attention_bwd_efficiency", p.attention_bwd_efficiency, 1e-3, 1.0);
  p.attention_seq_half = r.number_or("attention_seq_half", p.attention_seq_half, 0, 1e7);
  p.host_fwd_kernel = Time::from_seconds(r.quantity_or("host_fwd_kernel", QuantityKind::time_s, p.host_fwd_kernel.seconds()));
  p.host_bwd_kernel = Time::from_seconds(r.quantity_or("host_bwd_kernel", QuantityKind::time_s, p.host_bwd_kernel.seconds()));
  p.host_opt_kernel = Time::from_seconds(r.quantity_or("host_opt_kernel", QuantityKind::time_s, p.host_opt_kernel.seconds()));
  p.host_opt_tensor = Time::from_seconds(r.quantity_or("host_opt_tensor", QuantityKind::time_s, p.host_opt_tensor.seconds()));
  if (r.has("links")) p.links = parse_link_profile(r.object("links"));
  else r.ignore("links");
  r.finish();
  return p;
}

ComputeProfile default_profile_for(const GpuSpec& gpu) {
  const fs::path p = fs::path(data_dir()) / "hardware/profiles" / (gpu.name + ".json");
  if (is_file(p.string())) return parse_profile(load_json_file(p.string()), p.string(), "", gpu);
  return default_profile(gpu);
}

void apply_override(Json& scenario, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError("--set " + assignment + ": expected PATH=VALUE, e.g. training.micro_batch=4");
  std::string path = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  if (path.front() == '/') path = path.substr(1);
  std::replace(path.begin(), path.end(), '/', '.');
  Json* node = &scenario;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw InputError("--set " + assignment + ": empty path component");
    if (!node->is_object()) throw InputError("--set " + assignment + ": \"" + key + "\" is not inside an object");
    if (dot == std::string::npos) {
      Json v = Json::parse(value, nullptr, false);
      (*node)[key] = v.is_discarded() ? Json(value) : v;
      return;
    }
    if (!node->contains(key)) (*node)[key] = Json::object();
    // A zoo name ("model": "llama-2-7b") becomes {"base": name} so its fields can be overridden.
    if ((*node)[key].is_string()) (*node)[key] = Json{{"base", (*node)[key].get<std::string>()}};
    node = &(*node)[key];
    start = dot + 1;
  }
}

namespace {

TrainingSpec parse_training(JsonReader r) {
  TrainingSpec t;
  t.seq_len = r.integer("seq_len", 1, 1 << 24);
  t.micro_batch = r.integer_or("micro_batch", 1, 1, 1 << 20);
  t.global_batch = r.integer_or("global_batch", t.micro_batch, 1, std::int64_t(1) << 32);
  const std::string prec = r.choice_or("precision", {"bf16-mixed", "fp16-mixed", "bf16", "megatron-bf16",
                                                     "megatron-fp16", "fp8-mixed", "nemo-bf16", "nemo-fp8", "fsdp-bf16"}, "bf16-mixed");
  t.precision = *precision_recipe(prec);
  const std::string opt = r.choice_or("optimizer", {"adamw", "sgd", "adafactor", "adamw-8bit"}, "adamw");
  t.optimizer = opt == "adamw" ? Optimizer::adamw : opt == "sgd" ? Optimizer::sgd
              : opt == "adafactor" ? Optimizer::adafactor : Optimizer::adamw_8bit;
  t.optimizer_impl = r.choice_or("optimizer_impl", {"foreach", "fused"}, "foreach") == "fused" ? OptimizerImpl::fused
                                                                                                : OptimizerImpl::foreach_;
  const std::string rc = r.choice_or("recompute", {"none", "selective", "full", "op"}, "none");
  t.recompute = rc == "none" ? Recompute::none : rc == "selective" ? Recompute::selective : rc == "full" ? Recompute::full : Recompute::op;
  t.attention = r.choice_or("attention", {"flash", "naive"}, "flash") == "flash" ? AttentionImpl::flash
                                                                                 : AttentionImpl::naive;
  t.dropout = r.number_or("dropout", 0.0, 0.0, 0.99);
  t.moe_capacity_factor = r.number_or("moe_capacity_factor", 1.0, 1.0, 64.0);
  t.moe_dispatcher = r.choice_or("moe_dispatcher", {"alltoall", "deepep"}, "alltoall") == "deepep" ? MoeDispatcher::deepep
                                                                                               : MoeDispatcher::alltoall;
  t.moe_router = r.choice_or("moe_router", {"learned", "fake_balanced"}, "learned") == "fake_balanced" ? MoeRouter::fake_balanced
                                                                                                     : MoeRouter::learned;
  t.moe_grouped_gemm = r.boolean_or("moe_grouped_gemm", false);
  t.upcast_logits = r.boolean_or("upcast_logits", prec == "fsdp-bf16");
  if (r.has("recompute_modules")) {
    if (t.recompute != Recompute::selective) r.fail("recompute_modules", "needs recompute \"selective\"");
    static const std::pair<const char*, unsigned> kModules[] = {
        {"core_attn", kRecomputeCoreAttn}, {"layernorm", kRecomputeLayernorm}, {"mla_up_proj", kRecomputeMlaUpProj},
        {"moe_act", kRecomputeMoeAct},     {"mlp", kRecomputeMlp},             {"moe", kRecomputeMoe},
        {"shared_experts", kRecomputeSharedExperts}};
    t.recompute_modules = 0;
    for (const std::string& m : r.strings_or("recompute_modules")) {
      unsigned bit = 0;
      for (const auto& [name, b] : kModules)
        if (m == name) bit = b;
      if (!bit)
        r.fail("recompute_modules", "unknown module \"" + m + "\"; expected core_attn, layernorm, mla_up_proj, moe_act, mlp, moe or shared_experts");
      t.recompute_modules |= bit;
    }
  } else {
    r.ignore("recompute_modules");
  }
  // Fused norm, RoPE, SwiGLU, softmax and cross-entropy kernels (Megatron, Transformer Engine,
  // Liger) or PyTorch's eager ones: the recipe's unless given.
  if (r.has("kernels")) t.precision.fused_kernels = r.choice("kernels", {"eager", "fused"}) == "fused";
  else r.ignore("kernels");
  if (r.has("lora")) {
    JsonReader l = r.object("lora");
    LoraSpec lora;
    lora.rank = l.integer_or("rank", 16, 1, 1 << 16);
    lora.all_linear = l.choice_or("targets", {"all-linear", "attention"}, "all-linear") == "all-linear";
    lora.nf4_base = l.choice_or("base", {"bf16", "nf4"}, "bf16") == "nf4";
    l.finish();
    t.lora = lora;
  } else {
    r.ignore("lora");
  }
  if (t.global_batch % t.micro_batch != 0)
    r.fail("global_batch", std::to_string(t.global_batch) + " is not a multiple of micro_batch=" +
                               std::to_string(t.micro_batch));
  r.finish();
  return t;
}

Parallelism parse_parallelism(JsonReader r) {
  Parallelism p;
  p.dp = r.integer_or("dp", 1, 1, kMaxGpus);
  p.tp = r.integer_or("tp", 1, 1, kMaxGpus);
  p.pp = r.integer_or("pp", 1, 1, kMaxGpus);
  p.cp = r.integer_or("cp", 1, 1, kMaxGpus);
  p.ep = r.integer_or("ep", 1, 1, kMaxGpus);
  p.sequence_parallel = r.boolean_or("sequence_parallel", false);
  p.tp_comm_overlap = r.boolean_or("tp_comm_overlap", false);
  p.pp_schedule = r.choice_or("pp_schedule", {"1f1b", "gpipe", "interleaved", "zb-h1"}, "1f1b");
  p.virtual_stages = r.integer_or("virtual_stages", 1, 1, 1024);
  p.zero = r.integer_or("zero", 0, 0, 3);
  p.fsdp = r.choice_or("fsdp", {"", "full_shard", "shard_grad_op", "hybrid_shard", "no_shard"}, "");
  p.offload_optimizer = r.boolean_or("offload_optimizer", false);
  p.ddp_bucket_bytes = r.quantity_or("ddp_bucket", QuantityKind::bytes, p.ddp_bucket_bytes);
  if (p.ddp_bucket_bytes <= 0) r.fail("ddp_bucket", "must be positive");
  p.overlap_grad_reduce = r.boolean_or("overlap_grad_reduce", true);
  p.overlap_param_gather = r.boolean_or("overlap_param_gather", false);
  if (p.overlap_param_gather && (p.zero < 1 || p.zero > 2))
    r.fail("overlap_param_gather", "overlaps ZeRO-1/2's parameter all-gather: needs zero 1 or 2");
  p.grad_reduce_dtype = r.choice_or("grad_reduce_dtype", {"", "fp32", "bf16", "fp16"}, "");
  p.pipeline_p2p = r.choice_or("pipeline_p2p", {"async", "blocking"}, "async");
  p.pipeline_runs = r.integer_or("pipeline_runs", 1, 1, std::int64_t(1) << 20);
  if (p.pipeline_runs > 1 && p.pp == 1) r.fail("pipeline_runs", "needs a pipeline (pp > 1)");
  if (p.pipeline_runs > 1 && p.pipeline_p2p == "blocking")
    r.fail("pipeline_runs", "runs of torch's pipeline schedule with Megatron's blocking transfers are not modelled");
  if (r.has("layers_per_stage")) {
    const Json& a = r.raw("layers_per_stage");
    if (!a.is_array() || a.empty()) r.fail("layers_per_stage", "expected an array of layer counts, one per (virtual) pipeline stage");
    for (const Json& x : a) {
      if (!x.is_number_integer() || x.get<std::int64_t>() < 0 || x.get<std::int64_t>() > (std::int64_t(1) << 20))
        r.fail("layers_per_stage", "expected non-negative integers, got " + x.dump());
      p.layers_per_stage.push_back(x.get<std::int64_t>());
    }
  } else {
    r.ignore("layers_per_stage");
  }
  p.order = r.string_or("order", p.order);
  {
    std::vector<std::string> parts;
    std::size_t pos = 0;
    while (true) {
      const std::size_t dash = p.order.find('-', pos);
      parts.push_back(p.order.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos));
      if (dash == std::string::npos) break;
      pos = dash + 1;
    }
    std::vector<std::string> sorted = parts;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != std::vector<std::string>{"cp", "dp", "pp", "tp"})
      r.fail("order", "expected the four groups tp, cp, dp, pp in placement order, fastest first, like \"tp-cp-dp-pp\"; got \"" +
                          p.order + "\"");
  }
  p.offload_params = r.boolean_or("offload_params", false);
  if (p.offload_optimizer && p.zero == 0 && p.fsdp.empty()) r.fail("offload_optimizer", "needs zero >= 1 or an fsdp strategy");
  if (p.offload_params && p.zero < 3 && p.fsdp != "full_shard" && p.fsdp != "hybrid_shard")
    r.fail("offload_params", "needs sharded parameters: zero 3, or fsdp full_shard or hybrid_shard");
  if (p.pp_schedule == "interleaved" && p.virtual_stages < 2)
    r.fail("virtual_stages", "the interleaved schedule needs virtual_stages >= 2");
  if (p.zero > 0 && !p.fsdp.empty()) r.fail("fsdp", "give either zero or fsdp, not both");
  if (p.pp_schedule == "zb-h1" && p.virtual_stages > 1)
    r.fail("virtual_stages", "zb-h1 runs one chunk per stage (virtual_stages 1)");
  if (p.pp_schedule == "zb-h1" && (p.zero >= 3 || (!p.fsdp.empty() && p.fsdp != "no_shard")))
    r.fail("pp_schedule", "zb-h1 with sharded parameters (zero 3, fsdp) is not modelled: use zero 0 to 2");
  r.finish();
  return p;
}

}  // namespace

Scenario parse_scenario(const Json& j, const std::string& file) {
  JsonReader r(j, file, "");
  Scenario s;
  s.file = file;
  s.name = r.string_or("name", std::filesystem::path(file).stem().string());
  s.description = r.string_or("description", "");
  s.model = parse_model(r.raw("model"), file, "/model");

  JsonReader c = r.object("cluster");
  const std::string gpu_name = c.string("gpu");
  if (c.has("gpu_spec")) {
    s.gpu = parse_gpu(c.raw("gpu_spec"), file, "/cluster/gpu_spec");
  } else {
    c.ignore("gpu_spec");
    const std::string f = zoo_file("gpus", gpu_name, file, "/cluster/gpu");
    s.gpu = parse_gpu(load_json_file(f), f, "");
  }
  // A shipped or given cluster file (hardware/clusters) fixes the node and fabric; its links
  // give the groups' bandwidths. Without one, the GPU's usual server and a non-blocking fabric.
  std::optional<ClusterSpec> topo;
  if (c.has("topology") && c.raw("topology").is_object()) {
    // An inline cluster object, as a cluster file would have it.
    Json inline_cluster = c.raw("topology");
    if (!inline_cluster.contains("gpu")) inline_cluster["gpu"] = gpu_name;
    topo = parse_cluster(inline_cluster, file, "/cluster/topology");
    if (topo->gpu != s.gpu.name)
      c.fail("topology", "the inline cluster has " + topo->gpu + " GPUs, the scenario names " + s.gpu.name);
  } else if (c.has("topology")) {
    const std::string t = c.string("topology");
    const auto rel = std::filesystem::path(file).parent_path() / t;
    try {
      topo = load_cluster(is_file(rel.string()) && rel.extension() == ".json" ? rel.string() : t);
    } catch (const InputError& e) {
      c.fail("topology", e.what());
    }
    if (topo->gpu != s.gpu.name)
      c.fail("topology", "cluster \"" + t + "\" has " + topo->gpu + " GPUs, the scenario names " + s.gpu.name);
  } else {
    c.ignore("topology");
  }
  s.nodes = c.integer_or("nodes", topo ? topo->nodes : 1, 1, kMaxGpus);
  s.gpus_per_node = c.integer_or("gpus_per_node", topo ? topo->gpus_per_node : 1, 1, 1024);
  if (topo && (s.nodes > topo->nodes || s.gpus_per_node != topo->gpus_per_node))
    c.fail(s.gpus_per_node != topo->gpus_per_node ? "gpus_per_node" : "nodes",
           "does not match the topology's " + std::to_string(topo->nodes) + " nodes of " +
               std::to_string(topo->gpus_per_node) + " GPUs");
  // Inside a node: NVLink through NVSwitch (half the quoted bidirectional figure each way), or
  // PCIe. Between nodes: the NICs' bandwidth shared by the node's GPUs; by default one NIC per
  // GPU at the speed of the GPU's generation (HDR 200 Gb/s with A100 and V100 as in DGX A100,
  // NDR 400 Gb/s with H100/H200/B200 as in DGX H100).
  const bool nvswitch = topo ? topo->node_kind == NodeKind::nvswitch
                             : (s.gpu.default_node == "nvswitch" || s.gpu.default_node == "infinity-fabric");
  const double nvlink = topo ? topo->nvlink_bandwidth.value : s.gpu.nvlink_bandwidth.value;
  const double pcie = topo ? topo->pcie_bandwidth.value : s.gpu.pcie_bandwidth.value;
  const double intra_default = nvswitch && nvlink > 0 ? nvlink / 2 : pcie;
  s.intra_node_bandwidth = c.quantity_or("intra_node_bandwidth", QuantityKind::bandwidth, intra_default);
  const bool older = s.gpu.name == "a100-80g" || s.gpu.name == "a100-40g" || s.gpu.name == "v100";
  double nic_default = older ? 25e9 : 50e9;
  std::int64_t nics_default = s.gpus_per_node;
  if (topo && topo->nics_per_node > 0) {
    nic_default = topo->nic_bandwidth.value;
    nics_default = topo->nics_per_node;
    if (topo->oversubscription > 1 && topo->levels > 1) nic_default /= topo->oversubscription;  // cross-pod share
  }
  const double nic = c.quantity_or("nic_bandwidth", QuantityKind::bandwidth, nic_default);
  const std::int64_t nics = c.integer_or("nics_per_node", nics_default, 1, 1024);
  s.inter_node_bandwidth = nic * double(nics) / double(s.gpus_per_node);
  s.intra_node_latency_s = c.quantity_or("intra_node_latency", QuantityKind::time_s, s.intra_node_latency_s);
  s.inter_node_latency_s = c.quantity_or("inter_node_latency", QuantityKind::time_s, s.inter_node_latency_s);
  if (topo) {
    topo->nodes = int(s.nodes);  // the scenario may use fewer nodes than the cluster has
    s.cluster_spec = *topo;
  }
  if (c.has("memory")) s.gpu.memory = Bytes{c.quantity("memory", QuantityKind::bytes)};
  else c.ignore("memory");
  const std::string prof = c.string_or("profile", "auto");
  if (prof == "auto") s.profile = default_profile_for(s.gpu);
  else if (prof == "datasheet") s.profile = default_profile(s.gpu);
  else {
    const auto p = (std::filesystem::path(file).parent_path() / prof).string();
    if (!is_file(p)) c.fail("profile", "expected \"auto\", \"datasheet\" or a profile file; \"" + p + "\" does not exist");
    s.profile = parse_profile(load_json_file(p), p, "", s.gpu);
  }
  c.finish();
  if (s.nodes * s.gpus_per_node > kMaxGpus) r.fail("cluster", "more than 2^24 GPUs");

  s.training = parse_training(r.object("training"));
  if (r.has("parallelism")) s.parallelism = parse_parallelism(r.object("parallelism"));
  else r.ignore("parallelism");
  const Parallelism& p = s.parallelism;
  // A master copy kept as the low halves of fp32 weights (NeMo's recipes) lives in the distributed
  // optimizer only; without it (MainParamsOptimizerWrapper) a full fp32 copy.
  if (s.training.precision.master_copy && s.training.precision.master_bytes < 4.0 && p.zero == 0)
    s.training.precision.master_bytes = 4.0;
  // FSDP's mixed precision computes from the weights it gathers in bf16: there must be a gather.
  if (s.training.precision.weights_cast_by_fsdp() && p.fsdp != "full_shard" && p.fsdp != "shard_grad_op" && p.fsdp != "hybrid_shard")
    r.fail("training/precision", "\"" + s.training.precision.name +
                                     "\" needs parallelism.fsdp full_shard, shard_grad_op or hybrid_shard (its weights are gathered in bf16)");
  const std::int64_t prod = p.dp * p.tp * p.pp * p.cp;
  if (prod != s.gpus())
    r.fail("parallelism", "dp*tp*pp*cp = " + std::to_string(prod) + " but the cluster has " +
                              std::to_string(s.gpus()) + " GPUs (nodes*gpus_per_node)");
  if (s.model.heads % p.tp != 0)
    r.fail("parallelism/tp", std::to_string(p.tp) + " does not divide heads=" + std::to_string(s.model.heads));
  if (p.dp % p.ep != 0) r.fail("parallelism/ep", std::to_string(p.ep) + " does not divide dp=" + std::to_string(p.dp));
  if (p.fsdp == "hybrid_shard") {
    // The shard group is the data-parallel ranks a node holds (at the placement order's stride);
    // the replicas are the nodes: the step's own placement and shard group.
    ParallelPlan plan;
    plan.tp = p.tp, plan.cp = p.cp, plan.dp = p.dp, plan.pp = p.pp;
    plan.order = p.order;
    plan.gpus_per_node = s.gpus_per_node;
    plan.fsdp = FsdpMode::hybrid_shard;
    const std::int64_t stride = placement_stride(plan, CommGroup::dp);
    if (stride < s.gpus_per_node && s.gpus_per_node % stride != 0)
      r.fail("parallelism/fsdp", "hybrid_shard needs the groups placed before dp in \"" + p.order + "\" (" + std::to_string(stride) +
                                     " GPUs) to divide a node's " + std::to_string(s.gpus_per_node) +
                                     " GPUs, else its shard groups straddle nodes");
    const std::int64_t shard = hybrid_shard_group(plan);
    if (p.dp % shard != 0)
      r.fail("parallelism/fsdp", "hybrid_shard shards over a node's " + std::to_string(shard) +
                                     " data-parallel ranks, which must divide dp=" + std::to_string(p.dp));
  }
  if (!p.layers_per_stage.empty()) {
    std::int64_t sum = 0;
    for (std::int64_t x : p.layers_per_stage) sum += x;
    if (std::int64_t(p.layers_per_stage.size()) != p.pp * p.virtual_stages)
      r.fail("parallelism/layers_per_stage", std::to_string(p.layers_per_stage.size()) + " entries; expected pp*virtual_stages = " +
                                                std::to_string(p.pp * p.virtual_stages));
    if (sum != s.model.layers)
      r.fail("parallelism/layers_per_stage", "the stages hold " + std::to_string(sum) + " layers; the model has " +
                                                std::to_string(s.model.layers));
  }
  if (s.model.layers < p.pp * p.virtual_stages)
    r.fail("parallelism/pp", "pp*virtual_stages = " + std::to_string(p.pp * p.virtual_stages) +
                                 " exceeds layers=" + std::to_string(s.model.layers));
  if (s.training.global_batch % (s.training.micro_batch * p.dp) != 0)
    r.fail("training/global_batch", std::to_string(s.training.global_batch) + " is not a multiple of micro_batch*dp=" +
                                        std::to_string(s.training.micro_batch * p.dp));
  {
    const std::int64_t mbs = s.training.global_batch / (s.training.micro_batch * p.dp);
    if (mbs % p.pipeline_runs != 0)
      r.fail("parallelism/pipeline_runs", std::to_string(p.pipeline_runs) + " does not divide the " + std::to_string(mbs) +
                                              " micro-batches of a step");
    const std::int64_t per_run = mbs / p.pipeline_runs;
    if (p.pp_schedule == "interleaved" && per_run % p.pp != 0)
      r.fail("training/global_batch", "the interleaved schedule needs the number of micro-batches (" + std::to_string(per_run) +
                                          (p.pipeline_runs > 1 ? " a run" : "") + ") to be a multiple of pp=" + std::to_string(p.pp));
  }
  if (p.sequence_parallel && p.tp == 1) r.fail("parallelism/sequence_parallel", "needs tp > 1");
  if (p.tp_comm_overlap && !p.sequence_parallel)
    r.fail("parallelism/tp_comm_overlap", "needs sequence_parallel (Transformer Engine's userbuffers overlap SP's all-gathers and reduce-scatters)");
  if (s.training.seq_len % (p.cp * (p.sequence_parallel ? p.tp : 1)) != 0)
    r.fail("training/seq_len", std::to_string(s.training.seq_len) + " is not divisible by cp" +
                                   std::string(p.sequence_parallel ? "*tp" : "") + "=" +
                                   std::to_string(p.cp * (p.sequence_parallel ? p.tp : 1)));
  if (s.model.ffn % p.tp != 0) r.fail("parallelism/tp", std::to_string(p.tp) + " does not divide ffn=" + std::to_string(s.model.ffn));
  if (s.model.experts > 1 && s.model.experts % p.ep != 0)
    r.fail("parallelism/ep", std::to_string(p.ep) + " does not divide experts=" + std::to_string(s.model.experts));
  if (s.training.seq_len > (std::int64_t(1) << 22) && s.training.attention == AttentionImpl::naive)
    r.fail("training/seq_len", "naive attention at this length is out of any GPU's reach; use flash");

  // How to simulate: folding alike ranks (auto: folded unless faults break the symmetry).
  if (r.has("simulation")) {
    JsonReader sim = r.object("simulation");
    const std::string fold = sim.choice_or("fold", {"auto", "on", "off"}, "auto");
    if (fold != "auto") s.fold = fold == "on";
    s.collectives_apart = sim.choice_or("apart", {"on", "off"}, "on") == "on";
    s.extrapolate = sim.choice_or("extrapolate", {"on", "off"}, "on") == "on";
    s.network = sim.choice_or("network", {"analytic", "flow"}, s.cluster_spec ? "flow" : "analytic");
    sim.finish();
  } else {
    r.ignore("simulation");
    if (s.cluster_spec) s.network = "flow";  // a cluster graph was given: simulate on it
  }
  // Faults in the simulated cluster: stragglers and stalls, and the NCCL timeout they run into.
  if (r.has("faults")) {
    JsonReader f = r.object("faults");
    s.faults.nccl_timeout_s = f.quantity_or("nccl_timeout", QuantityKind::time_s, s.faults.nccl_timeout_s);
    if (!(s.faults.nccl_timeout_s > 0)) f.fail("nccl_timeout", "expected a positive duration");
    if (f.has("stragglers")) {
      const Json& arr = f.raw("stragglers");
      if (!arr.is_array()) f.fail("stragglers", "expected an array of objects like {\"gpu\": 5, \"slowdown\": 1.2}");
      for (std::size_t i = 0; i < arr.size(); ++i) {
        JsonReader g(arr[i], file, f.path("stragglers") + "/" + std::to_string(i));
        Straggler st;
        st.rank = g.integer("gpu", 0, s.gpus() - 1);
        st.compute_slowdown = g.number_or("slowdown", 1.0, 1.0, 1000.0);
        st.loader_delay_s = g.quantity_or("loader_delay", QuantityKind::time_s, 0.0);
        st.stall_s = g.quantity_or("stall", QuantityKind::time_s, 0.0);
        st.stall_micro_batch = g.integer_or("stall_micro_batch", 0, 0, std::int64_t(1) << 32);
        g.string_or("cause", "");  // documentation: "thermal throttling", "slow data loader", ...
        if (st.loader_delay_s < 0 || st.stall_s < 0) g.fail(st.stall_s < 0 ? "stall" : "loader_delay", "expected a duration >= 0");
        g.finish();
        s.faults.stragglers.push_back(st);
      }
    } else {
      f.ignore("stragglers");
    }
    if (f.has("links")) {
      const Json& arr = f.raw("links");
      if (!arr.is_array()) f.fail("links", "expected an array of objects like {\"nic\": [1, 0], \"failed\": true}");
      for (std::size_t i = 0; i < arr.size(); ++i) {
        const std::string where = f.path("links") + "/" + std::to_string(i);
        JsonReader g(arr[i], file, where);
        Scenario::LinkFault lf;
        lf.path = where;
        int kinds = 0;
        for (const char* k : {"nic", "nvlink"})
          if (g.has(k)) {
            ++kinds;
            const Json& pair = g.raw(k);
            if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer())
              g.fail(k, std::string("expected [node, ") + (std::string(k) == "nic" ? "NIC" : "GPU") + " index in the node]");
            lf.kind = k;
            lf.node = pair[0].get<std::int64_t>();
            lf.index = pair[1].get<std::int64_t>();
            if (lf.node < 0 || lf.node >= s.nodes || lf.index < 0 || lf.index >= s.gpus_per_node)
              g.fail(k, "[" + std::to_string(lf.node) + ", " + std::to_string(lf.index) + "] is outside the " +
                            std::to_string(s.nodes) + " nodes of " + std::to_string(s.gpus_per_node));
          } else {
            g.ignore(k);
          }
        if (g.has("fabric")) {
          ++kinds;
          lf.kind = "fabric";
          lf.index = g.integer("fabric", 0, std::int64_t(1) << 30);
        } else {
          g.ignore("fabric");
        }
        if (kinds != 1) g.fail("", "expected exactly one of \"nic\": [node, nic], \"nvlink\": [node, gpu], \"fabric\": index");
        lf.failed = g.boolean_or("failed", false);
        lf.factor = g.number_or("bandwidth_factor", 1.0, 1e-6, 1.0);
        if (!lf.failed && lf.factor == 1.0) g.fail("bandwidth_factor", "a link fault needs \"failed\": true or a factor below 1");
        g.string_or("cause", "");
        g.finish();
        s.link_faults.push_back(lf);
      }
    } else {
      f.ignore("links");
    }
    f.finish();
  } else {
    r.ignore("faults");
  }
  if (!s.link_faults.empty() && !r.has("simulation")) s.network = "flow";
  if (!s.link_faults.empty() && s.network != "flow")
    r.fail("faults/links", "link faults need the flow-level network (simulation.network \"flow\")");
  if (s.network == "flow" && !s.cluster_spec) {
    // No cluster graph given: the GPU's usual server, a NIC per GPU at the scenario's speed, and
    // a non-blocking rail-optimised fabric, as the analytic figures assume.
    Json cl = {{"gpu", s.gpu.name}, {"nodes", s.nodes}, {"gpus_per_node", s.gpus_per_node},
               {"nics_per_node", s.gpus_per_node},
               {"nic_bandwidth", std::to_string(s.inter_node_bandwidth / 1e9) + " GB/s"}};
    try {
      s.cluster_spec = parse_cluster(cl, file, "/cluster");
    } catch (const InputError& e) {
      r.fail("simulation", std::string("\"network\": \"flow\" needs a cluster graph: give cluster.topology (") + e.what() + ")");
    }
  }
  if (r.has("claim")) {
    JsonReader cl = r.object("claim");
    Claim claim;
    claim.source = cl.string("source");
    claim.quote = cl.string("quote");
    if (cl.has("fits")) claim.fits = cl.boolean("fits");
    else cl.ignore("fits");
    claim.figure = cl.string_or("figure", "");
    cl.finish();
    s.claim = claim;
  } else {
    r.ignore("claim");
  }
  r.finish();
  return s;
}

Scenario load_scenario(const std::string& file, const std::vector<std::string>& overrides) {
  Json j = load_json_file(file);
  for (const auto& o : overrides) apply_override(j, o);
  return parse_scenario(j, file);
}

}  // namespace scaleout
