#include "tools/cli/collective.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "sim/network/collectives.hpp"
#include "hardware/link_profile.hpp"
#include "tools/io/cluster.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/units_parse.hpp"

namespace scaleout {
namespace {

double parse_size(const std::string& text, const std::string& what) {
  try {
    return parse_quantity(text, QuantityKind::bytes);
  } catch (const std::invalid_argument& e) {
    throw InputError(what + ": " + e.what());
  }
}

std::string human_size(double b) {
  char buf[32];
  if (b >= 1073741824.0 && std::fmod(b, 1073741824.0) == 0) std::snprintf(buf, sizeof buf, "%.0f GiB", b / 1073741824.0);
  else if (b >= 1048576.0 && std::fmod(b, 1048576.0) == 0) std::snprintf(buf, sizeof buf, "%.0f MiB", b / 1048576.0);
  else if (b >= 1024.0 && std::fmod(b, 1024.0) == 0) std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

CollectiveSpec make_spec(const Topology& topo, const std::string& op, const std::string& ranks, const std::string& algo,
                         const std::string& proto, const std::string& where) {
  CollectiveSpec s;
  const auto kind = parse_collective(op);
  if (!kind)
    throw InputError(where + "op: unknown collective \"" + op +
                     "\" (all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, send_recv)");
  s.kind = *kind;
  if (ranks.empty()) {
    for (int r = 0; r < topo.gpu_count(); ++r) s.ranks.push_back(r);
  } else {
    s.ranks = parse_ranks(ranks);
  }
  if (algo != "auto") {
    const auto a = parse_algorithm(algo);
    if (!a)
      throw InputError(where + "algo: unknown algorithm \"" + algo +
                       "\" (auto, ring, tree, nvls, hierarchical, direct, halving_doubling)");
    s.algorithm = a;
  }
  if (proto != "auto") {
    const auto p = parse_protocol(proto);
    if (!p) throw InputError(where + "proto: unknown protocol \"" + proto + "\" (auto, LL, LL128, Simple)");
    s.protocol = p;
  }
  return s;
}

}  // namespace

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  auto number = [&](const std::string& s) {
    try {
      std::size_t pos = 0;
      const long v = std::stol(s, &pos);
      if (pos != s.size() || v < 0 || v > (1 << 24)) throw std::invalid_argument("range");
      return int(v);
    } catch (const std::exception&) {
      throw InputError("--ranks: \"" + s + "\" is not a rank (expected e.g. 0,1,2,3 or 0-7 or 0-63:8)");
    }
  };
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw InputError("--ranks: empty item in \"" + text + "\"");
    const auto dash = item.find('-');
    if (dash == std::string::npos) {
      out.push_back(number(item));
      continue;
    }
    const auto colon = item.find(':');
    const int lo = number(item.substr(0, dash));
    const int hi = number(item.substr(dash + 1, colon == std::string::npos ? std::string::npos : colon - dash - 1));
    const int step = colon == std::string::npos ? 1 : number(item.substr(colon + 1));
    if (hi < lo || step < 1) throw InputError("--ranks: \"" + item + "\" is an empty range");
    for (int r = lo; r <= hi; r += step) out.push_back(r);
  }
  if (out.empty()) throw InputError("--ranks: no ranks in \"" + text + "\"");
  return out;
}

std::vector<double> parse_sizes(const std::string& text, double factor) {
  std::vector<double> out;
  if (!(factor > 1)) throw InputError("--factor: must be greater than 1");
  const auto colon = text.find(':');
  if (colon != std::string::npos) {
    const double lo = parse_size(text.substr(0, colon), "--sizes");
    const double hi = parse_size(text.substr(colon + 1), "--sizes");
    if (lo <= 0 || hi < lo) throw InputError("--sizes: \"" + text + "\" needs 0 < min <= max");
    for (double s = lo; s <= hi * (1 + 1e-12) && out.size() < 200; s *= factor) out.push_back(std::round(s));
    return out;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parse_size(item, "--sizes"));
  if (out.empty()) throw InputError("--sizes: no sizes in \"" + text + "\"");
  return out;
}

