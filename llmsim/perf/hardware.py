"""GPU datasheet numbers (dense 16-bit tensor peak, memory, bandwidth, the link between GPUs of one instance).

Sources: NVIDIA's datasheets, AIConfigurator's system YAMLs and llm-analysis's GPU JSONs (the profiles' raw data
PROVENANCE). These are spec numbers, not measurements; measured efficiencies live in profiles. The interconnect
columns price tensor- and expert-parallel communication (llmsim.perf.parallel); each row names its link kind,
whose source is in ``INTERCONNECTS``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmsim.errors import ConfigError

GB = 1e9
GiB = 1024**3

# link kind -> where its per-direction bandwidth comes from (datasheets quote NVLink bidirectional: halved here)
INTERCONNECTS = {
    "nvlink2": "NVIDIA V100 SXM2 datasheet: NVLink 300 GB/s total, 150 GB/s per direction",
    "nvlink3": "NVIDIA A100 SXM datasheet: NVLink 600 GB/s total, 300 GB/s per direction",
    "nvlink4": "NVIDIA H100 / H200 SXM datasheets: NVLink 900 GB/s total, 450 GB/s per direction",
    "nvlink-bridge": "the card's datasheet NVLink bridge figure (A40, RTX A6000 and RTX 3090 112.5, A30 200, Titan RTX "
                     "100 GB/s total), halved",
    "pcie4": "PCI-SIG PCIe 4.0 x16: 32 GB/s per direction (no NVLink on the card)",
    "pcie5": "PCI-SIG PCIe 5.0 x16: 64 GB/s per direction (no NVLink on the card)",
}
# NCCL's latency for one small-message collective within a node is of the order of 10 us on both NVLink and PCIe
# (nccl-tests' all_reduce_perf at 8 B); one figure for every link, the roofline's constant.
COLLECTIVE_LATENCY_S = 10e-6


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    bandwidth: float  # bytes/s
    peak_flops: float  # dense fp16/bf16 tensor FLOP/s
    tdp_w: float = 0.0
    interconnect_bw: float = 0.0  # bytes/s per direction to a peer (NVLink or PCIe)
    host_link_bw: float = 25e9  # bytes/s GPU<->CPU, used for KV swap
    interconnect: str = ""  # link kind, a key of INTERCONNECTS (where interconnect_bw comes from)
    interconnect_latency_s: float = COLLECTIVE_LATENCY_S  # one collective's fixed cost


_GPUS = [
    GpuSpec("a100-80gb", int(80 * GiB), 2039e9, 312e12, 400, 300e9, 25e9, "nvlink3"),
    GpuSpec("a100-80gb-pcie", int(80 * GiB), 1935e9, 312e12, 300, 32e9, 25e9, "pcie4"),
    GpuSpec("a100-40gb", int(40 * GiB), 1555e9, 312e12, 400, 300e9, 25e9, "nvlink3"),
    GpuSpec("h100", int(80 * GiB), 3350e9, 989e12, 700, 450e9, 50e9, "nvlink4"),
    GpuSpec("h100-pcie", int(80 * GiB), 2000e9, 756.5e12, 350, 64e9, 50e9, "pcie5"),
    GpuSpec("h200", int(141 * GiB), 4800e9, 989e12, 700, 450e9, 50e9, "nvlink4"),
    # L40S datasheet: 48 GB GDDR6, 864 GB/s, 362 dense BF16 / FP16 tensor TFLOPS (733 with sparsity); a datacenter
    # part: the rate with FP32 accumulate is the full rate.
    GpuSpec("l40s", int(48 * GiB), 864e9, 362e12, 350, 32e9, 25e9, "pcie4"),
    GpuSpec("l4", int(24 * GiB), 300e9, 121e12, 72, 32e9, 25e9, "pcie4"),
    # RTX 4090 (NVIDIA Ada GPU Architecture whitepaper, appendix: 1,008 GB/s GDDR6X; 128 SMs at 2,520 MHz boost,
    # 72 MB L2): 165.2 dense FP16 / BF16 tensor TFLOPS with FP32 accumulate, the rate a bf16 GEMM runs at (330.3
    # only with FP16 accumulate: GeForce cards halve the fp32-accumulate rate, as the RTX 3090 below). Device memory
    # as reported by torch in the LLMServingSim vLLM run.
    GpuSpec("rtx4090", 25_250_627_584, 1008e9, 165.2e12, 450, 32e9, 25e9, "pcie4"),
    GpuSpec("a40", int(48 * GiB), 696e9, 149.7e12, 300, 56e9, 25e9, "nvlink-bridge"),
    GpuSpec("a30", int(24 * GiB), 933e9, 165e12, 165, 100e9, 25e9, "nvlink-bridge"),
    GpuSpec("a10", int(24 * GiB), 600e9, 125e12, 150, 32e9, 25e9, "pcie4"),
    GpuSpec("v100-16gb", int(16 * GiB), 900e9, 125e12, 300, 150e9, 12e9, "nvlink2"),
    GpuSpec("v100-32gb", int(32 * GiB), 900e9, 125e12, 300, 150e9, 12e9, "nvlink2"),
    GpuSpec("titan-rtx", int(24 * GiB), 672e9, 130e12, 280, 50e9, 12e9, "nvlink-bridge"),
    # RTX A6000 (datasheet: 48 GB GDDR6, 768 GB/s, 309.7 tensor TFLOPS with sparsity -> 154.8 dense) and GeForce
    # RTX 3090 (Ampere GA102 whitepaper: 936 GB/s; 71 dense FP16/BF16 tensor TFLOPS with FP32 accumulate, the rate a
    # bf16 GEMM runs at; 142 only with FP16 accumulate): the GPUs of LLMServingSim's v0 operator tables.
    GpuSpec("rtx-a6000", int(48 * GiB), 768e9, 154.8e12, 300, 56.25e9, 25e9, "nvlink-bridge"),
    GpuSpec("rtx3090", int(24 * GiB), 936e9, 71e12, 350, 56.25e9, 25e9, "nvlink-bridge"),
    # RTX PRO 6000 Blackwell Server Edition: 96 GB GDDR7, 1,597 GB/s; dense bf16 peak from the
    # aiconfigurator rtx_pro_6000_server.yaml (used only for roofline fallbacks); PCIe 5, no NVLink.
    GpuSpec("rtx-pro-6000", int(96 * GiB), 1597e9, 503.8e12, 600, 64e9, 50e9, "pcie5"),
]

GPUS: dict[str, GpuSpec] = {g.name: g for g in _GPUS}
_ALIASES = {"a100": "a100-80gb", "v100": "v100-32gb", "4090": "rtx4090", "rtx-4090": "rtx4090",
            "h100-80gb": "h100", "h100-sxm": "h100", "a100-sxm": "a100-80gb",
            "rtxpro6000": "rtx-pro-6000", "rtx_pro_6000": "rtx-pro-6000", "titanrtx": "titan-rtx",
            "a6000": "rtx-a6000", "rtxa6000": "rtx-a6000", "3090": "rtx3090", "rtx-3090": "rtx3090"}


def get_gpu(name: str) -> GpuSpec:
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in GPUS:
        raise ConfigError(f"unknown GPU {name!r}; known GPUs: {', '.join(sorted(GPUS))}")
    return GPUS[key]


@dataclass(frozen=True)
class LinkSpec:
    """A link KV caches cross between instances (prefill/decode disaggregation, llmsim.cluster.disagg).

    ``bandwidth`` is bytes/s per direction for one GPU's share of the link (0: the GPU's own ``interconnect_bw``,
    i.e. NVLink); with ``per_gpu`` every GPU of a tensor-parallel instance moves its KV shard over its own link,
    so the copy is as fast as the smaller TP degree of the two sides times that. Nominal datasheet figures: what
    vLLM's NIXL connector or NCCL reach in practice is lower; scale with ``efficiency``."""

    name: str
    bandwidth: float
    latency: float  # seconds per transfer (setup and first byte)
    per_gpu: bool
    efficiency: float = 0.8  # achieved / nominal bandwidth


