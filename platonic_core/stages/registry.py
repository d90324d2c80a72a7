"""Every flow's stages by flow name: the one place that knows them all. A new flow is one
module beside this one and one line in FLOW_SPECS."""

from __future__ import annotations

from ..contract import StageInstance, StageSpec
from .ablation import ABLATE_SPECS
from .audit import AUDIT_SPECS
from .caption import CAPTION_SPECS
from .compare import COMPARE_SPECS
from .match import MATCH_SPECS
from .pipeline import SPECS

# flow name (StageInstance.flow) -> its stages by name
FLOW_SPECS: dict[str, dict[str, StageSpec]] = {
    "pipeline": SPECS,
    "compare": COMPARE_SPECS,
    "ablate": ABLATE_SPECS,
    "audit": AUDIT_SPECS,
    "match": MATCH_SPECS,
    "caption": CAPTION_SPECS,
}


def spec_of(inst: StageInstance) -> StageSpec:
    return FLOW_SPECS[inst.flow][inst.stage]