void collective_command(const CollectiveOptions& o, std::ostream& os) {
  if (o.fields) {
    os << "Keys of a cluster file (hardware/clusters/*.json); GB/s is bytes, Gb/s is bits:\n";
    for (const ClusterField& f : cluster_fields())
      os << "  " << f.key << " (" << f.type << ", default " << f.default_value << "): " << f.help << "\n";
    return;
  }
  if (o.list) {
    for (const auto& n : cluster_names()) {
      std::string file;
      const ClusterSpec c = load_cluster(n, &file);
      char line[256];
      std::snprintf(line, sizeof line, "%-28s %5d GPUs  %s\n", n.c_str(), c.gpus(), c.description.c_str());
      os << line;
    }
    return;
  }
  if (o.cluster.empty()) throw InputError("--cluster: required (a shipped cluster, see --list, or a file)");
  std::string file;
  ClusterSpec spec = load_cluster(o.cluster, &file);
  // The calibrated link figures of the cluster's GPU (a profile's "links" section), if any.
  LinkProfile links;
  if (o.profile == "auto") links = default_profile_for(load_gpu(spec.gpu)).links;
  else if (o.profile != "datasheet") links = parse_profile(load_json_file(o.profile), o.profile, "", load_gpu(spec.gpu)).links;
  spec = apply_link_profile(std::move(spec), links);
  const Topology topo = cluster_topology(spec, file, "");
  CollectiveSpec s = make_spec(topo, o.op, o.ranks, o.algo, o.proto, "--");
  if (const auto problem = check_collective(topo, s)) throw InputError("--ranks/--algo: " + *problem);
  const auto sizes = parse_sizes(o.sizes, o.factor);
  const int n = int(s.ranks.size());
  const double factor = bus_bandwidth_factor(s.kind, n);
  Json rows = Json::array();
  if (o.format == "text") {
    int nodes = 0, last = -1;
    for (int r : s.ranks)
      if (topo.node_of(r) != last) ++nodes, last = topo.node_of(r);
    os << "# scaleout collective: " << collective_name(s.kind) << " on " << spec.name << " (" << n << " ranks, "
       << topo.node_count() << " node" << (topo.node_count() == 1 ? "" : "s") << " of " << spec.gpus_per_node << " "
       << spec.gpu << ")\n";
    os << "#  algbw = size / time; busbw = algbw * " << factor << " (nccl-tests' factor); GB/s = 1e9 bytes/s\n";
    if (!links.empty()) os << "#  links calibrated: " << links.measured_on << "\n";
    char line[160];
    std::snprintf(line, sizeof line, "# %14s %12s %9s %9s  %-16s %s\n", "size (B)", "time (us)", "algbw", "busbw",
                  "algorithm", "protocol");
    os << line;
  }
  for (double bytes : sizes) {
    s.bytes = bytes;
    CollectiveChoice choice;
    const double t = time_collective(topo, s, &choice);
    const double algbw = t > 0 ? bytes / t / 1e9 : 0;
    const double busbw = algbw * factor;
    if (o.format == "json") {
      rows.push_back(Json{{"size_bytes", bytes},
                          {"time_s", t},
                          {"algbw_gbps", algbw},
                          {"busbw_gbps", busbw},
                          {"algorithm", algorithm_name(choice.algorithm)},
                          {"protocol", protocol_name(choice.protocol)}});
    } else {
      char line[160];
      std::snprintf(line, sizeof line, "  %14.0f %12.2f %9.2f %9.2f  %-16s %s\n", bytes, t * 1e6, algbw, busbw,
                    algorithm_name(choice.algorithm), protocol_name(choice.protocol));
      os << line;
    }
  }
  if (o.format == "json") os << rows.dump(2) << "\n";
}

