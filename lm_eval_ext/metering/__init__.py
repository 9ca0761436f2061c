"""Inference-energy metering for any lm-eval model: sources, windows, the ledger, the seam.

A small API in the shape of Zeus's ``begin_window``/``end_window``::

    meter = EnergyMeter(select_source(cuda_indices=[0]), sync=torch.cuda.synchronize)
    meter.measure_idle(1.0)
    meter.begin_window("bbq")
    ...                                   # the work to meter
    window = meter.end_window("bbq")      # EnergyWindow(seconds, joules_by_device, source, flags)

``window.total_joules`` is None (never 0) when energy could not be measured; ``window.flags``
says why or what to be careful about. :class:`Metering` (:mod:`.seam`) puts per-task windows
around an lm-eval ``LM`` of any backend (through
:class:`~lm_eval_ext.backends.metered_lm.MeteredLM`). Nothing here imports a model backend.
"""

from lm_eval_ext.metering.ledger import InferenceLedger
from lm_eval_ext.metering.meter import EnergyMeter, EnergyWindow
from lm_eval_ext.metering.seam import BOUNDARY, Metering
from lm_eval_ext.metering.sources import (
    NvmlSource,
    RaplSource,
    UnavailableSource,
    select_source,
)

__all__ = [
    "BOUNDARY",
    "EnergyMeter",
    "EnergyWindow",
    "InferenceLedger",
    "Metering",
    "NvmlSource",
    "RaplSource",
    "UnavailableSource",
    "select_source",
]
