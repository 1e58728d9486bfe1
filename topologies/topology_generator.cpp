// The generator form of a topology document: nodes of GPUs and the intra, numa and inter link classes between them.

#include "topologies/topology_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include <optional>
#include <string_view>

#include "topologies/gpu_arch.hpp"

namespace charm::topo::reader {

namespace {

/// What NCCL point-to-point attains on a generation's NVLink, as fractions of the link's per-direction rate
/// (public nccl-tests figures): all of a GPU's concurrent transfers together (the injection), and one peer's
/// transfer alone in NCCL's default configuration (a few channels). Hopper (NVLink 4, 450 GB/s): ring
/// all-reduce bus bandwidth 369 GB/s on 8 x H100 without NVLink SHARP (NVIDIA/nccl-tests issue 309), 0.82 of
/// the link; sendrecv between two H100s about 80 GB/s in the default configuration, up to 180 with more
/// channels (NVIDIA/nccl-tests issue 268), 0.18. Ampere (NVLink 3, 300 GB/s): all-reduce 232 GB/s on 8 x A100
/// (NVIDIA/nccl-tests issue 175), 0.77; one peer's default share is not published: Hopper's ratio of one peer
/// to the aggregate (80 / 369) is assumed, 0.17.
struct NcclAttainment {
  double injection = 0, per_flow = 0;
  std::string_view source;
  bool per_flow_assumed = false;
};

std::optional<NcclAttainment> nccl_nvlink_attainment(std::string_view family) {
  if (family == "hopper")
    return NcclAttainment{369.0 / 450, 80.0 / 450, "nccl-tests on H100 NVLink 4, issues 309 and 268", false};
  if (family == "ampere")
    return NcclAttainment{232.0 / 300, 232.0 / 300 * 80 / 369, "nccl-tests on A100 NVLink 3, issue 175", true};
  return std::nullopt;
}

/// On a dedicated GPU link (NVLink through NVSwitch) the wire is rarely the limit: what the collective
/// library's channels attain is. Where the file leaves those fields out, the stack's limits apply (a fitted
/// stack's), else NCCL's published attainment on the GPU family's NVLink.
void apply_link_limits(const Node& intra_node, Topology& t, Link& intra) {
  const StackSpec& st = t.stack;
  if (intra.sharing != Sharing::Dedicated) {
    t.sources.links = "the file's link rates (shared links divide them max-min fairly)";
    return;
  }
  const bool own_flow = intra_node.has("per_flow_gbps"), own_injection = intra_node.has("injection_gbps");
  if (own_flow || own_injection || st.intra_flow_gbps > 0 || st.intra_injection_gbps > 0) {
    if (!own_flow && st.intra_flow_gbps > 0) intra.per_flow_gbps = std::min(st.intra_flow_gbps, intra.bandwidth_gbps);
    if (!own_injection && st.intra_injection_gbps > 0)
      intra.injection_gbps = std::min(st.intra_injection_gbps, intra.bandwidth_gbps);
    t.sources.links = fmt::format("the file's link rates; NVLink attained {} GB/s per GPU ({})",
                                  intra.injection_gbps > 0 ? fmt::format("{:.4g}", intra.injection_gbps) : "all",
                                  own_injection ? "the file's" : "the stack's");
    return;
  }
  const auto nccl = nccl_nvlink_attainment(t.gpu.family);
  if (!nccl) {
    t.sources.links = "the file's link rates";
    t.sources.assumed.push_back("NVLink attained at its full rate (no nccl-tests figures for this GPU family)");
    return;
  }
  intra.injection_gbps = nccl->injection * intra.bandwidth_gbps;
  intra.per_flow_gbps = nccl->per_flow * intra.bandwidth_gbps;
  t.sources.links = fmt::format("the file's link rates; NVLink attains {:.4g} GB/s per GPU, {:.4g} per peer ({})",
                                intra.injection_gbps, intra.per_flow_gbps, nccl->source);
  if (nccl->per_flow_assumed) t.sources.assumed.push_back("NVLink 3 per-peer rate at NVLink 4's per-peer share");
}

/// A link rate no link of its kind carries a direction, with the unit slip it likely is; empty when plausible.
/// Per direction: a NIC at most 100 GB/s (800 Gb/s); PCIe 6.0 x16 121 GB/s (5.0: 63, Hopper's and Blackwell's
/// host interface); NVLink 3 (Ampere) 300 GB/s a GPU, NVLink 4 (Hopper) 450, NVLink 5 (Blackwell) 900 (NVIDIA's
/// datasheets give both directions together: 600, 900, 1800).
std::string unit_slip(LinkKind kind, double gbps, std::string_view family) {
  if (kind == LinkKind::Nic && gbps > 100)
    return fmt::format("{:g} GB/s a direction is more than any NIC carries (800 Gb/s is 100 GB/s): a NIC's line rate "
                       "in Gb/s is 1/8 of it in GB/s, and NCCL attains about 0.94 of that (400 Gb/s: 46-48 GB/s)",
                       gbps);
  if (kind == LinkKind::Pcie && gbps > 121)
    return fmt::format("{:g} GB/s a direction is more than PCIe 6.0 x16 carries (121 GB/s; 5.0 x16: 63): a rate in "
                       "Gb/s, or both directions added, is the likely slip",
                       gbps);
  if (kind != LinkKind::NvLink) return {};
  const double most = family == "ampere" ? 300 : family == "hopper" ? 450 : 900;
  const char* gen = family == "ampere" ? "NVLink 3" : family == "hopper" ? "NVLink 4" : "NVLink 5";
  if (gbps <= most) return {};
  return fmt::format("{:g} GB/s a direction is more than {} carries per GPU ({:g} GB/s; its datasheet's {:g} is both "
                     "directions added): the datasheet's figure, or a rate in Gb/s, is the likely slip",
                     gbps, gen, most, 2 * most);
}

/// A generated cluster's shape and link parameters, read from its file.
struct Generator {
  long nodes = 1, per_node = 1, numa = 1;
  Link intra, numa_link, inter;
  std::string nic = "per_gpu";
  long gpus_per_nic = 1;  // > 1: a NIC vertex shared by that many GPUs, each reaching it over PCIe
  Link nic_pcie;          // each GPU's own lanes to the switch the NIC sits on
};

/// The inter block: the NIC's link, how GPUs share NICs, the PCIe hop to a shared NIC.
Status read_inter(const Node& root, Generator& g) {
  if (!root.has("inter")) return root.missing("inter");
  const Node in = root.at("inter");
  if (auto s = parse_link_params(in, g.inter, "shared"); !s) return s.error();
  CHARM_TRY_LET(n, get_string(in, "nic", false, "per_gpu"));
  if (n != "per_gpu" && n != "per_node")
    return in.at("nic").error(fmt::format("must be \"per_gpu\" or \"per_node\", got \"{}\"", n));
  g.nic = n;
  if (in.has("gpus_per_nic")) {
    if (in.has("nic")) return in.at("gpus_per_nic").error("give \"nic\" or \"gpus_per_nic\", not both");
    CHARM_TRY_LET(k, get_int(in, "gpus_per_nic", true, 1, 1));
    if (g.per_node % k != 0)
      return in.at("gpus_per_nic").error(fmt::format("must divide gpus_per_node ({}), got {}", g.per_node, k));
    g.gpus_per_nic = k;
  }
  // PCIe 5.0 x16: 64 GB/s per direction, the datasheet rate of the GPU-to-NIC hop.
  CHARM_TRY_LET(pcie, get_quantity(in, "pcie_gbps", false, 64, Quantity::Bandwidth));
  if (in.has("pcie_gbps") && g.gpus_per_nic == 1)
    return in.at("pcie_gbps").error("applies with \"gpus_per_nic\" > 1 only (a NIC per GPU is one link)");
  g.nic_pcie.bandwidth_gbps = pcie;
  return {};
}

/// The link blocks (intra, numa, inter) and the stack limits the intra block carries.
Status read_generator_links(const Node& root, Topology& t, Generator& g) {
  if (!root.has("intra")) return root.missing("intra");
  if (auto s = parse_link_params(root.at("intra"), g.intra, "dedicated"); !s) return s.error();
  // Dedicated GPU links are NVLink through NVSwitch, shared ones a PCIe switch,
  // unless intra.kind says otherwise; within a node both rank before the host
  // bridge and the NIC, so the choice only names the links.
  if (g.intra.kind == LinkKind::Unspecified)
    g.intra.kind = g.intra.sharing == Sharing::Dedicated ? LinkKind::NvLink : LinkKind::Pcie;
  if (const auto why = unit_slip(g.intra.kind, g.intra.bandwidth_gbps, t.gpu.family);
      !why.empty() && root.at("intra").has("bandwidth_gbps"))
    t.warnings.push_back(root.at("intra").at("bandwidth_gbps").error(why).message());
  apply_link_limits(root.at("intra"), t, g.intra);
  g.numa_link.kind = LinkKind::Host;
  g.inter.kind = LinkKind::Nic;  // one link stands for the NIC and its port on the non-blocking fabric
  // A block the shape does not use is read past (a sweep over nodes reaches 1 with the file's inter block):
  // said in a warning, since its numbers change nothing.
  if (g.numa == 1 && root.has("numa"))
    t.warnings.push_back(root.at("numa")
                             .error("ignored: it applies with numa_per_node > 1 only (one NUMA node per node has no "
                                    "links between NUMA nodes, so its numbers change nothing)")
                             .message());
  if (g.nodes == 1 && root.has("inter"))
    t.warnings.push_back(root.at("inter")
                             .error("ignored: it applies with nodes > 1 only (one node has no links between nodes, "
                                    "so its numbers change nothing)")
                             .message());
  if (g.numa > 1) {
    if (!root.has("numa")) return root.missing("numa");
    if (auto s = parse_link_params(root.at("numa"), g.numa_link, "shared"); !s) return s.error();
  }
  g.nic_pcie.kind = LinkKind::Pcie;
  g.nic_pcie.sharing = Sharing::Dedicated;
  if (g.nodes > 1) {
    if (auto s = read_inter(root, g); !s) return s;
    if (const auto why = unit_slip(LinkKind::Nic, g.inter.bandwidth_gbps, t.gpu.family); !why.empty())
      t.warnings.push_back(root.at("inter").at("bandwidth_gbps").error(why).message());
  }
  return {};
}

/// The vertices (GPUs, switches, host bridges, NICs, the fabric) and links of the generated
/// cluster, node by node, and its block structure.
void build_generator_graph(const Generator& gen, Topology& t) {
  t.levels = {"node", "numa"};
  const long per_numa = gen.per_node / gen.numa;
  const int G = static_cast<int>(gen.nodes * gen.per_node);
  for (long nd = 0; nd < gen.nodes; ++nd)
    for (long g = 0; g < gen.per_node; ++g) {
      t.vertex_names.push_back(fmt::format("n{}.gpu{}", nd, g));
      t.gpu_place.push_back({int(nd), int(g / per_numa)});
    }
  auto add_vertex = [&](std::string name) {
    t.vertex_names.push_back(std::move(name));
    return static_cast<int>(t.vertex_names.size()) - 1;
  };
  const int fabric = gen.nodes > 1 ? add_vertex("fabric") : -1;
  for (long nd = 0; nd < gen.nodes; ++nd) {
    std::vector<int> sw;
    for (long m = 0; m < gen.numa; ++m)
      sw.push_back(add_vertex(gen.numa > 1 ? fmt::format("n{}.numa{}.switch", nd, m) : fmt::format("n{}.switch", nd)));
    const int host = gen.numa > 1 ? add_vertex(fmt::format("n{}.host", nd)) : sw[0];
    for (long g = 0; g < gen.per_node; ++g) {
      Link l = gen.intra;
      l.a = int(nd * gen.per_node + g);
      l.b = sw[std::size_t(g / per_numa)];
      t.links.push_back(l);
    }
    if (gen.numa > 1)
      for (int s : sw) {
        Link l = gen.numa_link;
        l.a = s;
        l.b = host;
        t.links.push_back(l);
      }
    if (gen.nodes > 1 && gen.gpus_per_nic > 1) {
      for (long k = 0; k < gen.per_node / gen.gpus_per_nic; ++k) {
        const int nic_v = add_vertex(fmt::format("n{}.nic{}", nd, k));
        for (long g = k * gen.gpus_per_nic; g < (k + 1) * gen.gpus_per_nic; ++g) {
          Link l = gen.nic_pcie;
          l.a = int(nd * gen.per_node + g);
          l.b = nic_v;
          t.links.push_back(l);
        }
        Link l = gen.inter;
        l.a = nic_v;
        l.b = fabric;
        t.links.push_back(l);
      }
    } else if (gen.nodes > 1) {
      if (gen.nic == "per_gpu") {
        for (long g = 0; g < gen.per_node; ++g) {
          Link l = gen.inter;
          l.a = int(nd * gen.per_node + g);
          l.b = fabric;
          t.links.push_back(l);
        }
      } else {
        Link l = gen.inter;
        l.a = host;
        l.b = fabric;
        t.links.push_back(l);
      }
    }
  }
  // Nodes are copies of one another joined by the fabric: their vertices and
  // links were added node by node above, after the GPUs and the fabric.
  if (gen.nodes > 1) {
    const auto per_node_vertices = (t.vertex_names.size() - std::size_t(G) - 1) / std::size_t(gen.nodes);
    t.blocks = {int(gen.nodes), int(gen.per_node), int(t.links.size() / std::size_t(gen.nodes)), G + 1,
                int(per_node_vertices)};
  }
}

}  // namespace

Status parse_generator(const Node& root, Topology& t, int& num_gpus_out) {
  if (auto s = check_fields(root,
                            {"schema", "name", "notes", "gpu", "stack", "nodes", "gpus_per_node", "numa_per_node",
                             "intra", "numa", "inter", "domain", "routes", "calibration"},
                            " in a generated topology (one with \"nodes\")");
      !s)
    return s;
  CHARM_TRY_LET(nodes, get_int(root, "nodes", true, 1, 1, kMaxGeneratedGpus));
  CHARM_TRY_LET(per_node, get_int(root, "gpus_per_node", true, 1, 1, kMaxGpus));
  if (nodes * per_node > kMaxGeneratedGpus)
    return root.at("gpus_per_node")
        .error(fmt::format("nodes x gpus_per_node = {} x {}: at most {} GPUs are supported", nodes, per_node,
                           kMaxGeneratedGpus));
  CHARM_TRY_LET(numa, get_int(root, "numa_per_node", false, 1, 1, kMaxGpus));
  if (per_node % numa != 0)
    return root.at("numa_per_node").error(fmt::format("must divide gpus_per_node ({}), got {}", per_node, numa));
  Generator g;
  g.nodes = nodes;
  g.per_node = per_node;
  g.numa = numa;
  if (auto s = read_generator_links(root, t, g); !s) return s;
  build_generator_graph(g, t);
  const int G = static_cast<int>(nodes * per_node);
  std::string dflt = nodes > 1 ? "node" : numa > 1 ? "numa" : "none";
  CHARM_TRY_LET(domain, get_string(root, "domain", false, dflt));
  if (domain == "node")
    t.domain_level = nodes > 1 ? 0 : -1;
  else if (domain == "numa")
    t.domain_level = 1;
  else if (domain == "none")
    t.domain_level = -1;
  else
    return root.at("domain").error(fmt::format("must be \"node\", \"numa\" or \"none\", got \"{}\"", domain));
  num_gpus_out = G;
  return {};
}

}  // namespace charm::topo::reader
