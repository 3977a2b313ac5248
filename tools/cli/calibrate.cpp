#include "tools/cli/calibrate.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>

#include "sim/network/collectives.hpp"
#include "tools/io/cluster.hpp"
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
    if (kind == "gemm" || kind == "gemm_novel" || kind == "gemm_fp8acc") {
      km.kernel.kind = KernelKind::gemm;
      km.novel = kind == "gemm_novel";
      km.accumulate_pair = kind == "gemm_fp8acc";
      if (km.accumulate_pair) {
        if (!m.contains("fast_accum") || !m["fast_accum"].is_boolean())
          throw InputError(file, path + "/fast_accum", "expected true or false (an fp8_acc row says how it accumulated)");
      } else if (m.contains("fast_accum") && !(m["fast_accum"].is_boolean() && m["fast_accum"].get<bool>())) {
        // The compute fit and check take gemm rows as run with fast accumulation (FP8's forward).
        throw InputError(file, path + "/fast_accum", "expected true on a " + kind + " row (rows without fast accumulation are the fp8_acc phase's, kind gemm_fp8acc)");
      }
      const auto d = parse_dtype(str("dtype"));
      if (!d) throw InputError(file, path + "/dtype", "unknown dtype");
      km.kernel.dtype = *d;
      km.kernel.gemm = GemmShape{std::int64_t(num("m")), std::int64_t(num("n")), std::int64_t(num("k")),
                                 m.contains("batch") ? std::int64_t(num("batch")) : 1};
      km.kernel.gemm.split_accumulate = km.accumulate_pair && !m["fast_accum"].get<bool>();
      // The harness's row-major layouts: "tn" and "tt" transpose A (its leading dimension is m).
      const std::string layout = m.value("layout", std::string("nn"));
      km.kernel.gemm.a_transposed = !layout.empty() && layout[0] == 't';
      // null: the harness could not read it (a non-finite value); absent alike.
      if (m.contains("waves") && !m["waves"].is_null()) km.waves = num("waves");
      if (m.contains("workspace_bytes") && !m["workspace_bytes"].is_null()) km.workspace = num("workspace_bytes") > 0;
      auto count = [&](const char* k, std::int64_t lowest) {
        if (!m.contains(k) || m[k].is_null()) return 0;
        if (!m[k].is_number_integer() || m[k].get<std::int64_t>() < lowest || m[k].get<std::int64_t>() > 65536)
          throw InputError(file, path + "/" + k, "expected a whole number from " + std::to_string(lowest) + " to 65536");
        return std::max(0, int(m[k].get<std::int64_t>()));
      };
      km.tile_m = count("tile_m", 1);
      km.tile_n = count("tile_n", 1);
      if ((km.tile_m > 0) != (km.tile_n > 0))
        throw InputError(file, path + (km.tile_m > 0 ? "/tile_n" : "/tile_m"), "expected tile_m and tile_n together");
      // -1: the algorithm decides at run time (cuBLASLt reports it for some tf32 kernels), read
      // as not recorded.
      km.split_k = count("split_k", -1);
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
    } else if (kind == "pcie" || kind == "launch" || kind == "gemm_check" || kind == "attention_check" ||
               kind == "gemm_variant") {
      // Link, host and correctness records, and GEMMs run with algorithms other than the heuristic's
      // first (what frameworks run): kept in the file, not part of the compute fit.
      continue;
    } else {
      throw InputError(file, path + "/kind", "expected gemm, gemm_novel, gemm_fp8acc, gemm_variant, attention, membound, pcie or launch, got \"" + kind + "\"");
    }
    km.seconds = num("time_s");
    if (!(km.seconds > 0)) throw InputError(file, path + "/time_s", "expected a positive time");
    out.push_back(km);
  }
  return out;
}