int validate_network(const std::string& file, std::ostream& os) {
  const Json j = load_json_file(file);
  JsonReader top(j, file, "");
  top.ignore("description");
  top.ignore("sources");
  top.ignore("method");
  const Json& rows = top.raw("rows");
  top.finish();
  if (!rows.is_array()) throw InputError(file, "/rows", "expected an array");
  os << "# Published nccl-tests results against scaleout (" << file << ")\n";
  os << "# target: bus bandwidth within 10 % for bandwidth rows, time within 25 % for latency rows\n\n";
  os << "| id | cluster | op | ranks | size | metric | published | scaleout | error | target | algorithm |\n";
  os << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  int off = 0, total = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string path = "/rows/" + std::to_string(i);
    JsonReader r(rows[i], file, path);
    const std::string id = r.string("id");
    const std::string cluster = r.string("cluster");
    const std::string metric = r.choice("metric", {"busbw", "time", "nvlink_bidirectional", "nic"});
    const bool link_metric = metric == "nvlink_bidirectional" || metric == "nic";
    const std::string op = link_metric ? r.string_or("op", "all_reduce") : r.string("op");
    const std::string ranks = r.string_or("ranks", "");
    const std::string algo = r.string_or("algorithm", "auto");
    const double bytes = link_metric ? r.quantity_or("size", QuantityKind::bytes, 0) : r.quantity("size", QuantityKind::bytes);
    const double published = r.number("published", 0);
    const double tolerance = r.number_or("tolerance", metric == "time" ? 0.25 : 0.10, 0, 10);
    r.ignore("source");
    r.ignore("quote");
    r.ignore("notes");
    r.ignore("system");
    r.finish();
    std::string cfile;
    const ClusterSpec spec = [&] {
      try {
        return load_cluster(cluster, &cfile);
      } catch (const InputError& e) {
        throw InputError(file, path + "/cluster", e.what());
      }
    }();
    const Topology topo = cluster_topology(spec, cfile, "");
    double ours = 0;
    std::string algorithm = "-", unit = "GB/s";
    int group = 0;
    if (metric == "nvlink_bidirectional") {
      // Both directions of GPU 0's NVLink links: the figure vendors quote.
      for (LinkId l = 0; l < topo.link_count(); ++l)
        if (topo.link(l).kind == LinkKind::nvlink && topo.link(l).src == topo.gpu_vertex(0)) ours += 2 * topo.link(l).bandwidth / 1e9;
    } else if (metric == "nic") {
      for (LinkId l = 0; l < topo.link_count(); ++l)
        if (topo.link(l).kind == LinkKind::network && topo.link(l).src == topo.nic_of(0)) ours = topo.link(l).bandwidth / 1e9;
    } else {
      CollectiveSpec s = make_spec(topo, op, ranks, algo, "auto", file + ": " + path + "/");
      s.bytes = bytes;
      if (const auto problem = check_collective(topo, s)) throw InputError(file, path, *problem);
      CollectiveChoice choice;
      const double t = time_collective(topo, s, &choice);
      const double busbw = bytes / t / 1e9 * bus_bandwidth_factor(s.kind, int(s.ranks.size()));
      ours = metric == "busbw" ? busbw : t * 1e6;
      unit = metric == "busbw" ? "GB/s" : "us";
      algorithm = std::string(algorithm_name(choice.algorithm)) + "/" + protocol_name(choice.protocol);
      group = int(s.ranks.size());
    }
    const double err = (ours - published) / published;
    const bool ok = std::fabs(err) <= tolerance;
    ++total;
    if (!ok) ++off;
    char line[512];
    std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %s | %s | %.2f %s | %.2f %s | %+.1f %% | %s (%.0f %%) | %s |\n",
                  id.c_str(), cluster.c_str(), link_metric ? "-" : op.c_str(),
                  group ? std::to_string(group).c_str() : "-", bytes > 0 ? human_size(bytes).c_str() : "-", metric.c_str(),
                  published, unit.c_str(), ours, unit.c_str(), err * 100, ok ? "within" : "OFF", tolerance * 100,
                  algorithm.c_str());
    os << line;
  }
  os << "\n" << (total - off) << " of " << total << " rows within target.\n";
  return off;
}

void register_collective_command(CLI::App& app) {
  auto o = std::make_shared<CollectiveOptions>();
  CLI::App* c = app.add_subcommand("collective", "One collective on a cluster's topology, printed like nccl-tests");
  c->add_option("--cluster", o->cluster, "Shipped cluster name (hardware/clusters, see --list) or a cluster file");
  c->add_flag("--list", o->list, "List the shipped clusters");
  c->add_flag("--fields", o->fields, "List the keys a cluster file takes, with units and defaults");
  c->add_option("--op", o->op, "all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, send_recv")
      ->default_val("all_reduce");
  c->add_option("--ranks", o->ranks, "Group: 0,1,2,3 or 0-7 or 0-63:8 (default: every GPU)");
  c->add_option("--algo", o->algo, "auto, ring, tree, nvls, hierarchical, direct, halving_doubling")->default_val("auto");
  c->add_option("--proto", o->proto, "auto, LL, LL128, Simple")->default_val("auto");
  c->add_option("--sizes", o->sizes, "MIN:MAX (times --factor), a list A,B,C, or one size; e.g. 8B:8GiB")
      ->default_val("8B:8GiB");
  c->add_option("--factor", o->factor, "Size step factor for MIN:MAX")->default_val(2);
  c->add_option("--format", o->format, "Output format")->check(CLI::IsMember({"text", "json"}))->default_val("text");
  c->add_option("--profile", o->profile,
                "Link figures: auto (the links of the GPU's shipped profile, when calibrated), datasheet, or a profile file")
      ->default_val("auto");
  c->callback([o] { collective_command(*o, std::cout); });

  // `scaleout validate network FILE`, next to the other validations.
  for (CLI::App* validate : app.get_subcommands([](CLI::App* a) { return a->get_name() == "validate"; })) {
    auto file = std::make_shared<std::string>();
    CLI::App* v = validate->add_subcommand("network", "Published nccl-tests results (validation/network/published.json)");
    v->add_option("published", *file, "published.json")->required();
    v->callback([file] { validate_network(*file, std::cout); });
  }
}

}  // namespace scaleout
