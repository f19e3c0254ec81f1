"""qspec_torch: answers qspec program cases with PyTorch modules.

`qspec gen` writes a program case's inputs and manifest (spec/cases.md [CASE-GEN-PROG]);
this package builds each variant's program from torch modules — a linear as torchao's
Float8Linear under the region's recipe or as a bf16 nn.Linear, a checkpoint as
torch.utils.checkpoint (use_reentrant=False), an island as bf16 modules, a gdn op as the
spec's Gated DeltaNet written in torch — runs it forward and backward, eagerly or under
torch.compile, and writes the outputs, gradients and the trace it observes for
`qspec verify` ([CASE-VERIFY-PROG]). What it cannot express it refuses with the reason.
"""

from .manifest import NotSupported, load_manifest
from .program import build_program, run_variant

__all__ = ["NotSupported", "load_manifest", "build_program", "run_variant"]
