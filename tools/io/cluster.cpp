#include "tools/io/cluster.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "tools/io/scenario.hpp"

namespace scaleout {
namespace fs = std::filesystem;

const std::vector<ClusterField>& cluster_fields() {
  static const std::vector<ClusterField> fields = {
      {"name", "string", "file name", "what the cluster is called"},
      {"description", "string", "\"\"", "one line for listings"},
      {"base", "string", "none", "a shipped cluster whose fields this one starts from"},
      {"gpu", "string", "required", "GPU of the zoo (hardware/gpus), e.g. \"h100-sxm\""},
      {"nodes", "integer", "1", "servers (NVLink domains)"},
      {"gpus_per_node", "integer", "the GPU's usual server", "GPUs per node"},
      {"node", "nvswitch | nvlink-bridge-pairs | pcie", "the GPU's usual server", "how GPUs of a node connect"},
      {"nvlink_bandwidth", "bandwidth", "the GPU's NVLink figure", "total bidirectional NVLink per GPU (vendor figure)"},
      {"nvlink_efficiency", "number", "NCCL's (0.8 A100, 0.824 H100, 0.802 B200)", "usable fraction of NVLink"},
      {"nvlink_latency", "time", "150 ns", "NVLink hop latency"},
      {"nvls", "boolean", "true on Hopper or later NVSwitch nodes", "the NVSwitch reduces (NVLink SHARP)"},
      {"pcie_bandwidth", "bandwidth", "the GPU's PCIe figure", "per direction, per x16 link"},
      {"pcie_efficiency", "number", "0.75", "usable fraction of PCIe (NCCL: 12 GB/s per Gen3 x16, 24 per Gen4)"},
      {"pcie_latency", "time", "250 ns", "PCIe hop latency"},
      {"pcie_p2p", "boolean", "true", "GPUs reach each other over PCIe (false: through host memory)"},
      {"gpus_per_pcie_switch", "integer", "2", "GPUs (and their NICs) under one PCIe switch"},
      {"nics_per_node", "integer", "one per GPU (NVLink nodes), one (PCIe nodes)", "network adapters per node"},
      {"network", "infiniband-hdr | infiniband-ndr | infiniband-xdr | infiniband | roce", "infiniband-ndr",
       "the fabric's technology; HDR 200, NDR 400, XDR 800 Gb/s"},
      {"nic_bandwidth", "bandwidth", "the network's speed", "per NIC and direction, e.g. \"400 Gb/s\""},
      {"network_efficiency", "number", "0.96", "usable fraction of a network link (NCCL: 12 GB/s per 100 Gb/s)"},
      {"nic_latency", "time", "600 ns", "NIC to leaf switch"},
      {"switch_latency", "time", "130 ns", "per switch hop"},
      {"fabric", "single-switch | fat-tree | rail-optimized", "rail-optimized", "how NICs connect"},
      {"levels", "integer", "2", "fat-tree levels (1 to 3)"},
      {"oversubscription", "number", "1", "leaf downlink : uplink bandwidth (2 = 2:1)"},
      {"switch_radix", "integer", "40 HDR, 64 NDR and RoCE, 144 XDR", "ports per network switch"},
      {"fabric_link_bandwidth", "bandwidth", "the NIC speed", "switch-to-switch links"},
      {"sources", "array of strings", "[]", "where the figures come from"},
      {"notes", "string", "\"\"", "anything else"},
  };
  return fields;
}

namespace {

// What a layer of the file says; a "base" layer is read first, with its own file in errors.
struct Raw {
  std::optional<std::string> name, description, gpu, node, network, fabric, notes;
  std::optional<std::int64_t> nodes, gpus_per_node, gpus_per_pcie_switch, nics_per_node, levels, switch_radix;
  std::optional<double> nvlink_bandwidth, nvlink_efficiency, nvlink_latency, pcie_bandwidth, pcie_efficiency,
      pcie_latency, nic_bandwidth, network_efficiency, nic_latency, switch_latency, oversubscription,
      fabric_link_bandwidth;
  std::optional<bool> nvls, pcie_p2p;
  std::optional<std::vector<std::string>> sources;
};

const std::vector<std::string> kNodeKinds = {"nvswitch", "nvlink-bridge-pairs", "pcie"};
const std::vector<std::string> kNetworks = {"infiniband-hdr", "infiniband-ndr", "infiniband-xdr", "infiniband", "roce"};
const std::vector<std::string> kFabrics = {"single-switch", "fat-tree", "rail-optimized"};

std::string cluster_file(const std::string& name, const std::string& file, const std::string& path) {
  const bool safe = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  }) && name.find("..") == std::string::npos;
  const fs::path p = fs::path(data_dir()) / "hardware/clusters" / (name + ".json");
  if (!safe || !is_file(p.string())) {
    std::string known;
    for (const auto& n : cluster_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError(file, path, "unknown cluster \"" + name + "\" (known: " + known + ")");
  }
  return p.string();
}

template <typename T, typename F>
void opt(JsonReader& r, const char* key, std::optional<T>& dst, F read) {
  if (r.has(key)) dst = read(key);
  else r.ignore(key);
}

void read_layer(const Json& j, const std::string& file, const std::string& path, Raw& raw, int depth) {
  JsonReader r(j, file, path);
  if (r.has("base")) {
    if (depth > 8) r.fail("base", "bases nest too deeply (a cycle?)");
    const std::string base = r.string("base");
    const std::string f = cluster_file(base, file, r.path("base"));
    read_layer(load_json_file(f), f, "", raw, depth + 1);
  } else {
    r.ignore("base");
  }
  auto str = [&](const std::string& k) { return r.string(k); };
  auto bw = [&](const std::string& k) { return r.quantity(k, QuantityKind::bandwidth); };
  auto tm = [&](const std::string& k) { return r.quantity(k, QuantityKind::time_s); };
  auto eff = [&](const std::string& k) { return r.number(k, 1e-3, 1.0); };
  opt(r, "name", raw.name, str);
  opt(r, "description", raw.description, str);
  opt(r, "gpu", raw.gpu, str);
  opt(r, "notes", raw.notes, str);
  opt(r, "node", raw.node, [&](const std::string& k) { return r.choice(k, kNodeKinds); });
  opt(r, "network", raw.network, [&](const std::string& k) { return r.choice(k, kNetworks); });
  opt(r, "fabric", raw.fabric, [&](const std::string& k) { return r.choice(k, kFabrics); });
  opt(r, "nodes", raw.nodes, [&](const std::string& k) { return r.integer(k, 1, 1 << 20); });
  opt(r, "gpus_per_node", raw.gpus_per_node, [&](const std::string& k) { return r.integer(k, 1, 1024); });
  opt(r, "gpus_per_pcie_switch", raw.gpus_per_pcie_switch, [&](const std::string& k) { return r.integer(k, 1, 1024); });
  opt(r, "nics_per_node", raw.nics_per_node, [&](const std::string& k) { return r.integer(k, 0, 1024); });
  opt(r, "levels", raw.levels, [&](const std::string& k) { return r.integer(k, 1, 3); });
  opt(r, "switch_radix", raw.switch_radix, [&](const std::string& k) { return r.integer(k, 3, 4096); });
  opt(r, "nvlink_bandwidth", raw.nvlink_bandwidth, bw);
  opt(r, "pcie_bandwidth", raw.pcie_bandwidth, bw);
  opt(r, "nic_bandwidth", raw.nic_bandwidth, bw);
  opt(r, "fabric_link_bandwidth", raw.fabric_link_bandwidth, bw);
  opt(r, "nvlink_efficiency", raw.nvlink_efficiency, eff);
  opt(r, "pcie_efficiency", raw.pcie_efficiency, eff);
  opt(r, "network_efficiency", raw.network_efficiency, eff);
  opt(r, "nvlink_latency", raw.nvlink_latency, tm);
  opt(r, "pcie_latency", raw.pcie_latency, tm);
  opt(r, "nic_latency", raw.nic_latency, tm);
  opt(r, "switch_latency", raw.switch_latency, tm);
  opt(r, "oversubscription", raw.oversubscription, [&](const std::string& k) { return r.number(k, 1.0, 1024.0); });
  opt(r, "nvls", raw.nvls, [&](const std::string& k) { return r.boolean(k); });
  opt(r, "pcie_p2p", raw.pcie_p2p, [&](const std::string& k) { return r.boolean(k); });
  opt(r, "sources", raw.sources, [&](const std::string& k) { return r.strings_or(k); });
  r.finish();
}

GpuGeneration generation_of(const std::string& gpu) {
  // NCCL tunes by compute capability: 7.x Volta, 8.x Ampere (and Ada), 9.0 Hopper, 10.0 Blackwell.
  if (gpu.rfind("v100", 0) == 0) return GpuGeneration::volta;
  if (gpu.rfind("h100", 0) == 0 || gpu.rfind("h200", 0) == 0 || gpu.rfind("h800", 0) == 0 || gpu.rfind("h20", 0) == 0)
    return GpuGeneration::hopper;
  if (gpu.rfind("b200", 0) == 0 || gpu.rfind("gb200", 0) == 0 || gpu.rfind("b100", 0) == 0) return GpuGeneration::blackwell;
  return GpuGeneration::ampere;
}

}  // namespace

