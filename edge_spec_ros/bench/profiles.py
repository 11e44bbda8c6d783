"""Link and compute profiles for the side-by-side benchmark.

The FSD paper's Go2 deployment (Table 8): drafting γT_p = 288 ms at γ = 4 (T_p = 72 ms on the Jetson
Orin), verification T_q = 620 ms (Qwen2-VL-7B with 27 exits on an A100), communication
T_c = 120 ms over Wi-Fi 6. Table 4 charges 2T_c per round, so ``go2-paper`` emulates T_c as the
one-way delay of each direction. ``wifi`` keeps this machine's real compute and emulates a Wi-Fi
link of about 120 ms round trip.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edge_spec_ros.wire.emulator import LinkShape


@dataclass(frozen=True)
class Profile:
    name: str
    uplink: LinkShape | None
    downlink: LinkShape | None
    tp_s: float = 0.0  # emulated draft forward (0: this machine's real drafter time)
    tq_s: float = 0.0  # emulated verification forward (0: real), by the verifier the bench starts
    description: str = ""

    def serve_args(self) -> tuple[str, ...]:
        """``edge-spec-ros serve`` options of the verifier this profile needs: compute emulation is
        the server operator's setting, never a request field."""
        return ("--emulate-tq-s", repr(self.tq_s)) if self.tq_s else ()

    def emulated(self) -> list[str]:
        """Plain statements of what this profile emulates."""
        lines = []
        for name, shape in (("uplink", self.uplink), ("downlink", self.downlink)):
            if shape is None or shape.ideal:
                lines.append(f"{name}: real loopback, not emulated")
            else:
                lines.append(f"{name}: emulated one-way delay {shape.delay_s * 1e3:.0f} ms, jitter "
                             f"0-{shape.jitter_s * 1e3:.0f} ms, {shape.bandwidth_bps / 1e6:.0f} Mbit/s, "
                             f"{shape.loss:.1%} loss (each loss costs a {shape.rto_s * 1e3:.0f} ms retransmission)")
        lines.append(f"draft forward T_p: emulated {self.tp_s * 1e3:.0f} ms" if self.tp_s
                     else "draft forward T_p: real, this machine")
        lines.append(f"verification T_q: emulated {self.tq_s * 1e3:.0f} ms (exit l of L at l/L of it) by the "
                     "verifier the bench starts (serve --emulate-tq-s; a running one: its operator's setting)"
                     if self.tq_s else "verification T_q: real, this machine")
        return lines


WIFI = LinkShape(delay_s=0.060, jitter_s=0.010, bandwidth_bps=50e6, loss=0.005)
GO2_PAPER_LINK = LinkShape(delay_s=0.120, jitter_s=0.0, bandwidth_bps=100e6, loss=0.0)

PROFILES = {
    "loopback": Profile("loopback", None, None, description="real compute, real loopback"),
    "wifi": Profile("wifi", WIFI, WIFI, description="real compute, Wi-Fi-like link (~120 ms RTT)"),
    "go2-paper": Profile("go2-paper", GO2_PAPER_LINK, GO2_PAPER_LINK, tp_s=0.288 / 4, tq_s=0.620,
                         description="the FSD paper's Go2 conditions (Table 8) on the real code paths"),
}


def profile_named(name: str) -> Profile:
    """A profile of ``PROFILES``, or ``measured`` from a JSON file written by ``bench.gpu_timing``
    (a path ending in ``.json``): that hardware's T_p and T_q emulated over ``go2-paper``'s link."""
    if name in PROFILES:
        return PROFILES[name]
    if not name.endswith(".json"):
        raise ValueError(f"unknown profile {name!r}: choose one of {sorted(PROFILES)} or give a bench.gpu_timing "
                         "JSON file")
    try:
        figures = json.loads(Path(name).read_text())
        tp_s, tq_s = float(figures["tp_s"]), float(figures["tq_s"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"profile {name!r}: not a bench.gpu_timing result ({type(exc).__name__}: {exc})") from None
    if not (tp_s > 0 and tq_s > 0):
        raise ValueError(f"profile {name!r}: T_p and T_q must be > 0, got {tp_s} and {tq_s}")
    where = figures.get("stamp", {}).get("machine", "unknown machine")
    return Profile("measured", GO2_PAPER_LINK, GO2_PAPER_LINK, tp_s=tp_s, tq_s=tq_s,
                   description=f"T_p and T_q measured by bench.gpu_timing ({name}: {where}) over go2-paper's link")