namespace {

// The zoo GPU of a measured device name ("NVIDIA H200" -> h200), unless given.
std::string zoo_gpu(const std::string& gpu_name, const std::string& given, const std::string& file) {
  if (!given.empty()) return given;
  std::string lower;
  for (char c : gpu_name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("h200") != std::string::npos) return "h200";
  if (lower.find("h100") != std::string::npos) return lower.find("pcie") != std::string::npos ? "h100-pcie" : "h100-sxm";
  if (lower.find("a100") != std::string::npos) return lower.find("40gb") != std::string::npos ? "a100-40g" : "a100-80g";
  if (lower.find("b200") != std::string::npos) return "b200";
  if (lower.find("l40s") != std::string::npos) return "l40s";
  throw InputError(file, "/gpu/name", "cannot tell which zoo GPU \"" + gpu_name + "\" is; pass --gpu");
}

std::string file_schema(const std::string& file) {
  const Json j = load_json_file(file);
  return j.is_object() && j.contains("schema") && j["schema"].is_string() ? j["schema"].get<std::string>() : "";
}

constexpr const char* kLinksSchema = "scaleout-links/1";

// The timing fields every measured row carries (the harness's add_measured).
void read_timing(JsonReader& r, LinkRow& row) {
  row.seconds = r.number("time_s", 0);
  if (!(row.seconds > 0)) r.fail("time_s", "expected a positive time");
  for (const char* k : {"min_s", "max_s", "algbw_gbps", "busbw_gbps"}) r.number(k, 0);
  r.integer("reps", 1);
  r.integer("inner", 1);
}

std::vector<int> read_ranks(JsonReader& r, int gpus) {
  const Json& v = r.raw("ranks");
  if (!v.is_array() || v.empty()) r.fail("ranks", "expected a non-empty array of GPU indices");
  std::vector<int> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<std::int64_t>() < 0 || v[i].get<std::int64_t>() >= gpus)
      throw InputError(r.file(), r.path("ranks") + "/" + std::to_string(i),
                       "expected a GPU index in [0, " + std::to_string(gpus - 1) + "], got " + describe(v[i]));
    const int x = int(v[i].get<std::int64_t>());
    if (std::find(out.begin(), out.end(), x) != out.end())
      throw InputError(r.file(), r.path("ranks") + "/" + std::to_string(i), "GPU " + std::to_string(x) + " appears twice");
    out.push_back(x);
  }
  return out;
}

std::string us(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.3f", seconds * 1e6);
  return b;
}

