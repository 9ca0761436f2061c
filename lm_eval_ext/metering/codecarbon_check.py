"""Optional whole-run CodeCarbon cross-check (``codecarbon=true``).

CodeCarbon samples power every second and covers CPU, RAM and the whole GPU device, without
CUDA synchronisation; it is a secondary estimate beside the NVML windows, not a replacement.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

#: Estimated water use per kWh (DIA-style range used by the seed paper). An estimate only.
WATER_L_PER_KWH = (1.8, 4.0)


class CodeCarbonCheck:
    """Start/stop an ``OfflineEmissionsTracker`` around the whole run.

    Args:
        gpu_ids: GPU indices to attribute (None: all visible).
        country_iso_code: Grid location for CodeCarbon's own carbon factor (default CAN).
        region: Sub-national region (default ontario, the seed paper's campaign profile).
        carbon_intensity_g_per_kwh: If given, also report carbon = kWh x this intensity.
    """

    def __init__(self, gpu_ids: Sequence[int] | None = None, *, country_iso_code: str = "CAN",
                 region: str | None = "ontario", carbon_intensity_g_per_kwh: float | None = None):
        from codecarbon import OfflineEmissionsTracker

        self.settings = {"country_iso_code": country_iso_code, "region": region,
                         "carbon_intensity_g_per_kwh": carbon_intensity_g_per_kwh}
        self._tracker = OfflineEmissionsTracker(
            country_iso_code=country_iso_code, region=region, gpu_ids=list(gpu_ids) if gpu_ids
            else None, measure_power_secs=1, tracking_mode="process", save_to_file=False,
            log_level=logging.ERROR, allow_multiple_runs=True,
        )
        self._result: dict[str, Any] | None = None

    def start(self) -> None:  # noqa: D102
        self._tracker.start()

    def stop(self) -> dict[str, Any]:
        """Stop once (later calls return the same figures)."""
        if self._result is not None:
            return self._result
        emissions_kg = self._tracker.stop()
        data = self._tracker.final_emissions_data
        total_kwh = float(data.energy_consumed)
        intensity = self.settings["carbon_intensity_g_per_kwh"]
        self._result = {
            "scope": "whole run after model load (CPU, RAM, whole GPU devices; 1 s sampling)",
            "duration_seconds": float(data.duration),
            "cpu_kwh": float(data.cpu_energy),
            "gpu_kwh": float(data.gpu_energy),
            "ram_kwh": float(data.ram_energy),
            "total_kwh": total_kwh,
            "emissions_kg_codecarbon": None if emissions_kg is None else float(emissions_kg),
            "carbon_g_from_intensity": None if intensity is None else total_kwh * float(intensity),
            "water_litres_estimate": {
                "low": total_kwh * WATER_L_PER_KWH[0], "high": total_kwh * WATER_L_PER_KWH[1],
                "note": "ESTIMATE: kWh x 1.8-4.0 L/kWh (DIA-style), not a measurement",
            },
            **self.settings,
        }
        return self._result
