#include "tools/cli/calibrate.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <ostream>

#include "tools/io/scenario.hpp"

namespace scaleout {

std::vector<KernelMeasurement> read_measurements(const std::string& file, std::string* gpu_name,
                                                 std::string* measured_on, const std::string& attention_impl) {
  const Json j = load_json_file(file);
  JsonReader top(j, file, "");
  const std::string schema = top.string("schema");
  if (schema != "scaleout-measurements/1")
    top.fail("schema", "expected \"scaleout-measurements/1\", got \"" + schema + "\"");
  const Json& gpu = top.raw("gpu");
  if (!gpu.is_object() || !gpu.contains("name") || !gpu["name"].is_string())
    throw InputError(file, "/gpu/name", "expected the GPU's name as a string");
  if (gpu_name) *gpu_name = gpu["name"].get<std::string>();
  if (measured_on) {
    *measured_on = gpu["name"].get<std::string>();
    if (j.contains("driver")) *measured_on += ", driver " + j["driver"].dump();
    if (j.contains("date") && j["date"].is_string()) *measured_on += ", " + j["date"].get<std::string>();
  }
  const Json& ms = top.raw("measurements");
  if (!ms.is_array()) top.fail("measurements", "expected an array");
  std::vector<KernelMeasurement> out;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    const std::string path = "/measurements/" + std::to_string(i);
    const Json& m = ms[i];
    if (!m.is_object()) throw InputError(file, path, "expected an object");
    if (m.contains("error") && !m["error"].is_null()) continue;  // a measurement the harness could not take
    auto num = [&](const char* k) {
      if (!m.contains(k) || !m[k].is_number() || !(m[k].get<double>() >= 0))
        throw InputError(file, path + "/" + k, "expected a non-negative number");
      return m[k].get<double>();
    };
    auto str = [&](const char* k) {
      if (!m.contains(k) || !m[k].is_string()) throw InputError(file, path + "/" + k, "expected a string");
      return m[k].get<std::string>();
    };
    const std::string kind = str("kind");
    KernelMeasurement km;
    if (kind == "gemm") {
      km.kernel.kind = KernelKind::gemm;
      const auto d = parse_dtype(str("dtype"));
      if (!d) throw InputError(file, path + "/dtype", "unknown dtype");
      km.kernel.dtype = *d;
      km.kernel.gemm = GemmShape{std::int64_t(num("m")), std::int64_t(num("n")), std::int64_t(num("k")),
                                 m.contains("batch") ? std::int64_t(num("batch")) : 1};
      // The harness's row-major layouts: "tn" and "tt" transpose A (its leading dimension is m).
      const std::string layout = m.value("layout", std::string("nn"));
      km.kernel.gemm.a_transposed = !layout.empty() && layout[0] == 't';
    } else if (kind == "attention") {
      if (!attention_impl.empty() && m.value("impl", std::string()) != attention_impl) continue;
      const std::string pass = str("pass");
      if (pass != "fwd" && pass != "bwd") throw InputError(file, path + "/pass", "expected \"fwd\" or \"bwd\"");
      km.kernel.kind = pass == "fwd" ? KernelKind::attention_fwd : KernelKind::attention_bwd;
      km.kernel.attn = AttentionShape{std::int64_t(num("batch")), std::int64_t(num("heads")), std::int64_t(num("seq")),
                                      std::int64_t(num("head_dim")), m.value("causal", true)};
    } else if (kind == "membound") {
      km.kernel.kind = KernelKind::memory;
      km.kernel.bytes = num("bytes");
      km.kernel.name = str("op");
      km.kernel.reduction = km.kernel.name == "layernorm" || km.kernel.name == "rmsnorm" || km.kernel.name == "softmax";
    } else if (kind == "pcie" || kind == "launch" || kind == "gemm_check" || kind == "attention_check") {
      continue;  // link, host and correctness records: kept in the file, not part of the compute fit
    } else {
      throw InputError(file, path + "/kind", "expected gemm, attention, membound, pcie or launch, got \"" + kind + "\"");
    }
    km.seconds = num("time_s");
    if (!(km.seconds > 0)) throw InputError(file, path + "/time_s", "expected a positive time");
    out.push_back(km);
  }
  return out;
}