// Fits a links file and returns the profile's "links" section; prints the report.
Json fit_links_section(const CalibrateOptions& o, const std::string& file, std::string* zoo_out, std::ostream& os) {
  const LinkMeasurements m = read_link_measurements(file);
  const std::string zoo = zoo_gpu(m.gpu_name, o.gpu, file);
  if (zoo_out) *zoo_out = zoo;
  const ClusterSpec cluster = link_cluster(m, zoo, o.cluster);
  const LinkFitReport rep = fit_links(m, cluster);
  char buf[512];
  os << "links fit: " << m.rows.size() << " rows of " << file << " on cluster \"" << cluster.name << "\" (" << cluster.gpus()
     << " x " << cluster.gpu << ")\n";
  Json links = {{"measured_on", m.measured_on},
                {"source", "scaleout calibrate fit " + file + (o.cluster.empty() ? "" : " --cluster " + o.cluster)},
                {"cluster", cluster.name}};
  const double datasheet[3] = {cluster.nvlink_bandwidth.value / 2, cluster.pcie_bandwidth.value, cluster.nic_bandwidth.value};
  const char* names[3] = {"nvlink", "pcie", "network"};
  for (int c = 0; c < 3; ++c) {
    const LinkClassFit& f = rep.classes[std::size_t(c)];
    Json cls = Json::object();
    if (f.fitted) {
      cls["efficiency"] = f.efficiency;
      cls["step_latency_us"] = f.step_latency_s * 1e6;
      std::snprintf(buf, sizeof buf,
                    "  %-8s efficiency %.3f (%.1f of %.1f GB/s per direction), step latency %s us, %zu rows (%s)\n",
                    names[c], f.efficiency, f.efficiency * datasheet[c] / 1e9, datasheet[c] / 1e9,
                    us(f.step_latency_s).c_str(), f.rows, f.from_copies ? "cudaMemcpyPeer copies" : "NCCL send/recv");
      os << buf;
    }
    for (const CopyLine& l : rep.copies)
      if (l.link == names[c] && l.method == "memcpy" && l.bandwidth > 0) {
        char lat[32], bw[32];
        std::snprintf(lat, sizeof lat, "%.3f us", l.latency_s * 1e6);
        std::snprintf(bw, sizeof bw, "%.2f GB/s", l.bandwidth / 1e9);
        cls["p2p_latency"] = lat;
        cls["p2p_bandwidth"] = bw;
      }
    if (cls.contains("efficiency")) links[names[c]] = cls;
  }
  for (const auto& [name, f] : {std::pair{"ring", rep.ring}, {"tree", rep.tree}}) {
    if (!f.fitted) continue;
    links[name] = {{"step_latency_us", f.step_latency_s * 1e6}, {"bus_efficiency", f.bus_efficiency}};
    std::snprintf(buf, sizeof buf, "  %-8s bus efficiency %.3f, step latency %s us, %zu rows\n", name, f.bus_efficiency,
                  us(f.step_latency_s).c_str(), f.rows);
    os << buf;
  }
  for (const CopyLine& l : rep.copies) {
    if (l.bandwidth <= 0) continue;
    std::snprintf(buf, sizeof buf, "  copies   %s by %s: %.2f us + bytes / %.2f GB/s (%zu rows)\n", l.link.c_str(),
                  l.method.c_str(), l.latency_s * 1e6, l.bandwidth / 1e9, l.rows);
    os << buf;
  }
  const LinkFitStats& s = rep.stats;
  std::snprintf(buf, sizeof buf,
                "NCCL rows: fitted %zu (median error %.1f%%), held out %zu: median time error %.1f%%, worst %.1f%%; "
                "held out >= 64 MiB: %zu rows, busbw error median %.1f%%, worst %.1f%%\n",
                s.fitted, 100 * s.fitted_median_rel_error, s.held_out, 100 * s.held_out_median_rel_error,
                100 * s.held_out_worst_rel_error, s.held_out_large, 100 * s.busbw_median_rel_error,
                100 * s.busbw_worst_rel_error);
  os << buf;
  for (const auto& n : rep.notes) os << "note: " << n << "\n";
  links["fit"] = {{"fitted", s.fitted},
                  {"held_out", s.held_out},
                  {"fitted_median_rel_error", s.fitted_median_rel_error},
                  {"held_out_median_rel_error", s.held_out_median_rel_error},
                  {"held_out_worst_rel_error", s.held_out_worst_rel_error},
                  {"held_out_large", s.held_out_large},
                  {"held_out_large_busbw_median_rel_error", s.busbw_median_rel_error},
                  {"held_out_large_busbw_worst_rel_error", s.busbw_worst_rel_error},
                  {"notes", rep.notes}};
  if (!o.residuals.empty()) {
    std::ofstream csv(o.residuals);
    if (!csv) throw InputError(o.residuals + ": cannot write");
    csv << "op,ranks,algorithm,bytes,held_out,measured_s,predicted_s,rel_error,model_algorithm\n";
    for (const LinkResidual& r : rep.residuals) {
      std::string ranks;
      for (int x : r.row->ranks) ranks += (ranks.empty() ? "" : " ") + std::to_string(x);
      csv << collective_name(r.row->kind) << "," << ranks << "," << r.row->algorithm << "," << r.row->bytes << ","
          << (r.held_out ? 1 : 0) << "," << r.row->seconds << "," << r.predicted_s << ","
          << (r.predicted_s - r.row->seconds) / r.row->seconds << "," << r.algorithm << "\n";
    }
  }
  return links;
}

