"""Inference-energy metering: energy sources, windows, and the per-task ledger.

A small API in the shape of Zeus's ``begin_window``/``end_window``::

    meter = EnergyMeter(select_source(cuda_indices=[0]), sync=torch.cuda.synchronize)
    meter.measure_idle(1.0)
    meter.begin_window("bbq")
    ...                                   # the work to meter
    window = meter.end_window("bbq")      # EnergyWindow(seconds, joules_by_device, source, flags)

``window.total_joules`` is None (never 0) when energy could not be measured; ``window.flags``
says why or what to be careful about.
"""

from lm_eval_ext.model_wrappers.metering.ledger import InferenceLedger
from lm_eval_ext.model_wrappers.metering.meter import EnergyMeter, EnergyWindow
from lm_eval_ext.model_wrappers.metering.sources import (
    NvmlSource,
    RaplSource,
    UnavailableSource,
    select_source,
)

__all__ = [
    "EnergyMeter",
    "EnergyWindow",
    "InferenceLedger",
    "NvmlSource",
    "RaplSource",
    "UnavailableSource",
    "select_source",
]