LINKS: dict[str, LinkSpec] = {
    # NVLink within a node: A100 NVLink3 300 GB/s per direction, H100 NVLink4 450 GB/s (GpuSpec.interconnect_bw)
    "nvlink": LinkSpec("nvlink", 0.0, 5e-6, True),
    # one HDR InfiniBand NIC (200 Gb/s) per GPU, as in a DGX A100
    "infiniband": LinkSpec("infiniband", 25e9, 10e-6, True),
    # PCIe 4.0 x16 through the host (32 GB/s nominal)
    "pcie": LinkSpec("pcie", 32e9, 10e-6, True),
    # one 100 GbE port per node, shared by its GPUs
    "ethernet": LinkSpec("ethernet", 12.5e9, 50e-6, False),
}


def transfer_seconds(nbytes: int, link: LinkSpec, gpu: GpuSpec, tp_src: int = 1, tp_dst: int = 1) -> float:
    """Time to copy ``nbytes`` of KV cache over ``link`` from a ``tp_src``-GPU to a ``tp_dst``-GPU instance."""
    bw = (link.bandwidth or gpu.interconnect_bw) * link.efficiency
    if link.per_gpu:
        bw *= min(tp_src, tp_dst)
    if not bw > 0:
        raise ConfigError(f"link {link.name}: no bandwidth for {gpu.name} (interconnect_bw {gpu.interconnect_bw})")
    return link.latency + nbytes / bw