void write_profile(const Json& profile, const std::string& out, const std::string& zoo) {
  // What is written must read back (the reader is strict).
  parse_profile(profile, out, "", load_gpu(zoo));
  std::ofstream f(out);
  if (!f) throw InputError(out + ": cannot write the profile");
  f << profile.dump(2) << "\n";
}

// `calibrate fit LINKS.json`: the base profile with its "links" replaced.
void calibrate_links_only(const CalibrateOptions& o, std::ostream& os) {
  std::string zoo;
  const Json links = fit_links_section(o, o.measurements, &zoo, os);
  Json profile;
  if (!o.profile.empty()) {
    profile = load_json_file(o.profile);
    parse_profile(profile, o.profile, "", load_gpu(zoo));
  } else {
    const std::string shipped = data_dir() + "/hardware/profiles/" + zoo + ".json";
    if (std::ifstream(shipped)) profile = load_json_file(shipped);
    else profile = {{"name", zoo + "-links"}, {"measured_on", links["measured_on"]}, {"gpu", zoo},
                    {"source", "datasheet compute figures; links by scaleout calibrate fit"}};
  }
  profile["links"] = links;
  write_profile(profile, o.out, zoo);
  os << "wrote " << o.out << "\n";
}

}  // namespace

LinkMeasurements read_link_measurements(const std::string& file) {
  const Json j = load_json_file(file);
  JsonReader top(j, file, "");
  const std::string schema = top.string("schema");
  if (schema != kLinksSchema) top.fail("schema", "expected \"" + std::string(kLinksSchema) + "\", got \"" + schema + "\"");
  top.choice("kind", {"links"});
  LinkMeasurements m;
  m.file = file;
  JsonReader gpu = top.object("gpu");
  m.gpu_name = gpu.string("name");
  m.gpu_count = int(gpu.integer("count", 1, 1 << 16));
  gpu.integer("memory_bytes", 0);
  gpu.ignore("names");
  gpu.ignore("pci_bus_ids");
  gpu.finish();
  const std::string driver = top.string("driver");
  const std::string nccl = top.string("nccl_version");
  const std::string date = top.string("date");
  m.measured_on = m.gpu_name + " x" + std::to_string(m.gpu_count) + " (driver " + driver + ", NCCL " + nccl + "), " + date +
                  ", links by scaleout-links";
  for (const char* k : {"harness", "args", "host", "budget_s", "quick", "cuda_driver_api", "cuda_runtime", "env",
                        "elapsed_s", "complete", "notes"})
    top.ignore(k);
  JsonReader topo = top.object("topology");
  topo.string("nvidia_smi_topo_m");
  topo.ignore("link_classes");
  topo.finish();
  const Json& p2p = top.raw("p2p");
  if (!p2p.is_array()) top.fail("p2p", "expected an array");
  for (std::size_t i = 0; i < p2p.size(); ++i) {
    const std::string path = "/p2p/" + std::to_string(i);
    JsonReader r(p2p[i], file, path);
    LinkRow row;
    row.source = LinkRow::Source::p2p;
    row.where = file + ": " + path;
    row.src = int(r.integer("src", 0, m.gpu_count - 1));
    row.dst = int(r.integer("dst", 0, m.gpu_count - 1));
    row.link = r.choice("link", {"local", "nvlink", "pcie", "unknown"});
    r.boolean("peer_access");
    row.method = r.choice("method", {"memcpy", "kernel"});
    row.bytes = double(r.integer("bytes", 1));
    if (r.has("error")) {
      r.string("error");
      r.finish();
      continue;
    }
    read_timing(r, row);
    r.finish();
    m.rows.push_back(row);
  }
  const Json& coll = top.raw("collectives");
  if (!coll.is_array()) top.fail("collectives", "expected an array");
  for (std::size_t i = 0; i < coll.size(); ++i) {
    const std::string path = "/collectives/" + std::to_string(i);
    JsonReader r(coll[i], file, path);
    LinkRow row;
    row.where = file + ": " + path;
    const auto kind = parse_collective(r.string("op"));
    if (!kind) r.fail("op", "expected all_reduce, all_gather, reduce_scatter, all_to_all, broadcast or send_recv");
    row.kind = *kind;
    row.ranks = read_ranks(r, m.gpu_count);
    row.algorithm = r.choice("algorithm", {"auto", "ring", "tree"});
    if (r.has("error")) {
      r.string("error");
      r.ignore("bytes");
      r.finish();
      continue;
    }
    row.bytes = double(r.integer("bytes", 1));
    read_timing(r, row);
    r.finish();
    m.rows.push_back(row);
  }
  top.finish();
  return m;
}

