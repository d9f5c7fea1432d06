"""What a phase writes, as its stage declares it (`StageDef.writes`): the artifacts it may write and the
record of what its manifest reports. The runner refuses a result that writes another artifact, so a
stage's declaration says everything it writes, as its `reads` say everything its key covers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Writes:
    """A stage's outputs: the artifacts it writes (each with its schema in `storage.schemas`) and the type of
    its manifest's `outputs` (None: a plain dict)."""

    artifacts: tuple[str, ...]
    outputs: type | None = None

    def check(self, stage: str, written: set[str]) -> None:
        """ValueError naming any artifact of `written` the stage does not declare."""
        undeclared = sorted(written - set(self.artifacts))
        if undeclared:
            raise ValueError(f"stage '{stage}' wrote {undeclared}, which its StageDef does not declare "
                             f"(writes: {', '.join(self.artifacts)})")