void calibrate_fit(const CalibrateOptions& o, std::ostream& os) {
  std::string gpu_name, measured_on;
  const auto rows = read_measurements(o.measurements, &gpu_name, &measured_on, o.attention_impl);
  std::string zoo = o.gpu;
  if (zoo.empty()) {
    std::string lower;
    for (char c : gpu_name) lower += char(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("h200") != std::string::npos) zoo = "h200";
    else if (lower.find("h100") != std::string::npos) zoo = lower.find("pcie") != std::string::npos ? "h100-pcie" : "h100-sxm";
    else if (lower.find("a100") != std::string::npos) zoo = lower.find("40gb") != std::string::npos ? "a100-40g" : "a100-80g";
    else if (lower.find("b200") != std::string::npos) zoo = "b200";
    else if (lower.find("l40s") != std::string::npos) zoo = "l40s";
    else throw InputError(o.measurements, "/gpu/name", "cannot tell which zoo GPU \"" + gpu_name + "\" is; pass --gpu");
  }
  const GpuSpec gpu = load_gpu(zoo);
  const FitReport rep = fit_profile(gpu, rows, default_profile(gpu));
  const ComputeProfile& p = rep.profile;
  Json eff = Json::object();
  for (std::size_t i = 0; i < kDtypeCount; ++i) eff[std::string(kDtypeNames[i])] = p.gemm_efficiency[i];
  Json tiles = Json::array();
  for (const auto& t : p.tiles) tiles.push_back({{"m", t.m}, {"n", t.n}, {"efficiency", t.efficiency}});
  auto stats = [](const FitStats& s) {
    return Json{{"fitted", s.fitted}, {"held_out", s.held_out}, {"held_out_median_rel_error", s.median_rel_error},
                {"held_out_worst_rel_error", s.worst_rel_error}};
  };
  char lat[64], rlat[64];
  std::snprintf(lat, sizeof lat, "%.3f us", p.kernel_latency.us());
  std::snprintf(rlat, sizeof rlat, "%.3f us", p.reduction_latency.us());
  const Json out = {
      {"name", zoo + "-calibrated"},
      {"measured_on", measured_on},
      {"source", "scaleout calibrate fit " + o.measurements},
      {"gpu", zoo},
      {"gemm_efficiency", eff},
      {"gemm_k_half", p.gemm_k_half},
      {"gemm_k_half_by_dtype", [&] {
         Json kh = Json::object();
         for (std::size_t i = 0; i < kDtypeCount; ++i)
           if (p.gemm_k_half_by_dtype[i] > 0) kh[std::string(kDtypeNames[i])] = p.gemm_k_half_by_dtype[i];
         return kh;
       }()},
      {"gemm_unaligned_efficiency", p.gemm_unaligned_efficiency},
      {"wave_quantization", p.wave_quantization},
      {"gemm_memory_efficiency", p.gemm_memory_efficiency},
      {"tiles", tiles},
      {"memory_efficiency", p.memory_efficiency},
      {"kernel_latency", lat},
      {"reduction_efficiency", p.reduction_efficiency},
      {"reduction_latency", rlat},
      {"attention_fwd_efficiency", p.attention_fwd_efficiency},
      {"attention_bwd_efficiency", p.attention_bwd_efficiency},
      {"attention_seq_half", p.attention_seq_half},
      {"fit", {{"gemm", stats(rep.gemm)}, {"memory", stats(rep.memory)}, {"attention", stats(rep.attention)},
               {"notes", rep.notes}}},
  };
  std::ofstream f(o.out);
  if (!f) throw InputError(o.out + ": cannot write the profile");
  f << out.dump(2) << "\n";
  char buf[256];
  for (const auto& [name, s] : {std::pair{"GEMM", rep.gemm}, {"memory-bound", rep.memory}, {"attention", rep.attention}}) {
    std::snprintf(buf, sizeof buf, "%-13s fitted %4zu, held out %4zu: median error %5.1f%%, worst %5.1f%%\n", name,
                  s.fitted, s.held_out, 100 * s.median_rel_error, 100 * s.worst_rel_error);
    os << buf;
  }
  for (const auto& n : rep.notes) os << "note: " << n << "\n";
  if (!o.residuals.empty()) {
    std::ofstream csv(o.residuals);
    if (!csv) throw InputError(o.residuals + ": cannot write");
    csv << "kind,dtype,m,n,k,batch,heads,seq,head_dim,bytes,op,held_out,measured_s,predicted_s,rel_error\n";
    for (const auto& r : rep.residuals) {
      const Kernel& k = r.row->kernel;
      const char* kind = k.kind == KernelKind::gemm ? "gemm" : k.kind == KernelKind::memory ? "membound"
                       : k.kind == KernelKind::attention_fwd ? "attention_fwd" : "attention_bwd";
      csv << kind << "," << to_string(k.dtype) << "," << k.gemm.m << "," << k.gemm.n << "," << k.gemm.k << "," << k.attn.batch
          << "," << k.attn.heads << "," << k.attn.seq << "," << k.attn.head_dim << "," << k.bytes << "," << k.name << ","
          << (r.held_out ? 1 : 0) << "," << r.row->seconds << "," << r.predicted_s << ","
          << (r.predicted_s - r.row->seconds) / r.row->seconds << "\n";
    }
  }
  os << "wrote " << o.out << "\n";
}

}  // namespace scaleout