ClusterSpec link_cluster(const LinkMeasurements& m, const std::string& gpu_zoo, const std::string& cluster) {
  ClusterSpec c;
  std::string where = "--cluster";
  if (cluster.empty()) {
    const Json j = {{"name", "measured-" + gpu_zoo + "-x" + std::to_string(m.gpu_count)},
                    {"gpu", gpu_zoo},
                    {"nodes", 1},
                    {"gpus_per_node", m.gpu_count}};
    c = parse_cluster(j, m.file, "/gpu");
  } else {
    c = load_cluster(cluster, &where);
  }
  if (c.gpu != gpu_zoo)
    throw InputError(where, "/gpu", "the cluster's GPU is \"" + c.gpu + "\" but the links were measured on " + gpu_zoo);
  if (c.gpus() < m.gpu_count)
    throw InputError(where, "", "the cluster has " + std::to_string(c.gpus()) + " GPUs, the measurements " +
                                    std::to_string(m.gpu_count));
  return c;
}

// The FP8 split-accumulation fit in one line: its factor and the held-out pairs' ratio error.
std::string accumulate_summary(const AccumulateFit& acc) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "gemm_fp8_split_accumulate = %.3f on %zu pairs; held out %zu: ratio error median %.1f%%, worst %.1f%%",
                acc.factor, acc.ratio.fitted, acc.ratio.held_out, 100 * acc.ratio.median_rel_error, 100 * acc.ratio.worst_rel_error);
  return buf;
}