std::vector<std::string> cluster_names() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(data_dir()) / "hardware/clusters", ec))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

ClusterSpec parse_cluster(const Json& j, const std::string& file, const std::string& path) {
  if (j.is_string()) return load_cluster(j.get<std::string>());
  Raw raw;
  read_layer(j, file, path, raw, 0);
  auto fail = [&](const std::string& key, const std::string& what) -> void {
    throw InputError(file, path + "/" + key, what);
  };
  ClusterSpec c;
  if (!raw.gpu) fail("gpu", "missing required field");
  c.gpu = *raw.gpu;
  GpuSpec gpu;
  {
    // The GPU of the zoo supplies defaults (its NVLink, PCIe and usual server).
    const auto names = zoo_names("gpus");
    if (std::find(names.begin(), names.end(), c.gpu) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      fail("gpu", "unknown GPU \"" + c.gpu + "\" (known: " + known + ")");
    }
    gpu = load_gpu(c.gpu);
  }
  c.name = raw.name.value_or(fs::path(file).stem().string());
  c.description = raw.description.value_or("");
  c.generation = generation_of(c.gpu);
  c.nodes = int(raw.nodes.value_or(1));
  c.gpus_per_node = int(raw.gpus_per_node.value_or(gpu.gpus_per_node));
  const std::string node = raw.node.value_or(gpu.default_node);
  if (node == "nvswitch") c.node_kind = NodeKind::nvswitch;
  else if (node == "nvlink-bridge-pairs") c.node_kind = NodeKind::nvlink_bridge_pairs;
  else if (node == "pcie") c.node_kind = NodeKind::pcie;
  else fail("node", "the GPU's usual server \"" + node + "\" is not modelled; give \"node\": one of nvswitch, nvlink-bridge-pairs, pcie");
  if (c.gpus() > (1 << 22)) fail("nodes", "more than 2^22 GPUs");
  c.nvlink_bandwidth = BytesPerSecond{raw.nvlink_bandwidth.value_or(gpu.nvlink_bandwidth.value)};
  if (c.node_kind != NodeKind::pcie && c.nvlink_bandwidth.value <= 0)
    fail("nvlink_bandwidth", "a " + node + " node needs a positive NVLink bandwidth (the GPU has none)");
  c.nvlink_efficiency = raw.nvlink_efficiency.value_or(default_nvlink_efficiency(c.generation));
  c.explicit_nvlink_efficiency = raw.nvlink_efficiency.has_value();
  c.explicit_pcie_efficiency = raw.pcie_efficiency.has_value();
  c.explicit_network_efficiency = raw.network_efficiency.has_value();
  if (raw.nvlink_latency) c.nvlink_latency = Time::from_seconds(*raw.nvlink_latency);
  const bool nvls_capable = c.node_kind == NodeKind::nvswitch &&
                            (c.generation == GpuGeneration::hopper || c.generation == GpuGeneration::blackwell);
  c.nvls = raw.nvls.value_or(nvls_capable);
  if (c.nvls && !nvls_capable) fail("nvls", "NVLink SHARP needs an NVSwitch node of Hopper or later GPUs");
  c.pcie_bandwidth = BytesPerSecond{raw.pcie_bandwidth.value_or(gpu.pcie_bandwidth.value)};
  if (c.pcie_bandwidth.value <= 0) fail("pcie_bandwidth", "must be positive");
  c.pcie_efficiency = raw.pcie_efficiency.value_or(0.75);
  if (raw.pcie_latency) c.pcie_latency = Time::from_seconds(*raw.pcie_latency);
  c.pcie_p2p = raw.pcie_p2p.value_or(true);
  c.gpus_per_pcie_switch = int(raw.gpus_per_pcie_switch.value_or(2));
  c.nics_per_node = int(raw.nics_per_node.value_or(c.node_kind == NodeKind::pcie ? 1 : c.gpus_per_node));
  if (c.nics_per_node > c.gpus_per_node) fail("nics_per_node", "more NICs than GPUs per node is not modelled");

  const std::string network = raw.network.value_or("infiniband-ndr");
  double default_speed = 0;
  c.switch_radix = 64;
  c.network = NetworkKind::infiniband;
  if (network == "infiniband-hdr") default_speed = 200e9 / 8, c.switch_radix = 40;  // Quantum QM8700: 40 ports
  else if (network == "infiniband-ndr") default_speed = 400e9 / 8;                  // Quantum-2 QM9700: 64 ports
  else if (network == "infiniband-xdr") default_speed = 800e9 / 8, c.switch_radix = 144;  // Quantum-X800
  else if (network == "roce") c.network = NetworkKind::roce;
  c.nic_bandwidth = BytesPerSecond{raw.nic_bandwidth.value_or(default_speed)};
  if (c.nics_per_node > 0 && c.nic_bandwidth.value <= 0)
    fail("nic_bandwidth", "\"" + network + "\" has no standard speed: give nic_bandwidth, e.g. \"400 Gb/s\"");
  c.network_efficiency = raw.network_efficiency.value_or(0.96);
  if (raw.nic_latency) c.nic_latency = Time::from_seconds(*raw.nic_latency);
  if (raw.switch_latency) c.switch_latency = Time::from_seconds(*raw.switch_latency);
  const std::string fabric = raw.fabric.value_or("rail-optimized");
  c.fabric = fabric == "single-switch" ? FabricKind::single_switch : fabric == "fat-tree" ? FabricKind::fat_tree
                                                                                         : FabricKind::rail_optimized;
  c.levels = int(raw.levels.value_or(2));
  c.oversubscription = raw.oversubscription.value_or(1.0);
  if (raw.switch_radix) c.switch_radix = int(*raw.switch_radix);
  c.fabric_link_bandwidth = BytesPerSecond{raw.fabric_link_bandwidth.value_or(0)};
  c.sources = raw.sources.value_or(std::vector<std::string>{});
  c.notes = raw.notes.value_or("");
  return c;
}

