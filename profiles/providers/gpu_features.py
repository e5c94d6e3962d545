"""What the calibrated estimate knows of a GPU beyond its roofline: L2 size, SM count and boost clock.

The roofline (``llmsim.perf.hardware``: dense bf16 peak and DRAM bandwidth) misses why a small operator runs
faster on one GPU than another of the same bandwidth: an operator whose bytes fit in L2 is served at the L2's
rate, which grows with the number of SMs and their clock (each SM's L2 slice bandwidth is a fixed number of bytes
per clock), while DRAM bandwidth is set by the memory (HBM vs GDDR) alone. GDDR GPUs with large L2 (L40S, RTX
PRO 6000) thus outrun their datasheet on small operators and an HBM GPU with a small L2 (A100) does not.

Figures from the vendors' datasheets and architecture whitepapers (Volta, Turing, Ampere GA100 / GA102, Ada
AD102 / AD104, Hopper GH100, Blackwell GB202): (L2 MiB, SMs, boost clock GHz).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmsim.errors import ConfigError

MIB = 2**20


@dataclass(frozen=True)
class GpuFeatures:
    """The features of one GPU the calibrated estimate uses besides its datasheet roofline."""

    l2_bytes: float
    sms: int
    clock_ghz: float
    geforce: bool = False  # a GeForce card: bf16 with fp32 accumulate at half the FP16 rate (GEFORCE)

    @property
    def sm_clock(self) -> float:
        """SMs x clock (SM-cycles per second, in units of 1e9): what an on-chip rate scales with."""
        return self.sms * self.clock_ghz


_TABLE: dict[str, tuple[float, int, float]] = {
    "a100-80gb": (40, 108, 1.410),
    "a100-80gb-pcie": (40, 108, 1.410),
    "a100-40gb": (40, 108, 1.410),
    "h100": (50, 132, 1.980),
    "h100-pcie": (50, 114, 1.755),
    "h200": (50, 132, 1.980),
    "l40s": (96, 142, 2.520),
    "l4": (48, 58, 2.040),
    # NVIDIA Ada GPU Architecture whitepaper, appendix (GeForce RTX 4090 / L40S-class AD102): 72 MB of L2, 128 SMs,
    # 2,520 MHz boost (L40S: 96 MB, 142 SMs, 2,520 MHz).
    "rtx4090": (72, 128, 2.520),
    "a40": (6, 84, 1.740),
    "a30": (24, 56, 1.440),
    "a10": (6, 72, 1.695),
    "v100-16gb": (6, 80, 1.530),
    "v100-32gb": (6, 80, 1.530),
    "titan-rtx": (6, 72, 1.770),
    # NVIDIA Ampere GA102 GPU Architecture whitepaper (v2.0), GA102 has 6,144 KB of L2; RTX A6000 datasheet / the
    # whitepaper's appendix: 84 SMs, 1,800 MHz boost; GeForce RTX 3090: 82 SMs, 1,695 MHz boost.
    "rtx-a6000": (6, 84, 1.800),
    "rtx3090": (6, 82, 1.695),
    "rtx-pro-6000": (128, 188, 2.617),
}
# GeForce cards: their whitepapers list dense FP16 / BF16 tensor TFLOPS with FP32 accumulate at half the rate with
# FP16 accumulate (Ampere GA102 whitepaper: RTX 3090 71 vs 142; Ada whitepaper: RTX 4090 165.2 vs 330.3); the
# workstation and datacenter parts (RTX A6000, L40S, RTX PRO 6000, A100, H100) list both at the full rate. vLLM's
# bf16 GEMMs and attention accumulate in fp32, so the hardware table's peak is the halved rate for these two, and
# at that rate they are not power-limited: GPU Boost raises the clock until the power or voltage limit (NVIDIA,
# "GPU Boost"), above the rated boost clock. The calibrated estimate gives them a clock factor of their own.
GEFORCE = ("rtx3090", "rtx4090")
GPU_FEATURES: dict[str, GpuFeatures] = {g: GpuFeatures(l2 * MIB, sms, clk, g in GEFORCE)
                                        for g, (l2, sms, clk) in _TABLE.items()}


def gpu_features(name: str) -> GpuFeatures:
    """The features of a GPU of the hardware table, or a one-line error naming the GPUs that have them."""
    try:
        return GPU_FEATURES[name]
    except KeyError:
        raise ConfigError(f"no L2 / SM / clock figures for GPU {name!r} (known: {', '.join(GPU_FEATURES)}); "
                          "add them to llmsim.profiles.providers.gpu_features") from None