void calibrate_fit(const CalibrateOptions& o, std::ostream& os) {
  if (file_schema(o.measurements) == kLinksSchema) return calibrate_links_only(o, os);
  std::string gpu_name, measured_on;
  const auto rows = read_measurements(o.measurements, &gpu_name, &measured_on, o.attention_impl);
  const std::string zoo = zoo_gpu(gpu_name, o.gpu, o.measurements);
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
  char lat[64], rlat[64], slat[64];
  std::snprintf(lat, sizeof lat, "%.3f us", p.kernel_latency.us());
  std::snprintf(slat, sizeof slat, "%.3f us", p.gemm_stream_ramp.us());
  std::snprintf(rlat, sizeof rlat, "%.3f us", p.reduction_latency.us());
  Json out = {
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
      {"gemm_unaligned_efficiency_by_dtype", [&] {
         Json u = Json::object();
         for (std::size_t i = 0; i < kDtypeCount; ++i)
           if (p.gemm_unaligned_efficiency_by_dtype[i] > 0) u[std::string(kDtypeNames[i])] = p.gemm_unaligned_efficiency_by_dtype[i];
         return u;
       }()},
      {"wave_quantization", p.wave_quantization},
      {"gemm_memory_efficiency", p.gemm_memory_efficiency},
      {"gemm_overlap_exponent", p.gemm_overlap_exponent},
      {"gemm_stream_ramp", slat},
      {"gemm_split_k", [&] {
         Json sk = Json::object();
         for (std::size_t i = 0; i < kDtypeCount; ++i) sk[std::string(kDtypeNames[i])] = bool(p.gemm_split_k[i]);
         return sk;
       }()},
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
  if (p.gemm_unaligned_tile.m > 0) out["gemm_unaligned_tile"] = {{"m", p.gemm_unaligned_tile.m}, {"n", p.gemm_unaligned_tile.n}};
  // FP8 split accumulation, where the file has the fp8_acc phase's pairs.
  const AccumulateFit acc = fit_fp8_split_accumulate(gpu, p, rows);
  if (!acc.pairs.empty()) {
    out["gemm_fp8_split_accumulate"] = acc.factor;
    out["fit"]["fp8_split_accumulate"] = stats(acc.ratio);
  }
  char buf[256];
  for (const auto& [name, s] : {std::pair{"GEMM", rep.gemm}, {"memory-bound", rep.memory}, {"attention", rep.attention}}) {
    std::snprintf(buf, sizeof buf, "%-13s fitted %4zu, held out %4zu: median error %5.1f%%, worst %5.1f%%\n", name,
                  s.fitted, s.held_out, 100 * s.median_rel_error, 100 * s.worst_rel_error);
    os << buf;
  }
  if (!acc.pairs.empty()) os << "FP8 split accumulation: " << accumulate_summary(acc) << "\n";
  for (const auto& n : rep.notes) os << "note: " << n << "\n";
  Json profile = out;
  if (!o.links.empty()) {
    if (file_schema(o.links) != kLinksSchema)
      throw InputError(o.links, "/schema", "--links: expected a scaleout-links/1 measurements file");
    CalibrateOptions lo = o;
    lo.residuals.clear();
    profile["links"] = fit_links_section(lo, o.links, nullptr, os);
  }
  write_profile(profile, o.out, zoo);
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

void calibrate_fp8_accumulate(const std::string& measurements, const std::string& profile_file, const std::string& gpu_given,
                              const std::string& out, std::ostream& os) {
  std::string gpu_name, measured_on;
  const auto rows = read_measurements(measurements, &gpu_name, &measured_on);
  const std::string zoo = zoo_gpu(gpu_name, gpu_given, measurements);
  const GpuSpec gpu = load_gpu(zoo);
  Json j = load_json_file(profile_file);
  const ComputeProfile profile = parse_profile(j, profile_file, "", gpu);
  const AccumulateFit acc = fit_fp8_split_accumulate(gpu, profile, rows);
  // The factor is a property of the SM (the tensor cores' accumulation): a profile of another GPU of
  // the same SM design may take it, said here.
  if (j.contains("gpu") && j["gpu"].is_string() && j["gpu"].get<std::string>() != zoo)
    os << "note: the profile is for " << j["gpu"].get<std::string>() << ", the measurements are from " << zoo
       << ": the factor carries over only between GPUs of one SM design\n";
  if (acc.pairs.empty())
    throw InputError(measurements, "/measurements", "expected the fp8_acc phase's rows (kind gemm_fp8acc, fast_accum true and false)");
  char buf[200];
  os << "FP8 products, fast accumulation off / on (" << gpu_name << (measured_on.empty() ? "" : ", " + measured_on) << "):\n";
  os << "       m       n       k   fast      off       measured  predicted\n";
  for (const AccumulatePair& pr : acc.pairs) {
    const GemmShape& g = pr.fast->kernel.gemm;
    std::snprintf(buf, sizeof buf, "%8lld%8lld%8lld %8.1f us %8.1f us  %6.3f    %6.3f%s\n", (long long)g.m, (long long)g.n, (long long)g.k,
                  pr.fast->seconds * 1e6, pr.split->seconds * 1e6, pr.measured_ratio, pr.predicted_ratio, pr.held_out ? "  (held out)" : "");
    os << buf;
  }
  os << "fitted " << accumulate_summary(acc) << "\n";
  j["gemm_fp8_split_accumulate"] = acc.factor;
  j["source"] = j.value("source", std::string()) + "; gemm_fp8_split_accumulate by scaleout calibrate fp8-accumulate " + measurements;
  write_profile(j, out, zoo);
  os << "wrote " << out << "\n";
}

void calibrate_check(const std::string& measurements, const std::string& profile_file, const std::string& gpu_given,
                     const std::string& residuals, std::ostream& os) {
  std::string gpu_name, measured_on;
  // The attention rows of the backend the fit uses (PyTorch SDPA's flash).
  const auto rows = read_measurements(measurements, &gpu_name, &measured_on, "torch_flash");
  const std::string zoo = zoo_gpu(gpu_name, gpu_given, measurements);
  const GpuSpec gpu = load_gpu(zoo);
  const ComputeProfile profile = parse_profile(load_json_file(profile_file), profile_file, "", gpu);
  const ComputeModel cm(gpu, profile);
  // Errors by group: every GEMM, each GEMM dtype, memory-bound kernels, attention.
  std::map<std::string, std::vector<double>> errors;
  std::ofstream csv;
  if (!residuals.empty()) {
    csv.open(residuals);
    if (!csv) throw InputError(residuals + ": cannot write");
    csv << "kind,dtype,m,n,k,bytes,op,measured_s,predicted_s,rel_error,tile,split,model_tile,model_split\n";
  }
  for (const KernelMeasurement& r : rows) {
    const Kernel& k = r.kernel;
    const double predicted = cm.time(k).seconds();
    const double err = (predicted - r.seconds) / r.seconds;
    const char* kind = r.accumulate_pair ? (k.gemm.split_accumulate ? "gemm_fp8acc_off" : "gemm_fp8acc_on")
                     : k.kind == KernelKind::gemm ? "gemm" : k.kind == KernelKind::memory ? "membound"
                     : k.kind == KernelKind::attention_fwd ? "attention_fwd" : "attention_bwd";
    if (r.accumulate_pair) {
      errors["GEMM fp8_acc rows"].push_back(std::fabs(err));  // apart: a pair is one shape twice
    } else if (k.kind == KernelKind::gemm) {
      errors["GEMM"].push_back(std::fabs(err));
      errors["GEMM " + std::string(to_string(k.dtype))].push_back(std::fabs(err));
      if (r.novel) errors["GEMM novel shapes"].push_back(std::fabs(err));
    } else if (k.kind == KernelKind::memory) {
      errors["memory-bound"].push_back(std::fabs(err));
    } else {
      errors["attention"].push_back(std::fabs(err));
    }
    if (csv) {
      csv << kind << "," << to_string(k.dtype) << "," << k.gemm.m << "," << k.gemm.n << "," << k.gemm.k << "," << k.bytes << ","
          << k.name << "," << r.seconds << "," << predicted << "," << err;
      // The tile and split cuBLASLt ran (where recorded) beside the model's own choice.
      if (k.kind == KernelKind::gemm) {
        const GemmPlan plan = cm.gemm_plan(k.gemm, k.dtype);
        csv << "," << (r.tile_m > 0 ? std::to_string(r.tile_m) + "x" + std::to_string(r.tile_n) : "") << ","
            << (r.split_k > 0 ? std::to_string(r.split_k) : "") << "," << plan.tile_m << "x" << plan.tile_n << "," << plan.split;
      } else {
        csv << ",,,,";
      }
      csv << "\n";
    }
  }
  // The fp8_acc pairs: what split accumulation costs, measured against the profile's factor.
  for (const AccumulatePair& pr : accumulate_pairs(rows, 1 << 30)) {
    const double predicted = cm.time(pr.split->kernel).seconds() / cm.time(pr.fast->kernel).seconds();
    errors["FP8 split/fast"].push_back(std::fabs(predicted / pr.measured_ratio - 1.0));
  }
  os << "profile " << profile_file << " against " << measurements << " (" << gpu_name
     << (measured_on.empty() ? "" : ", " + measured_on) << "):\n";
  char buf[160];
  for (auto& [name, e] : errors) {
    std::sort(e.begin(), e.end());
    const double median = e.size() % 2 ? e[e.size() / 2] : 0.5 * (e[e.size() / 2 - 1] + e[e.size() / 2]);
    std::snprintf(buf, sizeof buf, "%-14s %4zu rows: median error %5.1f%%, worst %5.1f%%\n", name.c_str(), e.size(), 100 * median,
                  100 * e.back());
    os << buf;
  }
}

}  // namespace scaleout