ClusterSpec load_cluster(const std::string& name_or_file, std::string* file_out) {
  std::string file;
  const bool looks_like_path = name_or_file.find('/') != std::string::npos ||
                               (name_or_file.size() > 5 && name_or_file.substr(name_or_file.size() - 5) == ".json");
  if (looks_like_path) file = name_or_file;
  else file = cluster_file(name_or_file, "--cluster", "");
  if (file_out) *file_out = file;
  return parse_cluster(load_json_file(file), file, "");
}

Topology cluster_topology(const ClusterSpec& spec, const std::string& file, const std::string& path) {
  // The graph, its routes and the flows on it grow with the GPUs: 16,384 GPUs take seconds and
  // hundreds of MB; a million would take tens of GB. Refuse what would not finish.
  if (double(spec.nodes) * double(spec.gpus_per_node) > 65536)
    throw InputError(file, path + "/nodes", std::to_string(spec.nodes) + " nodes of " + std::to_string(spec.gpus_per_node) +
                                                " GPUs: the flow-level network simulates at most 65536 GPUs (use "
                                                "simulation.network \"analytic\" beyond)");
  Topology t = build_topology(spec);
  if (const auto problem = t.find_disconnected()) {
    std::string key = "";
    if (problem->find("no NIC") != std::string::npos) key = "/nics_per_node";
    else if (problem->find("through the fabric") != std::string::npos) key = "/fabric";
    else if (problem->find("inside the node") != std::string::npos) key = "/node";
    throw InputError(file, path + key, "the cluster is not connected: " + *problem);
  }
  return t;
}

}  // namespace scaleout
